// mask_method.h: a sparse attention method as seen by the fidelity evaluation: which keys each
// (head, query block) keeps, built from one layer's captured Q/K.
//
// The format mirrors sparse/sparse_index.h (the engine's one sparse index format), so any sparse
// method can be plugged in by converting its index: for each index head and each block of
// kBlockQ = 64 query rows, sorted key ranges [begin, end) plus single key columns; the kept set
// of a row is their union intersected with the causal mask (key <= row). Query head h uses index
// head h / (n_head / n_index_head): per query head, per KV head or shared by all heads.
// Methods: every method of the engine's one registry (methods/registry.h), built by the
// method's own CPU index builder: adding a method to the engine adds it here.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "longctx/engine.h"
#include "methods/method.h"

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

// Checks a spec's syntax and method names (methods/spec.h) without a model: errors before work.
void check_mask_spec(const std::string& spec);
// Any --attn spec of the engine's registry (methods/registry.h), for model ctx: each captured
// layer is one prefill chunk of the whole prompt; the method's route() and CPU index builder
// decide the kept keys exactly as the engine's prefill of a single-chunk prompt does (a dense
// route keeps every causal key). Throws Error for unknown methods or bad parameters.
std::unique_ptr<MaskMethod> make_mask_method(const std::string& spec, const MethodContext& ctx);

}  // namespace longctx::eval
