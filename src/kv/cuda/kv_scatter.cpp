// kv_scatter.cpp: argument checks of kv_scatter.h's launchers (kernels in kv_scatter.cu).
#include "kv/cuda/kv_scatter.h"

#include "kv/cuda/kv_cuda_check.h"
#include "kv/cuda/kv_scatter_launch.h"
#include "util/error.h"

namespace longctx::kv {

namespace {

void check_view(const KvView& v, const char* what) {
  if (!v.on_device) fail("{}: the view is in host memory", what);
  if (v.elem != KvElem::bf16 && v.elem != KvElem::fp8_e4m3)
    fail("{}: the pool's element type must be bf16 or fp8_e4m3 (got {})", what, int(v.elem));
  if (!v.k_pool || !v.v_pool || !v.block_table || !v.seq_lens) fail("{}: null pool or table in the view", what);
  if (v.row_elems() % kKvVec != 0)
    fail("{}: a row of {} elements (n_kv_head x head_dim must be a multiple of {})", what, v.row_elems(), kKvVec);
  if (v.elem == KvElem::fp8_e4m3 && !(v.k_scale > 0.f && v.v_scale > 0.f))
    fail("{}: fp8 scales {}, {} are not set", what, v.k_scale, v.v_scale);
}

}  // namespace

void kv_scatter(const KvScatterParams& p, cuda::Stream s) {
  check_view(p.view, "kv_scatter");
  if (!p.k_pool || !p.v_pool || !p.k_new || !p.v_new) fail("kv_scatter: null pointer");
  if (p.n_new < 1 || p.n_seq < 0 || p.first_row < 0 || p.first_row + p.n_seq > p.view.n_seq)
    fail("kv_scatter: batch rows [{}, {}) with {} new tokens each, in a view of {} sequences", p.first_row,
         p.first_row + p.n_seq, p.n_new, p.view.n_seq);
  if (p.n_seq == 0) return;
  detail::cuda_check(detail::launch_scatter(p, s), "kv_scatter launch");
}

void kv_gather_bf16(const KvGatherParams& p, cuda::Stream s) {
  check_view(p.view, "kv_gather_bf16");
  if (!p.k_out && !p.v_out) fail("kv_gather_bf16: no output");
  if (p.row < 0 || p.row >= p.view.n_seq || p.t0 < 0 || p.n < 0)
    fail("kv_gather_bf16: tokens [{}, {}) of batch row {} in a view of {} sequences", p.t0, p.t0 + p.n, p.row,
         p.view.n_seq);
  if (p.n == 0) return;
  detail::cuda_check(detail::launch_gather(p, s), "kv_gather_bf16 launch");
}

}  // namespace longctx::kv
