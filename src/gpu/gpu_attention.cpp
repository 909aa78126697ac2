// gpu_attention.cpp: see gpu_attention.h.
#include "gpu/gpu_attention.h"

#include <algorithm>

#include "gpu/memory_plan.h"
#include "kernels/cuda/sparse_attention.h"
#include "sparse/a_shape_index.h"
#include "sparse/attention_method.h"
#include "sparse/method_args.h"
#include "sparse/minference_config.h"
#include "sparse/minference_method.h"
#include "util/error.h"

namespace longctx::gpu {

namespace {

cuda::GpuPatternKind gpu_kind(PatternKind k) {
  switch (k) {
    case PatternKind::VerticalSlash: return cuda::GpuPatternKind::VerticalSlash;
    case PatternKind::BlockSparse: return cuda::GpuPatternKind::BlockSparse;
    case PatternKind::AShape: return cuda::GpuPatternKind::AShape;
  }
  fail("internal: unknown MInference pattern kind");
}

}  // namespace

bool GpuAttention::sparse_at(int layer, int64_t n_kv) const {
  switch (kind) {
    case GpuAttnKind::Dense: return false;
    case GpuAttnKind::AShape: return true;
    case GpuAttnKind::MInference: return layer >= dense_layers && n_kv >= dense_below;
  }
  return false;
}

bool GpuAttention::ever_sparse(int n_layer, int64_t capacity) const {
  switch (kind) {
    case GpuAttnKind::Dense: return false;
    case GpuAttnKind::AShape: return true;
    case GpuAttnKind::MInference: return dense_layers < n_layer && dense_below <= capacity;
  }
  return false;
}

bool GpuAttention::prompt_wide_vs(int n_layer) const {
  if (kind != GpuAttnKind::MInference) return false;
  for (int l = std::max(dense_layers, 0); l < n_layer && l < int(layers.size()); ++l)
    for (const auto& h : layers[size_t(l)])
      if (h.kind == cuda::GpuPatternKind::VerticalSlash) return true;
  return false;
}

GpuAttention parse_gpu_attention(const std::string& spec, const ModelConfig& c) {
  // The CPU factory first: it owns the spec grammar and every error message (unknown method,
  // bad parameters, missing/malformed config, config for another model).
  const MethodContext mc{c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.name};
  (void)make_attention_method(spec, mc);
  GpuAttention a;
  a.spec = spec;
  const auto eq = spec.find('=');
  const std::string name = spec.substr(0, eq), arg = eq == std::string::npos ? "" : spec.substr(eq + 1);
  if (name == "dense") return a;
  if (name == "a_shape") {
    a.kind = GpuAttnKind::AShape;
    AShapeParams p;  // the CPU method's defaults; its factory has accepted arg above
    if (!arg.empty()) {
      const auto parts = split_spec(arg, ',');
      p.sink = parse_count(parts.at(0), "a_shape", "SINK");
      p.window = parse_count(parts.at(1), "a_shape", "WINDOW");
    }
    a.sink = p.sink;
    a.window = p.window;
    return a;
  }
  if (name == "minference") {
    const MInferenceOptions opt = parse_minference_options(arg);
    MInferenceConfig cfg = MInferenceConfig::load(opt.config_path);
    cfg.validate(c.n_layer, c.n_head, c.name, opt.config_path);
    a.kind = GpuAttnKind::MInference;
    a.dense_below = opt.dense_below;
    a.dense_layers = opt.dense_layers;
    a.layers.resize(cfg.layers.size());
    for (size_t l = 0; l < cfg.layers.size(); ++l) {
      for (const HeadPattern& hp : cfg.layers[l]) {
        cuda::GpuHeadPattern g;
        g.kind = gpu_kind(hp.kind);
        g.vertical = hp.vertical;
        g.slash = hp.slash;
        if (hp.kind == PatternKind::VerticalSlash) {  // as build_head_index: VS budgets only
          g.vertical = int64_t(double(hp.vertical) * opt.ratio);
          g.slash = int64_t(double(hp.slash) * opt.ratio);
        }
        a.layers[l].push_back(g);
      }
    }
    return a;
  }
  fail("attention method '{}' is not implemented on the GPU (use --device cpu)", name);
}

std::string attention_problem(const GpuAttention& a, const ModelConfig& c) {
  if (a.dense()) return "";
  if (a.kind == GpuAttnKind::MInference && a.dense_layers >= c.n_layer) return "";  // never sparse
  // cuda::sparse_attention runs head_dim 128 on the Hopper kernel, 64 on the generic one; the
  // GPU model itself accepts only those two (check_supported)
  if (c.head_dim != 128 && c.head_dim != 64)
    return fmt::format("attention method '{}' on the GPU needs head_dim 64 or 128, but {} has head_dim {}", a.spec,
                       c.name, c.head_dim);
  return "";
}

cuda::MinferenceBuilderShape builder_shape(const ModelConfig& c, int64_t chunk, int64_t capacity) {
  cuda::MinferenceBuilderShape s;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.max_q = chunk;
  s.max_kv = capacity;
  return s;
}

AShapeLayout a_shape_layout(int64_t chunk) {
  AShapeLayout l;
  l.max_blocks = (chunk + cuda::kSparseQBlock - 1) / cuda::kSparseQBlock;
  const size_t B = size_t(l.max_blocks);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  l.range_ptr = take((B + 1) * sizeof(int64_t));
  l.ranges = take(2 * B * 2 * sizeof(int32_t));  // at most two ranges per block
  l.col_ptr = take((B + 1) * sizeof(int64_t));
  cuda::DeviceSparseIndex worst;
  worst.n_index_head = 1;
  worst.n_qblk = l.max_blocks;
  worst.n_ranges = 2 * l.max_blocks;
  worst.n_cols = 0;
  l.workspace_bytes = cuda::sparse_attention_workspace_bytes(worst);
  l.workspace = take(l.workspace_bytes);
  l.total = off;
  return l;
}

size_t minference_index_bound(const GpuAttention& a, const ModelConfig& c, int64_t chunk, int64_t capacity) {
  // Mirrors minference_index.cu: VS budgets floored at 30 / 50 and clamped to the keys, each VS
  // head keeps k_v + 3 k_s int32 of lines; a BS head min(key blocks, max(k_b, 2)) selections per
  // query block; the index has at most k_s ranges + k_v columns (VS), k_b + 2 ranges (BS: the
  // diagonal blocks are forced) or 2 ranges (A-shape) per (head, query block); the sparse
  // kernel's workspace holds a normalised copy.
  constexpr int64_t kMinVertical = 30, kMinSlash = 50;
  const int64_t n = std::max<int64_t>(capacity, 1), qblk = (chunk + cuda::kSparseQBlock - 1) / cuda::kSparseQBlock;
  const int64_t nkb = (n + cuda::kSparseQBlock - 1) / cuda::kSparseQBlock;
  size_t worst = 0;
  for (size_t l = size_t(std::max(a.dense_layers, 0)); l < a.layers.size(); ++l) {
    int64_t lines = 0, sel = 0, ranges = 0, cols = 0;
    for (const cuda::GpuHeadPattern& hp : a.layers[l]) {
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
    worst_index.n_index_head = c.n_head;
    worst_index.n_qblk = qblk;
    worst_index.n_ranges = ranges;
    worst_index.n_cols = cols;
    const size_t bytes = align_up(size_t(lines) * 4) + align_up(size_t(sel) * 4) + align_up(size_t(ranges) * 8) +
                         align_up(size_t(cols) * 4) + cuda::sparse_attention_workspace_bytes(worst_index);
    worst = std::max(worst, bytes);
  }
  return align_up(worst + worst / 2);  // its buffers grow by 1.5x steps: up to 1.5x the largest need
}

size_t sparse_prefill_bytes(const GpuAttention& a, const ModelConfig& c, int64_t chunk, int64_t capacity) {
  switch (a.kind) {
    case GpuAttnKind::Dense: return 0;
    case GpuAttnKind::AShape: return a_shape_layout(chunk).total;
    case GpuAttnKind::MInference:
      if (!a.ever_sparse(c.n_layer, capacity)) return 0;
      return align_up(cuda::MinferenceIndexBuilder::device_bytes(builder_shape(c, chunk, capacity))) +
             minference_index_bound(a, c, chunk, capacity);
  }
  return 0;
}

}  // namespace longctx::gpu
