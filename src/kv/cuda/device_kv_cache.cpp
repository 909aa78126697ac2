// device_kv_cache.cpp: see device_kv_cache.h.
#include "kv/cuda/device_kv_cache.h"

#include "kv/cuda/kv_cuda_check.h"
#include "kv/cuda/kv_scatter_launch.h"
#include "util/error.h"

namespace longctx::kv {

namespace {

// The spec's checks that only the device pool needs, before anything is allocated.
const KvSpec& device_spec(const KvSpec& s) {
  const KvSizes z = kv_sizes(s);
  if (s.elem != KvElem::bf16 && s.elem != KvElem::fp8_e4m3)
    fail("KV cache on the GPU: element type {} (the GPU pool holds bf16 or fp8_e4m3)", kv_elem_name(s.elem));
  if (z.row_elems % kKvVec != 0)
    fail("KV cache on the GPU: a token row of {} elements ({} heads x {}) must be a multiple of {}", z.row_elems,
         s.n_kv_head, s.head_dim, kKvVec);
  return s;
}

}  // namespace

DeviceKvCache::DeviceKvCache(const KvSpec& spec) : KvCache(device_spec(spec)) {
  size_t free_b = 0, total_b = 0;
  detail::cuda_check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const std::string problem = kv_fit_problem(this->spec(), int64_t(free_b), "the GPU");
  if (!problem.empty()) fail("{}", problem);
  const KvSizes& z = sizes();
  void* p = nullptr;
  detail::cuda_check(cudaMalloc(&p, size_t(z.total_bytes)), "cudaMalloc of the KV pool and tables");
  block_ = static_cast<char*>(p);
  d_table_ = reinterpret_cast<int32_t*>(block_ + z.pool_bytes);
  d_lens_ = reinterpret_cast<int32_t*>(block_ + z.pool_bytes + z.lens_offset);
  try {
    detail::cuda_check(cudaMemset(block_ + z.pool_bytes, 0, size_t(z.table_bytes)), "zeroing the KV tables");
  } catch (...) {
    cudaFree(block_);
    throw;
  }
}

DeviceKvCache::~DeviceKvCache() { cudaFree(block_); }

void* DeviceKvCache::k_pool(int layer) const {
  check_layer(layer, "k_pool");
  return block_ + (2 * int64_t(layer)) * sizes().layer_pool_bytes;
}

void* DeviceKvCache::v_pool(int layer) const {
  check_layer(layer, "v_pool");
  return block_ + (2 * int64_t(layer) + 1) * sizes().layer_pool_bytes;
}

KvView DeviceKvCache::view(int layer) const {
  return make_view(layer, k_pool(layer), v_pool(layer), d_table_, d_lens_, true);
}

void DeviceKvCache::sync_tables(cuda::Stream s) {
  const auto stream = static_cast<cudaStream_t>(s);
  const int64_t stride = sizes().max_pages_per_seq;
  std::vector<DirtyRange>& dirty = dirty_rows();
  for (size_t b = 0; b < dirty.size(); ++b) {
    DirtyRange& d = dirty[b];
    if (d.lo >= d.hi) continue;
    const int64_t at = int64_t(b) * stride + d.lo;
    detail::cuda_check(cudaMemcpyAsync(d_table_ + at, batch_block_table() + at, size_t(d.hi - d.lo) * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream),
                       "uploading the block table");
    d = DirtyRange{};
  }
  detail::cuda_check(cudaMemcpyAsync(d_lens_, batch_seq_lens(), size_t(spec().max_batch) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream),
                     "uploading seq_lens");
}

void DeviceKvCache::scatter(int layer, const KvNewRows& rows, cuda::Stream s) {
  const std::span<const SeqId> b = batch();
  if (rows.first_row < 0 || rows.n_seq < 0 || rows.n_new < 1 || rows.first_row + rows.n_seq > int(b.size()))
    fail("KV cache scatter: batch rows [{}, {}) with {} new tokens each, in a batch of {}", rows.first_row,
         rows.first_row + rows.n_seq, rows.n_new, b.size());
  for (int r = rows.first_row; r < rows.first_row + rows.n_seq; ++r)
    check_write(b[size_t(r)], layer, length(b[size_t(r)]) - rows.n_new, rows.n_new, "scatter");
  KvScatterParams p;
  p.view = view(layer);
  p.k_pool = k_pool(layer);
  p.v_pool = v_pool(layer);
  p.k_new = rows.k;
  p.v_new = rows.v;
  p.first_row = rows.first_row;
  p.n_seq = rows.n_seq;
  p.n_new = rows.n_new;
  kv_scatter(p, s);
}

}  // namespace longctx::kv
