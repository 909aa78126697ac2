// fuzz_common.h: what every parser fuzz input goes through, shared by the libFuzzer targets
// (fuzz/fuzz_*.cpp) and the CTest fuzz smoke (tests/loader/test_fuzz_smoke.cpp).
//
// parse_and_exercise() parses bytes as GGUF or safetensors. A longctx::Error is the expected
// outcome for bad input and is swallowed; anything else (another exception type, a sanitizer
// report, a crash) is a bug. On success it checks the parser's promises: every tensor lies
// inside the buffer and has exactly dtype_row_bytes(numel) bytes; then it touches every byte,
// dequantizes the start of each tensor, dumps the metadata and describes the file.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "loader/describe.h"
#include "loader/gguf_reader.h"
#include "loader/model_file.h"
#include "loader/safetensors_reader.h"
#include "util/error.h"

namespace longctx::fuzz {

enum class Format { kGguf, kSafetensors };

// Elements dequantized per tensor: enough to run every block path, bounded for speed.
inline constexpr int64_t kMaxDequantElements = 1 << 14;

inline void check_invariants(const ModelFile& mf, std::span<const uint8_t> bytes) {
  for (const auto& t : mf.tensors()) {
    const uint8_t* b = bytes.data();
    if (t.nbytes > 0 && (t.data < b || t.data > b + bytes.size() || t.nbytes > size_t(b + bytes.size() - t.data)))
      throw std::logic_error("tensor '" + t.name + "' points outside the buffer");
    if (dtype_row_bytes(t.dtype, t.numel()) != t.nbytes)
      throw std::logic_error("tensor '" + t.name + "' byte size does not match its shape");
  }
}

inline void exercise(const ModelFile& mf) {
  (void)mf.metadata().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)describe_model_file(mf, true);
  std::vector<float> buf;
  unsigned acc = 0;
  for (const auto& t : mf.tensors()) {
    for (size_t i = 0; i < t.nbytes; ++i) acc += t.data[i];
    const DTypeInfo& di = dtype_info(t.dtype);
    if (!di.can_dequantize) continue;
    const int64_t n = std::min(t.numel(), kMaxDequantElements) / di.block_size * di.block_size;
    buf.resize(size_t(n));
    dequantize(t.dtype, t.data, buf.data(), n);
  }
  volatile unsigned sink = acc;
  (void)sink;
}

// Returns true if the bytes parsed, false on a longctx::Error; lets anything else escape.
inline bool parse_and_exercise(Format f, std::span<const uint8_t> bytes) {
  try {
    std::unique_ptr<ModelFile> mf;
    if (f == Format::kGguf) mf = open_gguf_bytes(bytes, "fuzz.gguf");
    else mf = open_safetensors_bytes(bytes, "fuzz.safetensors");
    check_invariants(*mf, bytes);
    exercise(*mf);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace longctx::fuzz
