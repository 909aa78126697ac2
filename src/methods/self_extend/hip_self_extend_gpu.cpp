// hip_self_extend_gpu.cpp: see hip_self_extend_gpu.h.
#include "methods/self_extend/hip_self_extend_gpu.h"

#include <climits>

#include "kernels/cuda/sparse_attention.h"
#include "kernels/cuda/sparse_decode.h"
#include "methods/hip/hip_gpu.h"
#include "util/error.h"

namespace longctx {

namespace {

class HipSelfExtendGpu final : public GpuMethod {
 public:
  HipSelfExtendGpu(const SelfExtendParams& se, const HipMethod* prefill, const HipMethod* decode,
                   const MethodContext& ctx)
      : se_params_(se), se_(se, ctx), ctx_(ctx) {
    // One builder per distinct HiP side (one method for both phases: one builder, as plain HiP).
    if (prefill) {
      side_[0] = std::make_unique<HipMethod>(prefill->params());
      builder_[0] = make_hip_gpu(*side_[0], ctx);
    }
    if (decode) {
      side_[1] = std::make_unique<HipMethod>(decode->params());
      if (!prefill || prefill->name() != decode->name()) builder_[1] = make_hip_gpu(*side_[1], ctx);
    }
  }
  ~HipSelfExtendGpu() override { release(); }

  size_t device_bytes(const GpuShape& shape) const override {
    size_t n = se_.device_bytes(shape) + kTableBytes;
    for (const auto& b : builder_)
      if (b) n += b->device_bytes(shape);
    return n;
  }
  void allocate(const GpuShape& shape, cuda::Stream s) override {
    release();
    if (shape.capacity > INT_MAX) fail("HiP + Self-Extend on the GPU: capacity {} exceeds int32 positions", shape.capacity);
    se_.allocate(shape, s);
    for (const auto& b : builder_)
      if (b) b->allocate(shape, s);
    block_table_ = static_cast<int32_t*>(cuda::dev_malloc(kTableBytes));
    cuda::memset_async(block_table_, 0, kTableBytes, s);  // one page: the layer's rotated keys
    capacity_ = std::max<int64_t>(shape.capacity, 1);
  }
  void release() override {
    se_.release();
    for (const auto& b : builder_)
      if (b) b->release();
    cuda::dev_free(block_table_);
    block_table_ = nullptr;
  }
  GpuIndex build_prefill(const GpuPrefillStep&, cuda::Stream) override {
    fail("internal: HiP + Self-Extend attends its steps itself (GpuMethod::attend)");
  }
  bool decodes() const override { return true; }
  bool decode_reads_fp8() const override { return false; }
  bool attends() const override { return true; }
  // Graph-safe decode: the rotations and lengths come from the device (SelfExtendGpu::rotate_step),
  // the index from HiP's device mask cache (its refresh decided on the device, as plain HiP), both
  // parts run cuda::sparse_decode on device lengths. The route is the one host decision: a tile
  // reaching down to HiP's dense threshold decodes eagerly.
  bool decode_graph_safe() const override { return true; }
  int64_t decode_graph_min_kv() const override {
    const HipMethod* m = side_[1].get();  // route: dense while n_kv <= window + sinks + k
    return m ? m->params().window + m->params().sinks + m->params().topk.k : 0;
  }
  bool keeps_sequence_state() const override { return true; }  // rotated keys and HiP's mask cache
  void start_sequence(cuda::Stream s) override {
    se_.start_sequence(s);
    for (const auto& b : builder_)
      if (b) b->start_sequence(s);
  }

  void attend(const GpuAttendStep& step, cuda::Stream s) override {
    se_.rotate_step(step, s);
    const int side = step.phase == Phase::decode ? 1 : 0;
    const HipMethod* m = side_[side].get();
    const AttnStep as{.layer = step.layer, .phase = step.phase, .n_q = step.n_q, .q_pos0 = step.n_kv - step.n_q,
                      .n_kv = step.n_kv};
    if (!m || m->route(as) == Route::dense) return se_.attend_dense(step, s);
    GpuMethod& b = builder_[side] ? *builder_[side] : *builder_[0];
    if (step.phase == Phase::decode && step.n_q == 1)
      decode(step, b, s);
    else
      prefill(step, b, s);
  }

 private:
  static constexpr size_t kTableBytes = 256;  // the one-page block table (int32 [1]), one aligned block

  void prefill(const GpuAttendStep& step, GpuMethod& hip, cuda::Stream s) {
    const int64_t W = se_params_.neighbor, q_pos0 = step.n_kv - step.n_q;
    const void* q_grp = se_.rotated_queries(step, true, s);
    const void* q_own = se_.rotated_queries(step, false, s);
    // The index: HiP's estimator on the grouped q/k (decision 6), keys at their own rows.
    const GpuIndex g = hip.build_prefill({.layer = step.layer, .q = q_grp, .k = se_.keys_grouped(step.layer),
                                          .n_q = step.n_q, .q_pos0 = q_pos0, .n_kv = step.n_kv, .scale = step.scale},
                                         s);
    cuda::SparseAttnParams p;
    p.v = step.v;
    p.n_q = step.n_q;
    p.n_kv = step.n_kv;
    p.n_head = ctx_.n_head;
    p.n_kv_head = ctx_.n_kv_head;
    p.head_dim = ctx_.head_dim;
    p.scale = step.scale;
    p.causal = true;
    p.index = g.index;
    p.workspace = g.workspace;
    p.workspace_bytes = g.workspace_bytes;
    // (SE1) near: own positions, the index's keys in (q - W, q].
    p.q = q_own;
    p.k = se_.keys_own(step.layer);
    p.o = step.o;
    p.lse = se_.lse_near();
    p.q_pos0 = q_pos0;
    p.window = W;
    cuda::sparse_attention(p, s);
    if (q_pos0 + step.n_q - 1 < W) return;  // no row has far keys yet
    // (SE2) far: grouped positions, the index's keys <= q - W (every row; rows q < W see none).
    p.q = q_grp;
    p.k = se_.keys_grouped(step.layer);
    p.o = se_.far_out();
    p.lse = se_.lse_far();
    p.q_pos0 = q_pos0 - W;
    p.window = 0;
    cuda::sparse_attention(p, s);
    se_.merge(step, 0, s);  // (SE3)
  }

  void decode(const GpuAttendStep& step, GpuMethod& hip, cuda::Stream s) {
    if (!step.n_kv_dev) fail("internal: HiP + Self-Extend decode needs the step's device length");
    const int64_t W = se_params_.neighbor;
    // rotate_step rotated the query at both positions from the device length.
    const void* q_grp = se_.decode_queries(true);
    const void* q_own = se_.decode_queries(false);
    // The layer's rotated keys as a one-page view of the step's length (n_kv_dev).
    KvView kv;
    kv.k_pool = se_.keys_grouped(step.layer);
    kv.v_pool = step.v;
    kv.elem = KvElem::bf16;
    kv.block_table = block_table_;
    kv.seq_lens = step.n_kv_dev;
    kv.n_seq = 1;
    kv.max_pages_per_seq = 1;
    kv.page_size = int(capacity_);
    kv.n_pages = 1;
    kv.n_kv_head = ctx_.n_kv_head;
    kv.head_dim = ctx_.head_dim;
    kv.on_device = true;
    // HiP's decode index on the grouped q/k, re-estimated on refresh steps only.
    const GpuDecodeIndex g = hip.build_decode({.layer = step.layer, .kv = kv, .q = q_grp}, s);
    cuda::SparseDecodeParams d;
    d.n_head = ctx_.n_head;
    d.index = g.index;
    d.scale = step.scale;
    d.max_keys_per_row = g.max_keys_per_row;
    d.workspace = g.workspace;
    d.workspace_bytes = g.workspace_bytes;
    // (SE1) near: the index's keys among the last W.
    d.q = q_own;
    d.o = step.o;
    d.lse = se_.lse_near();
    d.kv = kv;
    d.kv.k_pool = se_.keys_own(step.layer);
    d.window = W;
    cuda::sparse_decode(d, s);
    // (SE2) far: the index's keys <= pos - W; none while pos < W (the kernel's row without keys:
    // LSE = -inf, which the merge leaves as the near part), so no host branch.
    d.q = q_grp;
    d.o = se_.far_out();
    d.lse = se_.lse_far();
    d.kv = kv;
    d.window = 0;
    d.shift = W;
    cuda::sparse_decode(d, s);
    se_.merge(step, 0, s);  // (SE3); decode's lse [1, n_head] is [n_head, n_q = 1]
  }

  SelfExtendParams se_params_;
  SelfExtendGpu se_;
  MethodContext ctx_;
  std::unique_ptr<HipMethod> side_[2];   // [prefill, decode]: the phase's HiP (null: dense)
  std::unique_ptr<GpuMethod> builder_[2];  // [1] null when the decode side shares [0]'s builder
  int32_t* block_table_ = nullptr;       // device int32 [1] = 0
  int64_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<GpuMethod> make_hip_self_extend_gpu(const SelfExtendParams& se, const HipMethod* prefill,
                                                    const HipMethod* decode, const MethodContext& ctx) {
  const int d = ctx.head_dim;
  if (d != 64 && d != 128 && d != 256)
    fail("HiP + Self-Extend on the GPU needs head_dim 64, 128 or 256 (the sparse kernels'), but {} has head_dim {}",
         ctx.model_name, d);
  (void)make_self_extend_gpu(se, ctx);  // the dense parts' limits (decode's 16 query heads per KV head)
  return std::make_unique<HipSelfExtendGpu>(se, prefill, decode, ctx);
}

}  // namespace longctx
