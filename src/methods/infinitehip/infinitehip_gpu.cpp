// infinitehip_gpu.cpp: InfiniteHiP's GPU builder (prefill).
// Per sparse prefill step of a layer: stage i (ihip_stage(hp, layer, i)) runs
// cuda::ihip_prune_stage_prefill over every 64-query block of the chunk (stage 0 from the block's
// candidate range, stage i from stage i-1's lists), then cuda::ihip_prefill_index turns the last
// stage's lists into the sparse index (sinks, one range per l_c-run, pads, window): the key sets of
// InfiniteHipMethod::build_index with rope=off (tests/cuda/test_ihip_gpu.cpp checks the stages and
// the index against the CPU reference).
// Memory, for chunks of C queries (B = ceil(C / 64) blocks) against `capacity` keys: per stage
// B * cap_i survivors (cap_i = the stage's largest k over the layers), the chunk scores
// B * n_kv_head * max_chunks (fp32), B * (2 + cap_last / l_c_last) ranges and the sparse kernel's
// workspace for them.
#include "methods/infinitehip/infinitehip_gpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/ihip_prune.h"
#include "methods/gpu_carve.h"
#include "util/error.h"

namespace longctx {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Layout {
  int64_t n_blk = 0;
  std::vector<int64_t> cap;         // [N] survivors per block of stage i (its largest k)
  std::vector<size_t> out, out_len; // [N] offsets
  int64_t max_chunks = 0;           // the largest stage's chunk bound (sizes the scores)
  size_t scores = 0, range_ptr = 0, ranges = 0, col_ptr = 0, workspace = 0, workspace_bytes = 0;
  int64_t ranges_per_blk = 0;
  size_t total = 0;
};

class IhipGpu final : public GpuMethod {
 public:
  IhipGpu(IhipParams hp, MethodContext model) : hp_(std::move(hp)), model_(std::move(model)) {}
  ~IhipGpu() override { release(); }

  size_t device_bytes(const GpuShape& shape) const override { return layout(shape).total; }
  void allocate(const GpuShape& shape, cuda::Stream) override {
    release();
    l_ = layout(shape);
    capacity_ = shape.capacity;
    buf_ = static_cast<char*>(cuda::dev_malloc(l_.total));
  }
  void release() override {
    cuda::dev_free(buf_);
    buf_ = nullptr;
  }

  GpuIndex build_prefill(const GpuPrefillStep& st, cuda::Stream s) override {
    if (!buf_) fail("internal: infinitehip prefill with no buffers");
    const int64_t n_blk = ceil_div(st.n_q, cuda::kSparseQBlock);
    if (n_blk > l_.n_blk || st.n_kv > capacity_)
      fail("internal: infinitehip prefill of {} queries / {} keys in buffers for {} blocks / {} keys", st.n_q, st.n_kv,
           l_.n_blk, capacity_);
    cuda::IhipPrefillGpuParams p;
    p.q = st.q;
    p.k = st.k;
    p.n_q = st.n_q;
    p.n_kv = st.n_kv;
    p.q_pos0 = st.q_pos0;
    p.n_head = model_.n_head;
    p.n_kv_head = model_.n_kv_head;
    p.rope_mode = 0;  // rope=off: the cache's rotated keys (make_infinitehip_gpu refuses rope=on)
    p.n_sink = hp_.n_sink;
    p.n_stream = hp_.n_stream;
    const int N = hp_.n_stage();
    // Stage 0's candidates of the chunk's last block bound every block's.
    const int64_t q_last = st.q_pos0 + st.n_q - 1;
    int64_t n_cand = ihip_candidate_end(hp_, q_last) - hp_.n_sink;
    for (int i = 0; i < N; ++i) {
      const IhipStage stage = ihip_stage(hp_, st.layer, i);
      cuda::IhipPrefillStage ps;
      ps.l_c = stage.l_c;
      ps.k = stage.k;
      ps.in = i ? at<int32_t>(l_.out[size_t(i - 1)]) : nullptr;
      ps.in_len = i ? at<int32_t>(l_.out_len[size_t(i - 1)]) : nullptr;
      ps.in_cap = i ? l_.cap[size_t(i - 1)] : 0;
      ps.out = at<int32_t>(l_.out[size_t(i)]);
      ps.out_len = at<int32_t>(l_.out_len[size_t(i)]);
      ps.out_cap = l_.cap[size_t(i)];
      ps.scores = at<float>(l_.scores);
      ps.max_chunks = std::max<int64_t>(1, ceil_div(n_cand, stage.l_c));
      cuda::ihip_prune_stage_prefill(p, ps, s);
      n_cand = std::min(n_cand, stage.k);
    }
    cuda::IhipPrefillIndexParams ip;
    ip.sel = at<int32_t>(l_.out[size_t(N - 1)]);
    ip.sel_len = at<int32_t>(l_.out_len[size_t(N - 1)]);
    ip.sel_cap = l_.cap[size_t(N - 1)];
    ip.l_c = hp_.stages.back().l_c;
    ip.n_q = st.n_q;
    ip.q_pos0 = st.q_pos0;
    ip.n_sink = hp_.n_sink;
    ip.n_stream = hp_.n_stream;
    ip.range_ptr = at<int64_t>(l_.range_ptr);
    ip.ranges = at<int32_t>(l_.ranges);
    ip.col_ptr = at<int64_t>(l_.col_ptr);
    cuda::ihip_prefill_index(ip, s);
    GpuIndex g;
    g.index.n_index_head = 1;
    g.index.n_qblk = n_blk;
    g.index.range_ptr = ip.range_ptr;
    g.index.ranges = ip.ranges;
    g.index.col_ptr = ip.col_ptr;
    g.index.cols = nullptr;
    g.index.n_ranges = n_blk * ip.ranges_per_blk();
    g.index.n_cols = 0;
    g.workspace = buf_ + l_.workspace;
    g.workspace_bytes = l_.workspace_bytes;
    return g;
  }

 private:
  template <class T>
  T* at(size_t off) const { return reinterpret_cast<T*>(buf_ + off); }

  Layout layout(const GpuShape& shape) const {
    Layout l;
    Carve c;
    const int N = hp_.n_stage();
    l.n_blk = std::max<int64_t>(1, ceil_div(shape.chunk, cuda::kSparseQBlock));
    int64_t n_cand = std::max<int64_t>(1, shape.capacity - hp_.n_sink);  // stage-0 candidates, at most
    for (int i = 0; i < N; ++i) {
      int64_t cap = hp_.stages[size_t(i)].k;
      for (int layer = 0; layer < shape.model.n_layer; ++layer) cap = std::max(cap, ihip_stage(hp_, layer, i).k);
      l.cap.push_back(cap);
      l.max_chunks = std::max(l.max_chunks, ceil_div(n_cand, hp_.stages[size_t(i)].l_c));
      l.out.push_back(c.take(size_t(l.n_blk * cap) * 4));
      l.out_len.push_back(c.take(size_t(l.n_blk) * 4));
      n_cand = std::min(n_cand, cap);
    }
    l.scores = c.take(size_t(l.n_blk * shape.model.n_kv_head * l.max_chunks) * 4);
    l.ranges_per_blk = 2 + l.cap.back() / hp_.stages.back().l_c;
    l.range_ptr = c.take(size_t(l.n_blk + 1) * 8);
    l.ranges = c.take(size_t(l.n_blk * l.ranges_per_blk) * 8);
    l.col_ptr = c.take(size_t(l.n_blk + 1) * 8);
    cuda::DeviceSparseIndex worst;
    worst.n_index_head = 1;
    worst.n_qblk = l.n_blk;
    worst.n_ranges = l.n_blk * l.ranges_per_blk;
    l.workspace_bytes = cuda::sparse_attention_workspace_bytes(worst);
    l.workspace = c.take(l.workspace_bytes);
    l.total = c.off;
    return l;
  }

  IhipParams hp_;
  MethodContext model_;
  Layout l_;
  int64_t capacity_ = 0;
  char* buf_ = nullptr;
};

}  // namespace

std::string infinitehip_gpu_problem(const InfiniteHipMethod& m, const MethodContext& model) {
  const IhipParams& hp = m.params();
  if (hp.rope)
    return "infinitehip with rope=on is not implemented on the GPU: its pruning and attention read un-rotated keys, "
           "which the GPU model does not keep (use rope=off, or --device cpu)";
  if (model.head_dim != 128 || model.n_head % model.n_kv_head != 0)
    return fmt::format("infinitehip on the GPU needs head_dim 128 (and GQA groups), but {} has head_dim {}",
                       model.model_name, model.head_dim);
  return "";
}

std::unique_ptr<GpuMethod> make_infinitehip_gpu(const InfiniteHipMethod& m, const MethodContext& model) {
  if (const std::string why = infinitehip_gpu_problem(m, model); !why.empty()) fail("{}", why);
  return std::make_unique<IhipGpu>(m.params(), model);
}

}  // namespace longctx
