// safetensors_reader.h: Hugging Face safetensors files and model directories as a ModelFile.
//
//   open_safetensors_file("model.safetensors")   one file (config.json etc. beside it are read if present)
//   open_safetensors_dir("SmolLM2-135M/")         config.json + model.safetensors, or sharded
//                                                 files listed in model.safetensors.index.json
//   open_safetensors_bytes(bytes, "buf")          a caller-owned in-memory file (fuzzing, tests)
// File layout: u64 header length N | N bytes of JSON {name: {dtype, shape, data_offsets:[b, e]},
// "__metadata__": {...}} | data (offsets relative to its start). Everything is checked: N
// against the file size, the JSON, dtypes, shapes, that e - b == numel * dtype size, that ranges
// lie inside the data and do not overlap, and (for shards) that the index matches the files.
// metadata() = {"config": config.json, "tokenizer": tokenizer.json, "tokenizer_config": ...,
// "generation_config": ...}, each present only if its file is. "__metadata__" is ignored.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loader/model_file.h"

namespace longctx {

class SafetensorsModel : public ModelFile {
 public:
  std::string format() const override { return "safetensors"; }
  const std::vector<std::string>& files() const { return files_; }  // the .safetensors files read

 private:
  friend std::unique_ptr<ModelFile> open_safetensors_file(const std::string&);
  friend std::unique_ptr<ModelFile> open_safetensors_dir(const std::string&);
  friend std::unique_ptr<ModelFile> open_safetensors_bytes(std::span<const uint8_t>, std::string);
  std::vector<std::string> files_;
  std::vector<std::shared_ptr<const void>> owners_;  // memory maps the tensors point into
};

std::unique_ptr<ModelFile> open_safetensors_file(const std::string& path);
std::unique_ptr<ModelFile> open_safetensors_dir(const std::string& dir);
std::unique_ptr<ModelFile> open_safetensors_bytes(std::span<const uint8_t> bytes, std::string name);

// Parses one safetensors image called `name`; appends its tensors (pointing into bytes), in
// file order, to out.
void parse_safetensors(std::span<const uint8_t> bytes, const std::string& name, std::vector<TensorView>& out);

// safetensors dtype string ("BF16") -> DType; throws Error naming `context` for U8, BOOL and
// anything unknown.
DType safetensors_dtype(const std::string& s, const std::string& context);
const char* safetensors_dtype_name(DType t);  // the inverse, for the writer

}  // namespace longctx
