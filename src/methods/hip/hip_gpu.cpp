// hip_gpu.cpp: HiP's GPU builder.
// Prefill: cuda::hip_estimate_prefill writes the chunk's index straight into fixed buffers sized
// for a full chunk (per query head and 64-query block: sinks, k/b_k blocks, pads, window; the same
// key sets as HipMethod::build_index, tested in tests/cuda/test_hip_gpu_method.cpp). With fp8
// attention tiles (GpuPrefillStep::k_fp8: the fp8 cache's e4m3 rows of the layer) the estimate
// scores those codes (HipPrefillParams::k_fp8), the keys the sparse kernel then reads: the CPU
// twin is HipMethod over e4m3_to_f32(code) (tests/gpu/test_gpu_hip_fp8.cpp).
// Decode: one index per layer (n_seq * n_head rows of k/b_k + 2 ranges) and the layer's
// refresh positions stay on the device; cuda::hip_estimate_decode re-estimates a row only on a
// refresh step (hip_refreshes, decided on the device), so one captured CUDA graph serves refresh
// and cached steps alike. The step's queries come in GpuDecodeStep::q.
// Refused when made (before any work, no GPU needed): k/b_k over the estimator's registers, a
// head_dim past 256 or a CTA over the shared memory limit (cuda::hip_estimate_check).
// Memory: prefill n_head * ceil(chunk/64) * (k/b_k + 2) ranges + the sparse kernel's workspace;
// decode n_layer * n_seq * n_head * (k/b_k + 2) ranges + the sparse decode workspace.
#include "methods/hip/hip_gpu.h"

#include "kernels/cuda/hip_estimate.h"
#include "kernels/cuda/sparse_decode.h"
#include "methods/gpu_carve.h"
#include "util/error.h"

namespace longctx {

namespace {

cuda::HipEstimateConfig config_of(const HipParams& hp) {
  cuda::HipEstimateConfig c;
  c.k = hp.topk.k;
  c.b_q = hp.topk.b_q;
  c.b_sq = hp.topk.b_sq;
  c.b_k = hp.topk.b_k;
  c.b_sk = hp.topk.b_sk;
  c.window = hp.window;
  c.sinks = hp.sinks;
  return c;
}

struct Layout {
  int64_t n_qblk = 0, entries = 0;  // prefill: query blocks of a full chunk, (head, block) entries
  size_t p_range_ptr = 0, p_ranges = 0, p_col_ptr = 0, p_workspace = 0, p_workspace_bytes = 0;
  int64_t rows = 0;                 // decode: n_seq * n_head
  size_t refresh_pos = 0, d_range_ptr = 0, d_col_ptr = 0, d_ranges = 0, d_workspace = 0, d_workspace_bytes = 0;
  size_t total = 0;
};

class HipGpu final : public GpuMethod {
 public:
  HipGpu(HipParams hp, MethodContext model) : hp_(hp), model_(std::move(model)), cfg_(config_of(hp)) {}
  ~HipGpu() override { release(); }

  size_t device_bytes(const GpuShape& shape) const override { return layout(shape).total; }
  void allocate(const GpuShape& shape, cuda::Stream s) override {
    release();
    l_ = layout(shape);
    n_seq_ = shape.n_seq;
    buf_ = static_cast<char*>(cuda::dev_malloc(l_.total));
    start_sequence(s);
    cuda::sparse_decode_workspace_init(buf_ + l_.d_workspace, l_.d_workspace_bytes, s);
  }
  // The mask cache is per decode row, not per sequence: one sequence at a time, forgotten when
  // the next one starts.
  bool keeps_sequence_state() const override { return true; }
  void start_sequence(cuda::Stream s) override {
    if (buf_) cuda::memset_async(buf_ + l_.refresh_pos, 0xff, size_t(model_.n_layer) * l_.rows * 4, s);  // -1: no mask
  }
  void release() override {
    cuda::dev_free(buf_);
    buf_ = nullptr;
  }

  GpuIndex build_prefill(const GpuPrefillStep& st, cuda::Stream s) override {
    if (!buf_) fail("internal: hip prefill with no index buffer");
    const int64_t n_qblk = (st.n_q + cuda::kSparseQBlock - 1) / cuda::kSparseQBlock;
    if (n_qblk > l_.n_qblk) fail("internal: hip prefill chunk of {} queries in buffers for {} blocks", st.n_q, l_.n_qblk);
    cuda::HipPrefillParams p;
    p.cfg = cfg_;
    p.q = st.q;
    p.k = st.k;
    p.k_fp8 = st.k_fp8;  // --attn-tiles fp8: the cache's e4m3 keys, scored instead of k
    p.n_q = st.n_q;
    p.q_pos0 = st.q_pos0;
    p.n_kv = st.n_kv;
    p.n_head = model_.n_head;
    p.n_kv_head = model_.n_kv_head;
    p.head_dim = model_.head_dim;
    p.range_ptr = reinterpret_cast<int64_t*>(buf_ + l_.p_range_ptr);
    p.ranges = reinterpret_cast<int32_t*>(buf_ + l_.p_ranges);
    p.col_ptr = reinterpret_cast<int64_t*>(buf_ + l_.p_col_ptr);
    cuda::hip_estimate_prefill(p, s);
    GpuIndex g;
    g.index.n_index_head = model_.n_head;
    g.index.n_qblk = n_qblk;
    g.index.range_ptr = p.range_ptr;
    g.index.ranges = p.ranges;
    g.index.col_ptr = p.col_ptr;
    g.index.cols = nullptr;
    g.index.n_ranges = int64_t(model_.n_head) * n_qblk * cfg_.ranges_per_row();
    g.index.n_cols = 0;
    g.workspace = buf_ + l_.p_workspace;
    g.workspace_bytes = l_.p_workspace_bytes;
    return g;
  }

  bool decodes() const override { return true; }
  int offload_line_tokens() const override { return cfg_.b_k; }
  GpuDecodeIndex build_decode(const GpuDecodeStep& st, cuda::Stream s) override {
    if (!buf_) fail("internal: hip decode with no index buffer");
    if (!st.q) fail("internal: hip decode needs the step's queries (GpuDecodeStep::q)");
    if (st.kv.n_seq > n_seq_) fail("internal: hip decode of {} sequences in buffers for {}", st.kv.n_seq, n_seq_);
    if (st.layer < 0 || st.layer >= model_.n_layer) fail("internal: hip decode of layer {}", st.layer);
    const int64_t R = cfg_.ranges_per_row(), rows = int64_t(st.kv.n_seq) * model_.n_head;
    cuda::HipDecodeParams p;
    p.cfg = cfg_;
    p.refresh = hp_.refresh;
    p.q = st.q;
    p.kv = st.kv;
    p.n_head = model_.n_head;
    p.refresh_pos = reinterpret_cast<int32_t*>(buf_ + l_.refresh_pos) + int64_t(st.layer) * l_.rows;
    p.range_ptr = reinterpret_cast<int32_t*>(buf_ + l_.d_range_ptr);
    p.ranges = reinterpret_cast<int32_t*>(buf_ + l_.d_ranges) + 2 * int64_t(st.layer) * l_.rows * R;
    p.col_ptr = reinterpret_cast<int32_t*>(buf_ + l_.d_col_ptr);
    p.offload = st.offload_keys;  // KV offload: keys through the layer's keys cache
    cuda::hip_estimate_decode(p, s);
    GpuDecodeIndex g;
    g.index.n_seq = st.kv.n_seq;
    g.index.n_index_head = model_.n_head;
    g.index.range_ptr = p.range_ptr;
    g.index.ranges = p.ranges;
    g.index.col_ptr = p.col_ptr;
    g.index.cols = nullptr;
    g.index.range_capacity = rows * R;
    g.index.col_capacity = 0;
    g.index.on_device = true;
    g.max_keys_per_row = max_keys();
    g.workspace = buf_ + l_.d_workspace;
    g.workspace_bytes = l_.d_workspace_bytes;
    return g;
  }

 private:
  // Most keys a decode row attends: sinks, k, and a window grown by up to refresh - 1 keys.
  int64_t max_keys() const { return hp_.sinks + hp_.topk.k + hp_.window + hp_.refresh; }
  Layout layout(const GpuShape& shape) const {
    Layout l;
    Carve c;
    const int64_t R = cfg_.ranges_per_row();
    l.n_qblk = (shape.chunk + cuda::kSparseQBlock - 1) / cuda::kSparseQBlock;
    l.entries = l.n_qblk * shape.model.n_head;
    l.p_range_ptr = c.take(size_t(l.entries + 1) * 8);
    l.p_ranges = c.take(size_t(l.entries * R) * 8);
    l.p_col_ptr = c.take(size_t(l.entries + 1) * 8);
    cuda::DeviceSparseIndex worst;
    worst.n_index_head = shape.model.n_head;
    worst.n_qblk = l.n_qblk;
    worst.n_ranges = l.entries * R;
    l.p_workspace_bytes = cuda::sparse_attention_workspace_bytes(worst);
    l.p_workspace = c.take(l.p_workspace_bytes);
    l.rows = int64_t(shape.n_seq) * shape.model.n_head;
    l.refresh_pos = c.take(size_t(shape.model.n_layer) * l.rows * 4);
    l.d_range_ptr = c.take(size_t(l.rows + 1) * 4);
    l.d_col_ptr = c.take(size_t(l.rows + 1) * 4);
    l.d_ranges = c.take(size_t(shape.model.n_layer) * l.rows * R * 8);
    cuda::SparseDecodeBounds b;
    b.n_seq = shape.n_seq;
    b.n_head = shape.model.n_head;
    b.n_index_head = shape.model.n_head;
    b.head_dim = shape.model.head_dim;
    b.max_keys_per_row = std::min<int64_t>(max_keys(), std::max<int64_t>(shape.capacity, 1));
    b.range_capacity = l.rows * R;
    b.col_capacity = 0;
    l.d_workspace_bytes = cuda::sparse_decode_workspace_bytes(b);
    l.d_workspace = c.take(l.d_workspace_bytes);
    l.total = c.off;
    return l;
  }

  HipParams hp_;
  MethodContext model_;
  cuda::HipEstimateConfig cfg_;
  Layout l_;
  int n_seq_ = 0;
  char* buf_ = nullptr;
};

}  // namespace

std::unique_ptr<GpuMethod> make_hip_gpu(const HipMethod& m, const MethodContext& model) {
  const HipTopkParams& t = m.params().topk;
  if (t.k / t.b_k > cuda::kHipMaxBudgetBlocks)
    fail("hip on the GPU keeps at most {} key blocks (k/b_k), but k={} b_k={} asks for {}: lower k or raise b_k",
         cuda::kHipMaxBudgetBlocks, t.k, t.b_k, t.k / t.b_k);
  cuda::hip_estimate_check(config_of(m.params()), model.head_dim);  // head_dim, the CTA's shared memory
  return std::make_unique<HipGpu>(m.params(), model);
}

}  // namespace longctx
