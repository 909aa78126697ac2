// kv_gather.h: read a sequence's cached rows out of a paged host KvView into contiguous fp32.
//
// Why: today's contiguous CPU kernels (kernels/ref attention) and the tests check paged storage
// against them; a gather makes any sequence of a view contiguous [n, n_kv_head, head_dim].
// Values are widened exactly: f32 as is, bf16 -> fp32, fp8 e4m3 -> fp32 times the view's scale.
#pragma once
#include <cstdint>

#include "kernels/params/kv_view.h"

namespace longctx::kv {

// k_out, v_out: fp32 [n, n_kv_head, head_dim] <- tokens [t0, t0+n) of batch row `row` of view
// (host memory); either may be null. Error if the view is on the device, the row is outside
// [0, n_seq) or the tokens outside [0, seq_lens[row]).
void kv_gather_f32(const KvView& view, int row, int64_t t0, int64_t n, float* k_out, float* v_out);

// One pool row (n_kv_head * head_dim elements of the view's type at `src`) widened to fp32.
void kv_widen_row(KvElem elem, float scale, const void* src, int64_t n, float* dst);

}  // namespace longctx::kv
