// minference_gpu.cpp: see minference_gpu.h.
// Prompt-wide lines: prepare_prompt() runs the builder's vertical-slash estimate on the prompt's
// last 64 queries; the layer's chunks then convert those lines (reuse_vs_lines) until end_prompt().
#include "methods/minference/minference_gpu.h"

#include <algorithm>

#include "util/error.h"

namespace longctx {

namespace {

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }  // cudaMalloc's alignment

cuda::GpuPatternKind gpu_kind(PatternKind k) {
  switch (k) {
    case PatternKind::VerticalSlash: return cuda::GpuPatternKind::VerticalSlash;
    case PatternKind::BlockSparse: return cuda::GpuPatternKind::BlockSparse;
    case PatternKind::AShape: return cuda::GpuPatternKind::AShape;
  }
  fail("internal: unknown MInference pattern kind");
}

// Whether any step of a cache of `capacity` keys can route sparse.
bool ever_sparse(const MInferenceMethod& m, const GpuShape& shape) {
  return m.options().dense_layers < shape.model.n_layer && m.options().dense_below <= shape.capacity;
}

class MInferenceGpu final : public GpuMethod {
 public:
  MInferenceGpu(const MInferenceMethod& m) : m_(m), layers_(gpu_patterns(m)) {}

  size_t device_bytes(const GpuShape& shape) const override {
    if (!ever_sparse(m_, shape)) return 0;
    return align_up(cuda::MinferenceIndexBuilder::device_bytes(builder_shape(shape.model, shape.chunk, shape.capacity))) +
           minference_index_bound(m_, shape);
  }
  void allocate(const GpuShape& shape, cuda::Stream /*s*/) override {
    release();
    if (ever_sparse(m_, shape))
      builder_ = std::make_unique<cuda::MinferenceIndexBuilder>(builder_shape(shape.model, shape.chunk, shape.capacity));
  }
  void release() override {
    builder_.reset();
    reuse_lines_ = false;
  }

  GpuIndex build_prefill(const GpuPrefillStep& st, cuda::Stream s) override {
    if (!builder_) fail("internal: MInference prefill at layer {} with no index builder", st.layer);
    GpuIndex g;
    g.index = builder_->build(params(st, reuse_lines_), s);
    g.workspace = builder_->attention_workspace();
    g.workspace_bytes = builder_->attention_workspace_bytes();
    return g;
  }
  void prepare_prompt(const GpuPrefillStep& st, cuda::Stream s) override {
    if (!builder_) fail("internal: MInference prompt estimate at layer {} with no index builder", st.layer);
    builder_->estimate_vs(params(st, false), s);
    reuse_lines_ = true;
  }
  void end_prompt() override { reuse_lines_ = false; }

 private:
  cuda::MinferenceIndexParams params(const GpuPrefillStep& st, bool reuse) const {
    if (st.layer < 0 || st.layer >= int(layers_.size()))
      fail("minference: layer {} is outside the config's {} layers", st.layer, layers_.size());
    cuda::MinferenceIndexParams ip;
    ip.q = st.q;
    ip.k = st.k;
    ip.n_q = st.n_q;
    ip.n_kv = st.n_kv;
    ip.q_pos0 = st.q_pos0;
    ip.scale = st.scale;  // the CPU estimate's scale (AttnParams::scale): the model's, not 1/sqrt(d)
    ip.heads = layers_[size_t(st.layer)];
    ip.reuse_vs_lines = reuse;
    return ip;
  }

  const MInferenceMethod& m_;  // outlives this (the model holds both)
  std::vector<std::vector<cuda::GpuHeadPattern>> layers_;
  std::unique_ptr<cuda::MinferenceIndexBuilder> builder_;
  bool reuse_lines_ = false;  // the layer's chunks convert the prompt-wide lines
};

}  // namespace

std::vector<std::vector<cuda::GpuHeadPattern>> gpu_patterns(const MInferenceMethod& m) {
  const double ratio = m.options().ratio;
  std::vector<std::vector<cuda::GpuHeadPattern>> out(m.config().layers.size());
  for (size_t l = 0; l < out.size(); ++l) {
    for (const HeadPattern& hp : m.config().layers[l]) {
      cuda::GpuHeadPattern g;
      g.kind = gpu_kind(hp.kind);
      g.vertical = hp.vertical;
      g.slash = hp.slash;
      if (hp.kind == PatternKind::VerticalSlash) {  // as build_head_index: VS budgets only
        g.vertical = int64_t(double(hp.vertical) * ratio);
        g.slash = int64_t(double(hp.slash) * ratio);
      }
      out[l].push_back(g);
    }
  }
  return out;
}

cuda::MinferenceBuilderShape builder_shape(const MethodContext& model, int64_t chunk, int64_t capacity) {
  cuda::MinferenceBuilderShape s;
  s.n_head = model.n_head;
  s.n_kv_head = model.n_kv_head;
  s.head_dim = model.head_dim;
  s.max_q = chunk;
  s.max_kv = capacity;
  return s;
}

size_t minference_index_bound(const MInferenceMethod& m, const GpuShape& shape) {
  // Mirrors minference_index.cu: VS budgets floored at 30 / 50 and clamped to the keys, each VS
  // head keeps k_v + 3 k_s int32 of lines; a BS head min(key blocks, max(k_b, 2)) selections per
  // query block; the index has at most k_s ranges + k_v columns (VS), k_b + 2 ranges (BS: the
  // diagonal blocks are forced) or 2 ranges (A-shape) per (head, query block); the sparse
  // kernel's workspace holds a normalised copy.
  constexpr int64_t kMinVertical = 30, kMinSlash = 50;
  const int64_t n = std::max<int64_t>(shape.capacity, 1);
  const int64_t qblk = (shape.chunk + cuda::kSparseQBlock - 1) / cuda::kSparseQBlock;
  const int64_t nkb = (n + cuda::kSparseQBlock - 1) / cuda::kSparseQBlock;
  const auto layers = gpu_patterns(m);
  size_t worst = 0;
  for (size_t l = size_t(std::max(m.options().dense_layers, 0)); l < layers.size(); ++l) {
    int64_t lines = 0, sel = 0, ranges = 0, cols = 0;
    for (const cuda::GpuHeadPattern& hp : layers[l]) {
      switch (hp.kind) {
        case cuda::GpuPatternKind::VerticalSlash: {
          const int64_t v = std::min(n, std::max(hp.vertical, kMinVertical));
          const int64_t s = std::min(n, std::max(hp.slash, kMinSlash));
          lines += v + 3 * s;
          ranges += s * qblk;
          cols += v * qblk;
          break;
        }
        case cuda::GpuPatternKind::BlockSparse: {
          const int64_t k = std::min(nkb, std::max<int64_t>(hp.vertical, 2));
          sel += k * qblk;
          ranges += (k + 2) * qblk;
          break;
        }
        case cuda::GpuPatternKind::AShape: ranges += 2 * qblk; break;
      }
    }
    cuda::DeviceSparseIndex worst_index;
    worst_index.n_index_head = shape.model.n_head;
    worst_index.n_qblk = qblk;
    worst_index.n_ranges = ranges;
    worst_index.n_cols = cols;
    const size_t bytes = align_up(size_t(lines) * 4) + align_up(size_t(sel) * 4) + align_up(size_t(ranges) * 8) +
                         align_up(size_t(cols) * 4) + cuda::sparse_attention_workspace_bytes(worst_index);
    worst = std::max(worst, bytes);
  }
  return align_up(worst + worst / 2);  // its buffers grow by 1.5x steps: up to 1.5x the largest need
}

std::unique_ptr<GpuMethod> make_minference_gpu(const MInferenceMethod& m, const MethodContext&) {
  return std::make_unique<MInferenceGpu>(m);
}

}  // namespace longctx
