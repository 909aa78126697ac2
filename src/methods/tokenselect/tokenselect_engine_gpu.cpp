// tokenselect_engine_gpu.cpp: see tokenselect_engine_gpu.h.
#include "methods/tokenselect/tokenselect_engine_gpu.h"

#include <algorithm>
#include <numeric>

#include "kernels/cuda/selection_cache.h"
#include "util/error.h"

namespace longctx {

namespace {

constexpr size_t kAlign = cuda::DeviceArena::kDefaultAlign;
constexpr size_t kBf16 = 2;

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The arena's blocks besides TokenSelectGpuStep's: slots, cache keys, cache queries, cosine, the
// hit flag, the per-layer "selection cached" flags and the hit / miss counters.
struct CacheSizes {
  size_t slots, keys, q, cos, hit, has, counts;
  size_t total() const { return slots + keys + q + cos + hit + has + counts; }
};

CacheSizes cache_sizes(const TokenSelectParams& t, const MethodContext& c, int64_t capacity) {
  const size_t L = size_t(c.n_layer);
  return {.slots = round_up(size_t(capacity) * sizeof(int32_t)),
          .keys = round_up(L * size_t(t.k) * sizeof(int32_t)),
          .q = round_up(L * size_t(c.n_head) * size_t(c.head_dim) * sizeof(float)),
          .cos = round_up(sizeof(float)),
          .hit = round_up(sizeof(int32_t)),
          .has = round_up(L * sizeof(int32_t)),
          .counts = round_up(2 * sizeof(int64_t))};
}

const char* at_row(const void* base, int64_t row, int64_t row_elems) {
  return static_cast<const char*>(base) + size_t(row * row_elems) * kBf16;
}

}  // namespace

TokenSelectGpuShape TokenSelectGpu::step_shape(const GpuShape& shape) const {
  return {.n_head = ctx_.n_head, .n_kv_head = ctx_.n_kv_head, .head_dim = ctx_.head_dim,
          .max_kv = std::max<int64_t>(shape.capacity, 1), .max_rows = std::clamp<int64_t>(shape.chunk, 1, t_.chunk),
          .scores = t_.scores_f16 ? cuda::ScoreElem::f16 : cuda::ScoreElem::f32};
}

size_t TokenSelectGpu::device_bytes(const GpuShape& shape) const {
  return TokenSelectGpuStep::device_bytes(t_, step_shape(shape)) + cache_sizes(t_, ctx_, shape.capacity).total();
}

void TokenSelectGpu::allocate(const GpuShape& shape, cuda::Stream s) {
  release();
  step_ = std::make_unique<TokenSelectGpuStep>(t_, step_shape(shape));
  const CacheSizes z = cache_sizes(t_, ctx_, shape.capacity);
  arena_ = std::make_unique<cuda::DeviceArena>(z.total());
  slots_ = static_cast<int32_t*>(arena_->alloc(z.slots));
  cache_keys_ = static_cast<int32_t*>(arena_->alloc(z.keys));
  cache_q_ = static_cast<float*>(arena_->alloc(z.q));
  cos_ = static_cast<float*>(arena_->alloc(z.cos));
  hit_ = static_cast<int32_t*>(arena_->alloc(z.hit));
  has_ = static_cast<int32_t*>(arena_->alloc(z.has));
  counts_ = static_cast<int64_t*>(arena_->alloc(z.counts));
  capacity_ = shape.capacity;
  std::vector<int32_t> rows(static_cast<size_t>(capacity_));
  std::iota(rows.begin(), rows.end(), 0);
  cuda::copy_h2d(slots_, rows.data(), rows.size() * sizeof(int32_t), s);
  cuda::stream_sync(s);  // rows is a local
  start_sequence(s);
}

void TokenSelectGpu::release() {
  step_.reset();
  arena_.reset();
  slots_ = cache_keys_ = hit_ = has_ = nullptr;
  cache_q_ = cos_ = nullptr;
  counts_ = nullptr;
  capacity_ = 0;
}

GpuIndex TokenSelectGpu::build_prefill(const GpuPrefillStep&, cuda::Stream) {
  fail("internal: tokenselect on the GPU attends through attend() (pre-RoPE keys), not a sparse index");
}

void TokenSelectGpu::start_sequence(cuda::Stream s) {
  if (!arena_) return;
  cuda::memset_async(has_, 0, size_t(ctx_.n_layer) * sizeof(int32_t), s);
  cuda::memset_async(counts_, 0, 2 * sizeof(int64_t), s);
}

void TokenSelectGpu::attend(const GpuAttendStep& st, cuda::Stream s) {
  if (!step_) fail("internal: tokenselect GPU step before allocate()");
  if (st.n_q <= 0 || st.n_kv < st.n_q || st.n_kv > capacity_ || st.layer < 0 || st.layer >= ctx_.n_layer)
    fail("internal: tokenselect GPU attend of {} rows over {} keys, layer {} (capacity {})", st.n_q, st.n_kv, st.layer,
         capacity_);
  const int64_t QW = int64_t(ctx_.n_head) * ctx_.head_dim;  // elements of one query / output row
  TokenSelectGpuInput in{.q = st.q, .n_rows = st.n_q, .n_kv = st.n_kv, .k_pool = st.k, .v_pool = st.v,
                         .slots = slots_, .inv_freq = st.inv_freq, .rope_factor = st.rope_factor,
                         .scale = st.scale, .o = st.o, .pool_fp8 = st.kv_fp8, .k_scale = st.k_scale,
                         .v_scale = st.v_scale};
  if (st.phase == Phase::decode && st.n_q == 1) {
    in.n_kv_dev = st.n_kv_dev;
    in.n_kv_bound = std::min(std::max(st.n_kv_bound, st.n_kv), capacity_);
    if (step_->selects(st.n_kv)) decode_select(st, in, s);
    step_->attend(in, s);
    return;
  }
  // Prefill: sub-chunks of t.chunk rows, each selecting once (the CPU plan's cut).
  for (int64_t a = 0; a < st.n_q; a += t_.chunk) {
    const int64_t b = std::min(st.n_q, a + t_.chunk);
    in.q = at_row(st.q, a, QW);
    in.o = static_cast<char*>(st.o) + size_t(a * QW) * kBf16;
    in.n_rows = b - a;
    in.n_kv = st.n_kv - st.n_q + b;
    step_->step(in, s);
  }
}

void TokenSelectGpu::decode_select(const GpuAttendStep& st, const TokenSelectGpuInput& in, cuda::Stream s) {
  const size_t l = size_t(st.layer), QW = size_t(ctx_.n_head) * size_t(ctx_.head_dim), K = size_t(t_.k);
  float* q_l = cache_q_ + l * QW;
  int32_t* keys_l = cache_keys_ + l * K;
  step_->stage_query(in, s);
  // The hit or miss is decided and followed on the device: no host sync, no host branch.
  cuda::cosine({.a = step_->selection_query(), .b = q_l, .n = int64_t(QW), .out = cos_, .hit = hit_,
                .has = has_ + l, .theta = t_.theta},
               s);
  TokenSelectGpuInput gated = in;
  gated.skip = hit_;  // a hit skips score, vote and top-k
  step_->stage_score(gated, s);
  step_->stage_vote(gated, s);
  step_->stage_top_k(gated, s);  // and the initial / local ranges, hit or not
  cuda::cache_update({.hit = hit_, .keys = keys_l, .selected = step_->selected(), .k = int64_t(K), .q = q_l,
                      .q_sel = step_->selection_query(), .n_q = int64_t(QW), .has = has_ + l, .counts = counts_},
                     s);
}

int64_t TokenSelectGpu::count(int which, cuda::Stream s) const {
  if (!arena_) return 0;
  int64_t c[2] = {0, 0};
  cuda::copy_d2h(c, counts_, sizeof(c), s);
  cuda::stream_sync(s);
  return c[which];
}

std::vector<int32_t> TokenSelectGpu::selection(int l, cuda::Stream s) const {
  if (!arena_ || l < 0 || l >= ctx_.n_layer) return {};
  int32_t has = 0;
  cuda::copy_d2h(&has, has_ + l, sizeof(has), s);
  cuda::stream_sync(s);
  if (!has) return {};
  std::vector<int32_t> out(size_t(t_.k));
  cuda::copy_d2h(out.data(), cache_keys_ + size_t(l) * size_t(t_.k), out.size() * sizeof(int32_t), s);
  cuda::stream_sync(s);
  return out;
}

std::vector<float> TokenSelectGpu::last_vote(int64_t M, cuda::Stream s) const {
  if (!step_ || M <= 0 || M > capacity_) fail("internal: tokenselect GPU vote of {} candidates", M);
  std::vector<float> out(static_cast<size_t>(M));
  cuda::copy_d2h(out.data(), step_->vote(), out.size() * sizeof(float), s);
  cuda::stream_sync(s);
  return out;
}

std::unique_ptr<GpuMethod> make_tokenselect_gpu(const TokenSelectMethod& m, const MethodContext& ctx) {
  const TokenSelectParams& t = m.params();
  // The GPU runs the method's default variant (the others are the paper's ablations, CPU only);
  // paged_dot puts a GQA group in one mma's 8 columns.
  constexpr int kMaxGroup = 8;
  const int g = ctx.n_kv_head > 0 ? ctx.n_head / ctx.n_kv_head : 0;
  if (t.keys != KeyLayout::pre_rope)
    fail("tokenselect on the GPU keeps pre-RoPE keys (keys=rotated runs on the CPU only)");
  if (t.vote != VoteMode::soft)
    fail("tokenselect on the GPU runs the soft vote (vote=hard and vote=naive run on the CPU only)");
  if (g < 1 || g > kMaxGroup)
    fail("tokenselect on the GPU needs at most {} query heads per KV head, but {} has {} ({} / {})", kMaxGroup,
         ctx.model_name, g, ctx.n_head, ctx.n_kv_head);
  return std::make_unique<TokenSelectGpu>(t, ctx);
}

}  // namespace longctx
