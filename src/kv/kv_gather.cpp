// kv_gather.cpp: see kv_gather.h.
#include "kv/kv_gather.h"

#include <cstring>

#include "kernels/ref/fp8_e4m3.h"
#include "util/error.h"
#include "util/half.h"

namespace longctx::kv {

void kv_widen_row(KvElem elem, float scale, const void* src, int64_t n, float* dst) {
  switch (elem) {
    case KvElem::f32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case KvElem::bf16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case KvElem::fp8_e4m3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_f32(s[i]) * scale;
      return;
    }
  }
}

void kv_gather_f32(const KvView& view, int row, int64_t t0, int64_t n, float* k_out, float* v_out) {
  if (view.on_device) fail("kv_gather_f32: the view is in device memory (use the device gather)");
  if (row < 0 || row >= view.n_seq) fail("kv_gather_f32: batch row {} of a view of {} sequences", row, view.n_seq);
  const int64_t len = view.seq_lens[row];
  if (t0 < 0 || n < 0 || t0 > len - n)
    fail("kv_gather_f32: tokens [{}, {}) of batch row {} are outside its length {}", t0, t0 + n, row, len);
  const int64_t re = view.row_elems(), rb = re * kv_elem_bytes(view.elem);
  const auto* kp = static_cast<const std::byte*>(view.k_pool);
  const auto* vp = static_cast<const std::byte*>(view.v_pool);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = view.row(row, t0 + i);
    if (r < 0 || r >= view.n_pages * view.page_size)
      fail("kv_gather_f32: token {} of batch row {} maps to pool row {} outside the pool ({} rows)", t0 + i, row, r,
           view.n_pages * view.page_size);
    if (k_out) kv_widen_row(view.elem, view.k_scale, kp + r * rb, re, k_out + i * re);
    if (v_out) kv_widen_row(view.elem, view.v_scale, vp + r * rb, re, v_out + i * re);
  }
}

}  // namespace longctx::kv
