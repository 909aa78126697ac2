// model_file.h: the format-neutral view of a model on disk (GGUF file or HF safetensors dir).
//
// A ModelFile owns the memory maps and exposes:
//   - metadata(): GGUF key/values as JSON (arrays as JSON arrays), or for a safetensors
//     directory {"config": config.json, "tokenizer": tokenizer.json, "tokenizer_config": ...};
//   - tensors(): every tensor with its dtype, shape and validated byte range.
// Shapes are row-major, outermost first (PyTorch order): a linear weight is [out, in] and
// quantized blocks run along the last (innermost) dimension. GGUF's ne[] is reversed to get this.
// Nothing is dequantized here; dequantize() turns a row of any supported dtype into fp32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace longctx {

// GGUF type ids where they exist (value = ggml_type), so GGUF parsing is a range check.
enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

struct DTypeInfo {
  const char* name;   // "Q4_K"
  int block_size;     // elements per block (1 for plain types)
  int block_bytes;    // bytes per block
  bool can_dequantize;
};
// Throws Error for a value that is not a known dtype.
const DTypeInfo& dtype_info(DType t);
bool dtype_is_known(uint32_t raw);
// Bytes for n elements (n must be a multiple of the block size; throws otherwise).
size_t dtype_row_bytes(DType t, int64_t n);

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major, outermost first
  const uint8_t* data = nullptr;  // inside a memory map owned by the ModelFile
  size_t nbytes = 0;
  int64_t numel() const;
  std::string shape_str() const;  // "[576, 49152]"
};

class ModelFile {
 public:
  virtual ~ModelFile() = default;
  virtual std::string format() const = 0;  // "gguf" or "safetensors"
  const std::string& path() const { return path_; }
  const nlohmann::json& metadata() const { return meta_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;
  const TensorView& get(std::string_view name) const;  // throws Error naming the tensor and file

 protected:
  std::string path_;
  nlohmann::json meta_;
  std::vector<TensorView> tensors_;
};

// Opens a .gguf file, a .safetensors file, or a directory holding config.json + *.safetensors
// (single or sharded with model.safetensors.index.json). Throws Error naming the problem.
std::unique_ptr<ModelFile> open_model_file(const std::string& path);

// Dequantizes n elements (a multiple of the dtype's block size) starting at src into dst (fp32).
void dequantize(DType t, const void* src, float* dst, int64_t n);

}  // namespace longctx
