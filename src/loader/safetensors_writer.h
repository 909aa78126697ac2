// safetensors_writer.h: write safetensors files and HF-style model directories (tests, tiny models).
//
//   write_safetensors("m.safetensors", {{"w", DType::BF16, {2, 3}, values}}, {{"format", "pt"}});
//   write_safetensors_dir("tiny/", config_json, tensors, /*n_shards=*/2);  // + index.json
// Values are fp32 and encoded as F32, F16 or BF16; `raw` bytes may be given instead for any
// safetensors dtype (I32, F64, ...). The header is padded with spaces to a multiple of 8 bytes,
// as the safetensors library does; tensor data follows contiguously, in the order given (the
// format forbids holes, so a tensor is 8-byte aligned only if those before it are multiples of 8).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loader/model_file.h"

namespace longctx {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major
  std::vector<float> values;   // numel values (encoded as dtype), or empty when raw is used
  std::vector<uint8_t> raw;    // already-encoded bytes (numel * dtype size)
};

std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A Hugging Face model directory: config.json plus model.safetensors (n_shards == 1) or
// model-0000k-of-0000n.safetensors shards and model.safetensors.index.json. Tensors are dealt to
// shards in order, about evenly. Creates dir if needed.
void write_safetensors_dir(const std::string& dir, const nlohmann::json& config,
                           const std::vector<SafetensorsTensor>& tensors, int n_shards = 1);

}  // namespace longctx
