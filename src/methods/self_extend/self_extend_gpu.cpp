// self_extend_gpu.cpp: see self_extend_gpu.h.
#include "methods/self_extend/self_extend_gpu.h"

#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/self_extend.h"
#include "util/error.h"

namespace longctx {

namespace {

constexpr size_t kAlign = cuda::DeviceArena::kDefaultAlign;
constexpr size_t kBf16 = 2;

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

char* row_at(void* base, int64_t row, int64_t row_elems) {
  return static_cast<char*>(base) + size_t(row * row_elems) * kBf16;
}
const char* row_at(const void* base, int64_t row, int64_t row_elems) {
  return static_cast<const char*>(base) + size_t(row * row_elems) * kBf16;
}

}  // namespace

struct SelfExtendGpu::Sizes {
  size_t keys, q, lse, pos, lens, ws;  // one block of each (keys: all layers of one regime)
  size_t total() const { return 2 * keys + 3 * q + 2 * lse + 2 * pos + lens + ws; }
};

SelfExtendGpu::Sizes SelfExtendGpu::sizes(const GpuShape& shape) const {
  const size_t cap = size_t(std::max<int64_t>(shape.capacity, 1)), chunk = size_t(std::max<int64_t>(shape.chunk, 1));
  const size_t kv_row = size_t(ctx_.n_kv_head) * size_t(ctx_.head_dim) * kBf16;
  const size_t q_row = size_t(ctx_.n_head) * size_t(ctx_.head_dim) * kBf16;
  return {.keys = round_up(size_t(ctx_.n_layer) * cap * kv_row),
          .q = round_up(chunk * q_row),
          .lse = round_up(size_t(ctx_.n_head) * chunk * sizeof(float)),
          .pos = round_up(cap * sizeof(int32_t)),
          .lens = round_up(2 * sizeof(int32_t)),
          .ws = round_up(cuda::decode_workspace_bytes(1, ctx_.n_head, ctx_.head_dim, int64_t(cap)))};
}

size_t SelfExtendGpu::device_bytes(const GpuShape& shape) const { return sizes(shape).total(); }

void SelfExtendGpu::allocate(const GpuShape& shape, cuda::Stream s) {
  release();
  const Sizes z = sizes(shape);
  arena_ = std::make_unique<cuda::DeviceArena>(z.total());
  k_own_ = arena_->alloc(z.keys);
  k_grp_ = arena_->alloc(z.keys);
  q_own_ = arena_->alloc(z.q);
  q_grp_ = arena_->alloc(z.q);
  o_far_ = arena_->alloc(z.q);
  lse_near_ = static_cast<float*>(arena_->alloc(z.lse));
  lse_far_ = static_cast<float*>(arena_->alloc(z.lse));
  key_pos_ = static_cast<int32_t*>(arena_->alloc(z.pos));
  query_pos_ = static_cast<int32_t*>(arena_->alloc(z.pos));
  lens_ = static_cast<int32_t*>(arena_->alloc(z.lens));
  decode_ws_bytes_ = z.ws;
  decode_ws_ = arena_->alloc(z.ws);
  capacity_ = std::max<int64_t>(shape.capacity, 1);
  chunk_ = std::max<int64_t>(shape.chunk, 1);
  // The grouped positions (SE2) of every position the cache can hold, once: a step passes
  // key_pos_ + first row / query_pos_ + q_pos0 to cuda::rope.
  if (capacity_ > INT32_MAX) fail("Self-Extend on the GPU: capacity {} exceeds int32 positions", capacity_);
  std::vector<int32_t> kp(static_cast<size_t>(capacity_)), qp(kp.size());
  for (int64_t p = 0; p < capacity_; ++p) {
    kp[size_t(p)] = int32_t(self_extend_key_pos(se_, p));
    qp[size_t(p)] = int32_t(self_extend_query_pos(se_, p));
  }
  cuda::copy_h2d(key_pos_, kp.data(), kp.size() * sizeof(int32_t), s);
  cuda::copy_h2d(query_pos_, qp.data(), qp.size() * sizeof(int32_t), s);
  cuda::decode_workspace_init(decode_ws_, decode_ws_bytes_, s);
  cuda::stream_sync(s);  // kp, qp are locals
  rotated_.assign(size_t(ctx_.n_layer), 0);
  rotated_of_.assign(size_t(ctx_.n_layer), nullptr);
  decode_chain_.assign(size_t(ctx_.n_layer), 0);
}

void SelfExtendGpu::release() {
  arena_.reset();
  k_own_ = k_grp_ = q_own_ = q_grp_ = o_far_ = decode_ws_ = nullptr;
  lse_near_ = lse_far_ = nullptr;
  key_pos_ = query_pos_ = lens_ = nullptr;
  decode_ws_bytes_ = 0;
  capacity_ = chunk_ = 0;
  rotated_.clear();
  rotated_of_.clear();
  decode_chain_.clear();
}

void SelfExtendGpu::start_sequence(cuda::Stream) {
  std::fill(rotated_.begin(), rotated_.end(), 0);
  std::fill(rotated_of_.begin(), rotated_of_.end(), nullptr);
  std::fill(decode_chain_.begin(), decode_chain_.end(), 0);
}

GpuIndex SelfExtendGpu::build_prefill(const GpuPrefillStep&, cuda::Stream) {
  fail("internal: Self-Extend attends its steps itself (GpuMethod::attend)");
}

void SelfExtendGpu::rotate_keys(const GpuAttendStep& step, int64_t from, int64_t to, cuda::Stream s) {
  const int64_t row = int64_t(ctx_.n_kv_head) * ctx_.head_dim, n = to - from;
  if (n <= 0) return;
  const size_t layer_off = size_t(step.layer) * size_t(capacity_);
  for (const bool grouped : {false, true}) {
    char* dst = row_at(grouped ? k_grp_ : k_own_, int64_t(layer_off) + from, row);
    cuda::copy_d2d(dst, row_at(step.k, from, row), size_t(n * row) * kBf16, s);
    cuda::rope({.q = dst, .n_q_heads = ctx_.n_kv_head, .head_dim = ctx_.head_dim, .n_tokens = n, .pos0 = from,
                .positions = grouped ? key_pos_ + from : nullptr, .inv_freq = step.inv_freq,
                .attn_factor = step.rope_factor},
               s);
  }
}

void SelfExtendGpu::rotate_queries(const GpuAttendStep& step, int64_t q_pos0, bool grouped, void* dst,
                                   cuda::Stream s) {
  cuda::copy_d2d(dst, step.q, size_t(step.n_q * ctx_.n_head * ctx_.head_dim) * kBf16, s);
  cuda::rope({.q = dst, .n_q_heads = ctx_.n_head, .head_dim = ctx_.head_dim, .n_tokens = step.n_q, .pos0 = q_pos0,
              .positions = grouped ? query_pos_ + q_pos0 : nullptr, .inv_freq = step.inv_freq,
              .attn_factor = step.rope_factor},
             s);
}

void SelfExtendGpu::attend(const GpuAttendStep& step, cuda::Stream s) {
  rotate_step(step, s);
  attend_dense(step, s);
}

const void* SelfExtendGpu::keys_own(int layer) const {
  return row_at(k_own_, int64_t(layer) * capacity_, int64_t(ctx_.n_kv_head) * ctx_.head_dim);
}

const void* SelfExtendGpu::keys_grouped(int layer) const {
  return row_at(k_grp_, int64_t(layer) * capacity_, int64_t(ctx_.n_kv_head) * ctx_.head_dim);
}

const void* SelfExtendGpu::rotated_queries(const GpuAttendStep& step, bool grouped, cuda::Stream s) {
  void* dst = grouped ? q_grp_ : q_own_;
  rotate_queries(step, step.n_kv - step.n_q, grouped, dst, s);
  return dst;
}

void SelfExtendGpu::merge(const GpuAttendStep& step, int64_t far_row0, cuda::Stream s) {
  cuda::self_extend_merge({.o = step.o, .lse_near = lse_near_, .o_far = o_far_, .lse_far = lse_far_,
                           .n_q = step.n_q, .far_row0 = far_row0, .n_head = ctx_.n_head, .head_dim = ctx_.head_dim},
                          s);
}

void SelfExtendGpu::attend_dense(const GpuAttendStep& step, cuda::Stream s) {
  if (step.phase == Phase::decode && step.n_q == 1)
    decode(step, s);
  else
    prefill(step, s);
}

void SelfExtendGpu::rotate_step(const GpuAttendStep& step, cuda::Stream s) {
  if (!arena_) fail("internal: Self-Extend attend() before allocate()");
  if (step.kv_fp8) fail("internal: Self-Extend on the GPU reads bf16 keys (decode_reads_fp8 is false)");
  if (!step.inv_freq) fail("internal: Self-Extend needs the layer's RoPE frequencies");
  if (step.layer < 0 || step.layer >= ctx_.n_layer) fail("internal: Self-Extend step of layer {}", step.layer);
  if (step.n_q < 1 || step.n_q > step.n_kv || step.n_kv > capacity_ || step.n_q > chunk_)
    fail("internal: Self-Extend step of {} rows over {} keys (capacity {}, chunk {})", step.n_q, step.n_kv, capacity_,
         chunk_);
  // Rows below the step's own were rotated by an earlier step of this sequence unless they came
  // from other key memory (see the header).
  const int64_t q_pos0 = step.n_kv - step.n_q;
  const size_t l = size_t(step.layer);
  const bool same = rotated_of_[l] == step.k;
  const bool decode = step.phase == Phase::decode && step.n_q == 1;
  if (!decode) {
    rotate_keys(step, same ? std::min(rotated_[l], q_pos0) : 0, step.n_kv, s);
  } else {
    // Rows below pos that no decode step rotated (host lengths; none in the model's decode after
    // a prefill), then row pos, the query and the lengths from the device length.
    const int64_t from = !same ? 0 : decode_chain_[l] ? q_pos0 : std::min(rotated_[l], q_pos0);
    rotate_keys(step, from, q_pos0, s);
    const size_t layer_off = size_t(step.layer) * size_t(capacity_);
    const int64_t kv_row = int64_t(ctx_.n_kv_head) * ctx_.head_dim;
    cuda::self_extend_decode_prep({.n_kv_dev = step.n_kv_dev, .n_kv = step.n_kv, .k = step.k,
                                   .k_own = row_at(k_own_, int64_t(layer_off), kv_row),
                                   .k_grp = row_at(k_grp_, int64_t(layer_off), kv_row), .q = step.q, .q_own = q_own_,
                                   .q_grp = q_grp_, .key_pos = key_pos_, .query_pos = query_pos_,
                                   .inv_freq = step.inv_freq, .attn_factor = step.rope_factor, .n_head = ctx_.n_head,
                                   .n_kv_head = ctx_.n_kv_head, .head_dim = ctx_.head_dim, .neighbor = se_.neighbor,
                                   .lens = lens_},
                                  s);
  }
  rotated_[l] = step.n_kv;
  rotated_of_[l] = step.k;
  decode_chain_[l] = decode;
}

int64_t SelfExtendGpu::decode_bound(const GpuAttendStep& step) const {
  return step.n_kv_dev ? std::min(std::max(step.n_kv_bound, step.n_kv), capacity_) : step.n_kv;
}

void SelfExtendGpu::prefill(const GpuAttendStep& step, cuda::Stream s) {
  const int64_t W = se_.neighbor, q_pos0 = step.n_kv - step.n_q;
  const int64_t kv_row = int64_t(ctx_.n_kv_head) * ctx_.head_dim, q_row = int64_t(ctx_.n_head) * ctx_.head_dim;
  const size_t layer_off = size_t(step.layer) * size_t(capacity_);
  const void* k_own = row_at(k_own_, int64_t(layer_off), kv_row);
  const void* k_grp = row_at(k_grp_, int64_t(layer_off), kv_row);
  // (SE1) near: own positions, window W.
  rotate_queries(step, q_pos0, false, q_own_, s);
  cuda::attention_prefill({.q = q_own_, .k = k_own, .v = step.v, .o = step.o, .lse = lse_near_, .n_q = step.n_q,
                           .n_kv = step.n_kv, .n_head = ctx_.n_head, .n_kv_head = ctx_.n_kv_head,
                           .head_dim = ctx_.head_dim, .q_pos0 = q_pos0, .scale = step.scale, .causal = true,
                           .window = W},
                          s);
  // (SE2) far: rows q >= W (chunk rows r0..), keys 0..q-W at grouped positions.
  const int64_t r0 = std::max<int64_t>(0, W - q_pos0);
  if (r0 >= step.n_q) return;
  const int64_t n_far = step.n_q - r0;
  rotate_queries(step, q_pos0, true, q_grp_, s);
  cuda::attention_prefill({.q = row_at(q_grp_, r0, q_row), .k = k_grp, .v = step.v, .o = o_far_, .lse = lse_far_,
                           .n_q = n_far, .n_kv = step.n_kv - W, .n_head = ctx_.n_head, .n_kv_head = ctx_.n_kv_head,
                           .head_dim = ctx_.head_dim, .q_pos0 = q_pos0 + r0 - W, .scale = step.scale,
                           .causal = true},
                          s);
  merge(step, r0, s);  // (SE3) one softmax over both
}

void SelfExtendGpu::decode(const GpuAttendStep& step, cuda::Stream s) {
  // rotate_step prepared the step on the device: q_own_ / q_grp_, row pos of both key copies,
  // lens_ = {n_kv, max(n_kv - W, 0)}. The plans are sized by the bound, the lengths read on the device.
  const int64_t W = se_.neighbor, bound = decode_bound(step);
  const int64_t kv_row = int64_t(ctx_.n_kv_head) * ctx_.head_dim;
  const size_t layer_off = size_t(step.layer) * size_t(capacity_);
  cuda::DecodeParams dp{.v = step.v, .n_seq = 1, .n_head = ctx_.n_head, .n_kv_head = ctx_.n_kv_head,
                        .head_dim = ctx_.head_dim, .scale = step.scale, .workspace = decode_ws_,
                        .workspace_bytes = decode_ws_bytes_};
  // (SE1) near: the last W keys at their own positions.
  dp.q = q_own_;
  dp.k = row_at(k_own_, int64_t(layer_off), kv_row);
  dp.o = step.o;
  dp.lse = lse_near_;
  dp.n_kv = bound;
  dp.kv_lens = lens_;
  dp.window = W;
  cuda::attention_decode(dp, s);
  // (SE2) far: keys 0..pos-W at grouped positions; none while pos < W (length 0: LSE = -inf, the
  // merge keeps the near part; self_extend.h).
  dp.q = q_grp_;
  dp.k = row_at(k_grp_, int64_t(layer_off), kv_row);
  dp.o = o_far_;
  dp.lse = lse_far_;
  dp.n_kv = std::max<int64_t>(bound - W, 1);  // the plan's bound (attention_decode needs >= 1)
  dp.kv_lens = lens_ + 1;
  dp.window = 0;
  cuda::attention_decode(dp, s);
  merge(step, 0, s);  // (SE3); decode's lse [n_seq = 1, n_head] is [n_head, n_q = 1]
}

std::unique_ptr<GpuMethod> make_self_extend_gpu(const SelfExtendParams& se, const MethodContext& ctx) {
  const int d = ctx.head_dim;
  if (d != 16 && d != 32 && d != 64 && d != 128 && d != 256)
    fail("Self-Extend on the GPU needs head_dim 16, 32, 64, 128 or 256 (the dense kernels'), but {} has head_dim {}",
         ctx.model_name, d);
  if (ctx.n_kv_head <= 0 || ctx.n_head % ctx.n_kv_head != 0 || ctx.n_head / ctx.n_kv_head > 16)
    fail("Self-Extend on the GPU needs at most 16 query heads per KV head (the decode kernel's), but {} has {}/{}",
         ctx.model_name, ctx.n_head, ctx.n_kv_head);
  return std::make_unique<SelfExtendGpu>(se, ctx);
}

}  // namespace longctx
