// safetensors_writer.cpp: see safetensors_writer.h.
#include "loader/safetensors_writer.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

#include "loader/quantize.h"
#include "loader/safetensors_reader.h"
#include "loader/write_file.h"
#include "util/error.h"

namespace longctx {
namespace {

using json = nlohmann::json;
constexpr size_t kHeaderAlign = 8;  // the safetensors library pads the header to 8 bytes

std::vector<uint8_t> encode(const SafetensorsTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) fail("write_safetensors: tensor '{}' has a negative dimension", t.name);
    n *= d;
  }
  const size_t want = dtype_row_bytes(t.dtype, n);
  if (!t.raw.empty() || t.values.empty()) {
    if (t.raw.size() != want)
      fail("write_safetensors: tensor '{}' ({}) needs {} raw bytes, got {}", t.name, dtype_info(t.dtype).name, want, t.raw.size());
    return t.raw;
  }
  if (int64_t(t.values.size()) != n)
    fail("write_safetensors: tensor '{}' has {} elements but {} values", t.name, n, t.values.size());
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    fail("write_safetensors: tensor '{}': fp32 values can be written as F32, F16 or BF16, not {}", t.name, dtype_info(t.dtype).name);
  return encode_f32(t.dtype, t.values.data(), n);
}

}  // namespace

std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint8_t> data;
  for (const auto& t : tensors) {
    if (header.contains(t.name)) fail("write_safetensors: tensor '{}' given twice", t.name);
    const auto bytes = encode(t);
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data.insert(data.end(), bytes.begin(), bytes.end());
  }
  std::string text = header.dump();
  text.resize((text.size() + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign, ' ');
  std::vector<uint8_t> out(8 + text.size() + data.size());
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + text.size(), data.data(), data.size());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const auto b = safetensors_bytes(tensors, metadata);
  write_file_bytes(path, b.data(), b.size());
}

void write_safetensors_dir(const std::string& dir, const json& config, const std::vector<SafetensorsTensor>& tensors,
                           int n_shards) {
  namespace fs = std::filesystem;
  if (n_shards < 1) fail("write_safetensors_dir: n_shards must be >= 1, got {}", n_shards);
  fs::create_directories(dir);
  const std::string cfg = config.dump(2);
  write_file_bytes((fs::path(dir) / "config.json").string(), cfg.data(), cfg.size());
  if (n_shards == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
    return;
  }
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  const size_t per = (tensors.size() + size_t(n_shards) - 1) / size_t(n_shards);
  for (int s = 0; s < n_shards; ++s) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n_shards);
    std::vector<SafetensorsTensor> part;
    for (size_t i = size_t(s) * per; i < std::min(tensors.size(), size_t(s + 1) * per); ++i) {
      part.push_back(tensors[i]);
      index["weight_map"][tensors[i].name] = name;
    }
    write_safetensors((fs::path(dir) / name).string(), part, {{"format", "pt"}});
  }
  const std::string idx = index.dump(2);
  write_file_bytes((fs::path(dir) / "model.safetensors.index.json").string(), idx.data(), idx.size());
}

}  // namespace longctx
