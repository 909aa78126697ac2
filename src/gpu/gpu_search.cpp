// gpu_search.cpp: see gpu_search.h.
#include "gpu/gpu_search.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "gpu/device_probe.h"
#include "gpu/memory_plan.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/head_error.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/ref/head_error.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace longctx::gpu {

namespace {

constexpr size_t kBf16 = 2;
constexpr size_t kMinBuffer = 256;  // empty lists still get a valid device pointer

size_t free_device_bytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    fail("GPU pattern search: cannot query free GPU memory (cudaMemGetInfo failed)");
  }
  return free_b;
}

}  // namespace

GpuScorer::GpuScorer(ThreadPool& pool) : pool_(pool) {
  const Probe pr = probe_device();
  if (!pr.usable) fail("GPU pattern search: {} (use --device cpu)", pr.why);
  stream_ = cuda::stream_create();
}

GpuScorer::~GpuScorer() {
  try {
    for (Buffer* b : {&q_, &k_, &v_, &y_, &yc_, &sums_, &sums_ws_, &range_ptr_, &ranges_, &col_ptr_, &cols_, &attn_ws_})
      cuda::dev_free(b->p);
    cuda::stream_destroy(stream_);
  } catch (...) {  // a destructor must not throw (e.g. after a sticky device error)
  }
}

size_t GpuScorer::device_bytes() const {
  size_t n = 0;
  for (const Buffer* b : {&q_, &k_, &v_, &y_, &yc_, &sums_, &sums_ws_, &range_ptr_, &ranges_, &col_ptr_, &cols_, &attn_ws_})
    n += b->bytes;
  return n;
}

void GpuScorer::grow(std::initializer_list<std::pair<Buffer*, size_t>> need, const char* what) {
  size_t add = 0, freed = 0;
  for (const auto& [b, n] : need)
    if (std::max(n, kMinBuffer) > b->bytes) add += align_up(std::max(n, kMinBuffer)), freed += b->bytes;
  if (add == 0) return;
  const size_t free_b = free_device_bytes() + freed;
  if (add + kReserveBytes > free_b)
    fail("GPU pattern search: {} need {} of GPU memory (plus a {} reserve) but {} is free; use a shorter sample "
         "(--sample-tokens) or --device cpu",
         what, gib(add), gib(kReserveBytes), gib(free_b));
  for (const auto& [b, n] : need) {
    const size_t want = align_up(std::max(n, kMinBuffer));
    if (want <= b->bytes) continue;
    cuda::dev_free(b->p);
    b->p = nullptr;
    b->bytes = 0;
    b->p = cuda::dev_malloc(want);
    b->bytes = want;
  }
}

void GpuScorer::upload_bf16(Buffer& dst, const float* src, size_t n) {
  staging_.resize(n);
  constexpr int64_t kGrain = 1 << 16;
  pool_.parallel_for(int64_t((n + kGrain - 1) / kGrain), [&](int64_t b0, int64_t b1) {
    for (size_t i = size_t(b0 * kGrain); i < std::min(n, size_t(b1 * kGrain)); ++i) staging_[i] = f32_to_bf16(src[i]);
  });
  cuda::copy_h2d(dst.p, staging_.data(), n * kBf16, stream_);
  cuda::stream_sync(stream_);  // staging_ is reused by the next upload
}

void GpuScorer::begin_layer(const AttnParams& p) {
  layer_ready_ = false;
  if (!p.causal || p.q_pos0 != 0 || p.n_q != p.n_kv)
    fail("GPU pattern search: a layer capture must be a causal prefill from position 0 (n_q {} n_kv {} q_pos0 {})",
         p.n_q, p.n_kv, p.q_pos0);
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    fail("GPU pattern search: the GPU kernels support head_dim 64, 128 or 256; the model has {} (use --device cpu)",
         p.head_dim);
  const int64_t S = p.n_q;
  const size_t nq = size_t(S) * size_t(p.n_head) * size_t(p.head_dim);
  const size_t nkv = size_t(S) * size_t(p.n_kv_head) * size_t(p.head_dim);
  grow({{&q_, nq * kBf16}, {&k_, nkv * kBf16}, {&v_, nkv * kBf16}, {&y_, nq * kBf16}, {&yc_, nq * kBf16},
        {&sums_, size_t(2 * p.n_head) * sizeof(double)}, {&sums_ws_, cuda::head_error_workspace_bytes(p.n_head)}},
       fmt::format("a layer of {} tokens (Q, K, V and two outputs in bf16)", S).c_str());
  upload_bf16(q_, p.q, nq);
  upload_bf16(k_, p.k, nkv);
  upload_bf16(v_, p.v, nkv);
  p_ = p;
  p_.q = p_.k = p_.v = nullptr;  // host data: not needed after the upload
  p_.o = nullptr;
  p_.lse = nullptr;

  cuda::PrefillParams pp;
  pp.q = q_.p;
  pp.k = k_.p;
  pp.v = v_.p;
  pp.o = y_.p;
  pp.n_q = pp.n_kv = S;
  pp.n_head = p.n_head;
  pp.n_kv_head = p.n_kv_head;
  pp.head_dim = p.head_dim;
  pp.q_pos0 = 0;
  pp.scale = p.scale;
  pp.causal = true;
  cuda::attention_prefill(pp, stream_);
  layer_ready_ = true;
}

std::vector<double> GpuScorer::errors(const SparseIndex& idx) {
  static_assert(sizeof(KeyRange) == 2 * sizeof(int32_t), "KeyRange is an int32 (start, end) pair");
  if (!layer_ready_) fail("internal: GpuScorer::errors before begin_layer");
  const int64_t S = p_.n_q, n_qblk = n_query_blocks(S);
  const int H = p_.n_head;
  if (idx.n_q != S || int64_t(idx.heads.size()) != H)
    fail("internal: GPU pattern search: an index of {} heads for {} rows; the layer has {} heads and {} rows",
         idx.heads.size(), idx.n_q, H, S);

  // CSR over (head, query block): the heads' lists one after the other, offsets shifted.
  h_range_ptr_.assign(1, 0);
  h_col_ptr_.assign(1, 0);
  h_ranges_.clear();
  h_cols_.clear();
  for (int h = 0; h < H; ++h) {
    const HeadIndex& hi = idx.heads[size_t(h)];
    if (hi.n_blocks() != n_qblk || int64_t(hi.col_ptr.size()) != n_qblk + 1)
      fail("internal: GPU pattern search: head {} has {} query blocks, {} expected", h, hi.n_blocks(), n_qblk);
    const int64_t r0 = int64_t(h_ranges_.size() / 2), c0 = int64_t(h_cols_.size());
    for (int64_t b = 1; b <= n_qblk; ++b) {
      h_range_ptr_.push_back(r0 + hi.range_ptr[size_t(b)]);
      h_col_ptr_.push_back(c0 + hi.col_ptr[size_t(b)]);
    }
    const size_t nr = hi.ranges.size();
    h_ranges_.resize(h_ranges_.size() + 2 * nr);
    if (nr) std::memcpy(h_ranges_.data() + 2 * r0, hi.ranges.data(), nr * sizeof(KeyRange));
    h_cols_.insert(h_cols_.end(), hi.cols.begin(), hi.cols.end());
  }
  cuda::DeviceSparseIndex di;
  di.n_index_head = H;
  di.n_qblk = n_qblk;
  di.n_ranges = h_range_ptr_.back();
  di.n_cols = h_col_ptr_.back();
  const size_t ws_bytes = cuda::sparse_attention_workspace_bytes(di);
  grow({{&range_ptr_, h_range_ptr_.size() * sizeof(int64_t)},
        {&ranges_, h_ranges_.size() * sizeof(int32_t)},
        {&col_ptr_, h_col_ptr_.size() * sizeof(int64_t)},
        {&cols_, h_cols_.size() * sizeof(int32_t)},
        {&attn_ws_, ws_bytes}},
       fmt::format("a candidate's sparse index ({} ranges, {} columns) and workspace", di.n_ranges, di.n_cols).c_str());
  cuda::copy_h2d(range_ptr_.p, h_range_ptr_.data(), h_range_ptr_.size() * sizeof(int64_t), stream_);
  cuda::copy_h2d(col_ptr_.p, h_col_ptr_.data(), h_col_ptr_.size() * sizeof(int64_t), stream_);
  if (!h_ranges_.empty()) cuda::copy_h2d(ranges_.p, h_ranges_.data(), h_ranges_.size() * sizeof(int32_t), stream_);
  if (!h_cols_.empty()) cuda::copy_h2d(cols_.p, h_cols_.data(), h_cols_.size() * sizeof(int32_t), stream_);
  di.range_ptr = static_cast<const int64_t*>(range_ptr_.p);
  di.ranges = static_cast<const int32_t*>(ranges_.p);
  di.col_ptr = static_cast<const int64_t*>(col_ptr_.p);
  di.cols = static_cast<const int32_t*>(cols_.p);

  cuda::SparseAttnParams sp;
  sp.q = q_.p;
  sp.k = k_.p;
  sp.v = v_.p;
  sp.o = yc_.p;
  sp.n_q = sp.n_kv = S;
  sp.n_head = H;
  sp.n_kv_head = p_.n_kv_head;
  sp.head_dim = p_.head_dim;
  sp.q_pos0 = 0;
  sp.scale = p_.scale;
  sp.causal = true;
  sp.index = di;
  sp.workspace = attn_ws_.p;
  sp.workspace_bytes = attn_ws_.bytes;
  cuda::sparse_attention(sp, stream_);

  cuda::HeadErrorParams ep;
  ep.a = yc_.p;
  ep.b = y_.p;
  ep.out = static_cast<double*>(sums_.p);
  ep.n_rows = S;
  ep.n_head = H;
  ep.head_dim = p_.head_dim;
  ep.workspace = sums_ws_.p;
  ep.workspace_bytes = sums_ws_.bytes;
  cuda::head_error_sums(ep, stream_);
  std::vector<double> sums(size_t(2 * H));
  cuda::copy_d2h(sums.data(), sums_.p, sums.size() * sizeof(double), stream_);
  cuda::stream_sync(stream_);
  cuda::check_last_error("GPU pattern search (sparse attention, error sums)");
  std::vector<double> err(static_cast<size_t>(H));
  for (int h = 0; h < H; ++h) err[size_t(h)] = rel_l2_error(sums[size_t(2 * h)], sums[size_t(2 * h + 1)]);
  return err;
}

}  // namespace longctx::gpu
