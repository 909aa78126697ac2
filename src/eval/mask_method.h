// mask_method.h: a sparse attention method as seen by the fidelity evaluation: which keys each
// (head, query block) keeps, built from one layer's captured Q/K.
//
// The format mirrors sparse/sparse_index.h (the engine's one sparse index format), so any sparse
// method can be plugged in by converting its index: for each index head and each block of
// kBlockQ = 64 query rows, sorted key ranges [begin, end) plus single key columns; the kept set
// of a row is their union intersected with the causal mask (key <= row). Query head h uses index
// head h / (n_head / n_index_head): per query head, per KV head or shared by all heads.
// Built-in methods: "dense" (everything), "a_shape[=SINK,WINDOW]" (sinks + local window at
// block granularity, as in the engine's A-shape) and "minference=CFG.json" (the engine's
// MInference index). Others register with register_mask_method().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "longctx/engine.h"

namespace longctx::eval {

inline constexpr int64_t kMaskBlockQ = 64;

struct KeySpan {
  int64_t begin = 0, end = 0;  // [begin, end)
};

struct BlockKeys {
  std::vector<KeySpan> ranges;
  std::vector<int64_t> cols;
};

struct LayerMask {
  int64_t n_tokens = 0;
  std::vector<std::vector<BlockKeys>> heads;  // [n_index_head][n_query_blocks]
  int64_t n_blocks() const { return (n_tokens + kMaskBlockQ - 1) / kMaskBlockQ; }
};

class MaskMethod {
 public:
  virtual ~MaskMethod() = default;
  virtual std::string name() const = 0;  // the spec it was made from, for tables and pictures
  // Builds the kept keys for one captured layer (may look at Q/K, like a dynamic method does).
  virtual LayerMask build(const AttnCapture& layer) const = 0;
};

// arg: the text after "name=" ("" if none).
using MaskMethodFactory = std::function<std::unique_ptr<MaskMethod>(const std::string& spec, const std::string& arg)>;

// Adds (or replaces) a method; built-ins are registered on first use.
void register_mask_method(const std::string& name, MaskMethodFactory factory);
std::vector<std::string> mask_method_names();
// minference=CFG.json: the engine's MInference index builders with a per-head config
// (mask_minference.cpp).
std::unique_ptr<MaskMethod> make_minference_mask(const std::string& spec, const std::string& arg);
// "a_shape=64,512" -> the a_shape method with that arg; throws Error listing valid names.
std::unique_ptr<MaskMethod> make_mask_method(const std::string& spec);

// The A-shape keys for one block of rows [q0, q1): [0, sink) and [q0 - window + 1, q1).
BlockKeys a_shape_block(int64_t sink, int64_t window, int64_t q0, int64_t q1);

}  // namespace longctx::eval
