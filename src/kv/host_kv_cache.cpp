// host_kv_cache.cpp: see host_kv_cache.h.
#include "kv/host_kv_cache.h"

#include <cstring>

#include "kernels/ref/fp8_e4m3.h"
#include "util/error.h"
#include "util/half.h"

namespace longctx::kv {

namespace {

// Narrows n fp32 values to the pool's type at dst (inv_scale: fp8 only).
void narrow_row(KvElem elem, float inv_scale, const float* src, int64_t n, std::byte* dst) {
  switch (elem) {
    case KvElem::f32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case KvElem::bf16: {
      auto* d = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case KvElem::fp8_e4m3: {
      auto* d = reinterpret_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_e4m3(src[i] * inv_scale);
      return;
    }
  }
}

}  // namespace

HostKvCache::HostKvCache(const KvSpec& spec) : KvCache(spec), pool_(size_t(sizes().pool_bytes)) {}

std::byte* HostKvCache::pool_at(int layer, int which) const {
  check_layer(layer, "pool");
  return const_cast<std::byte*>(pool_.data()) + (2 * int64_t(layer) + which) * sizes().layer_pool_bytes;
}

void* HostKvCache::k_pool(int layer) { return pool_at(layer, 0); }
void* HostKvCache::v_pool(int layer) { return pool_at(layer, 1); }

KvView HostKvCache::view(int layer) const {
  return make_view(layer, pool_at(layer, 0), pool_at(layer, 1), batch_block_table(), batch_seq_lens(), false);
}

void HostKvCache::write_rows(SeqId s, int layer, int64_t t0, int64_t n, const float* k, const float* v) {
  check_write(s, layer, t0, n, "write_rows");
  const int64_t re = sizes().row_elems, rb = sizes().row_bytes;
  std::byte* kp = pool_at(layer, 0);
  std::byte* vp = pool_at(layer, 1);
  const float k_inv = 1.f / k_scale(layer), v_inv = 1.f / v_scale(layer);  // the GPU quantizes with x * (1/scale) too
  const std::span<const int32_t> pg = pages(s);
  const int ps = spec().page_size;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    const int64_t row = int64_t(pg[size_t(t / ps)]) * ps + t % ps;
    if (k) narrow_row(spec().elem, k_inv, k + i * re, re, kp + row * rb);
    if (v) narrow_row(spec().elem, v_inv, v + i * re, re, vp + row * rb);
  }
}

}  // namespace longctx::kv
