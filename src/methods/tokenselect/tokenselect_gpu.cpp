// tokenselect_gpu.cpp: see tokenselect_gpu.h.
#include "methods/tokenselect/tokenselect_gpu.h"

#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/compact_kv.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/paged_dot.h"
#include "kernels/cuda/soft_vote.h"
#include "kernels/cuda/topk_select.h"
#include "util/error.h"

namespace longctx {

namespace {

constexpr size_t kAlign = cuda::DeviceArena::kDefaultAlign;

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The key count the selection kernels are launched for: n_kv, or with a device length its bound.
int64_t launch_kv(const TokenSelectGpuInput& in) { return in.n_kv_dev ? std::max(in.n_kv, in.n_kv_bound) : in.n_kv; }

struct Sizes {
  int64_t max_m = 0, budget = 0;
  size_t qs, scores, head_stats, vote, vote_ws, topk_ws, keys, kv_c, q_rot, decode_ws;
  size_t total() const {
    return qs + scores + head_stats + vote + vote_ws + topk_ws + keys + 2 * kv_c + q_rot + decode_ws;
  }
};

Sizes sizes(const TokenSelectParams& t, const TokenSelectGpuShape& s) {
  Sizes z{};
  z.budget = t.budget();
  z.max_m = std::max<int64_t>(s.max_kv - t.n_init - t.n_local, 1);
  const size_t H = size_t(s.n_head), D = size_t(s.head_dim), L = size_t(z.budget);
  z.qs = round_up(H * D * 4);
  z.scores = round_up(H * size_t(z.max_m) * (s.scores == cuda::ScoreElem::f16 ? 2 : 4));
  z.head_stats = round_up(H * size_t(cuda::paged_dot_max_stats_parts()) * 2 * 4);
  z.vote = round_up(size_t(z.max_m) * 4);
  z.vote_ws = round_up(cuda::soft_vote_workspace_bytes(s.n_head));
  z.topk_ws = round_up(cuda::top_k_select_workspace_bytes());
  z.keys = round_up(L * 4);
  z.kv_c = round_up(L * size_t(s.n_kv_head) * D * 2);
  z.q_rot = round_up(size_t(s.max_rows) * H * D * 2);
  z.decode_ws = round_up(cuda::decode_workspace_bytes(1, s.n_head, s.head_dim, z.budget));
  return z;
}

}  // namespace

size_t TokenSelectGpuStep::device_bytes(const TokenSelectParams& t, const TokenSelectGpuShape& shape) {
  return sizes(t, shape).total();
}

TokenSelectGpuStep::TokenSelectGpuStep(const TokenSelectParams& t, const TokenSelectGpuShape& shape)
    : t_(t), shape_(shape) {
  if (t.vote != VoteMode::soft) fail("tokenselect on the GPU: vote={} runs on the CPU only (the GPU votes soft)",
                                     t.vote == VoteMode::hard ? "hard" : "naive");
  if (shape.n_head <= 0 || shape.n_kv_head <= 0 || shape.max_kv <= 0 || shape.max_rows <= 0)
    fail("internal: tokenselect GPU shape {} / {} heads, {} keys, {} rows", shape.n_head, shape.n_kv_head,
         shape.max_kv, shape.max_rows);
  const Sizes z = sizes(t, shape);
  max_m_ = z.max_m;
  arena_ = std::make_unique<cuda::DeviceArena>(z.total());
  qs_ = static_cast<float*>(arena_->alloc(z.qs));
  scores_ = arena_->alloc(z.scores);
  head_stats_ = static_cast<float*>(arena_->alloc(z.head_stats));
  vote_ = static_cast<float*>(arena_->alloc(z.vote));
  vote_ws_ = arena_->alloc(z.vote_ws);
  topk_ws_ = arena_->alloc(z.topk_ws);
  keys_ = static_cast<int32_t*>(arena_->alloc(z.keys));
  k_c_ = arena_->alloc(z.kv_c);
  v_c_ = arena_->alloc(z.kv_c);
  q_rot_ = arena_->alloc(z.q_rot);
  decode_ws_ = arena_->alloc(z.decode_ws);
  decode_ws_bytes_ = z.decode_ws;
  cuda::decode_workspace_init(decode_ws_, decode_ws_bytes_);
}

void TokenSelectGpuStep::check(const TokenSelectGpuInput& in) const {
  if (in.n_rows <= 0 || in.n_rows > shape_.max_rows || in.n_rows > t_.chunk || in.n_kv < in.n_rows ||
      in.n_kv > shape_.max_kv || (in.n_kv_dev && (in.n_rows != 1 || launch_kv(in) > shape_.max_kv)))
    fail("internal: tokenselect GPU step of {} rows over {} keys (at most {} rows, chunk {}, {} keys)", in.n_rows,
         in.n_kv, shape_.max_rows, t_.chunk, shape_.max_kv);
}

void TokenSelectGpuStep::stage_query(const TokenSelectGpuInput& in, cuda::Stream s) {
  cuda::selection_query({.q = in.q, .n_rows = in.n_rows, .pos0 = t_.n_local, .inv_freq = in.inv_freq,
                         .attn_factor = in.rope_factor, .n_head = shape_.n_head, .head_dim = shape_.head_dim, .out = qs_},
                        s);
}

void TokenSelectGpuStep::stage_score(const TokenSelectGpuInput& in, cuda::Stream s) {
  // e4m3 keys: the fp8 pool itself, or an fp8 copy of a bf16 pool's keys (k_score).
  const bool fp8 = in.pool_fp8 || in.k_score != nullptr;
  const void* keys = in.pool_fp8 ? in.k_pool : in.k_score ? in.k_score : in.k_pool;
  const float scale = in.pool_fp8 ? in.k_scale : in.k_score_scale;
  cuda::paged_dot({.q_f32 = qs_, .k_pool = keys, .slots = in.slots + t_.n_init,
                   .scores = scores_, .n_slot = launch_kv(in) - t_.n_init - t_.n_local, .n_head = shape_.n_head,
                   .n_kv_head = shape_.n_kv_head, .head_dim = shape_.head_dim, .skip = in.skip,
                   .n_dev = in.n_kv_dev, .n_sub = int32_t(t_.n_init + t_.n_local),
                   .k_elem = fp8 ? cuda::PagedDotKeys::fp8_e4m3 : cuda::PagedDotKeys::bf16,
                   .k_scale = fp8 ? scale : 1.f, .head_stats = head_stats_, .score_elem = shape_.scores},
                  s);
}

void TokenSelectGpuStep::stage_vote(const TokenSelectGpuInput& in, cuda::Stream s) {
  const int64_t M = launch_kv(in) - t_.n_init - t_.n_local;
  cuda::soft_vote({.scores = scores_, .vote = vote_, .n_head = shape_.n_head, .M = M, .naive = false,
                   .workspace = vote_ws_, .skip = in.skip, .m_dev = in.n_kv_dev,
                   .m_sub = int32_t(t_.n_init + t_.n_local), .head_stats = head_stats_,
                   .stats_parts = cuda::paged_dot_stats_parts(M, shape_.n_kv_head), .score_elem = shape_.scores},
                  s);
}

void TokenSelectGpuStep::stage_top_k(const TokenSelectGpuInput& in, cuda::Stream s) {
  const int64_t M = launch_kv(in) - t_.n_init - t_.n_local;
  cuda::top_k_select({.vote = vote_, .max_M = M, .m_dev = in.n_kv_dev, .m_sub = int32_t(t_.n_init + t_.n_local),
                      .k = t_.k, .offset = int32_t(t_.n_init), .out = keys_ + t_.n_init,
                      .skip = in.skip, .workspace = topk_ws_},
                     s);
  stage_ranges(in, s);
}

void TokenSelectGpuStep::stage_ranges(const TokenSelectGpuInput& in, cuda::Stream s) {
  cuda::budget_key_ranges({.keys = keys_, .n_init = t_.n_init, .n_select = t_.k, .n_local = t_.n_local,
                           .n_kv = in.n_kv, .n_kv_dev = in.n_kv_dev},
                          s);
}

void TokenSelectGpuStep::select(const TokenSelectGpuInput& in, cuda::Stream s) {
  check(in);
  if (!selects(in.n_kv)) fail("internal: tokenselect GPU select over {} keys within the budget {}", in.n_kv,
                              t_.budget());
  stage_query(in, s);
  stage_score(in, s);
  stage_vote(in, s);
  stage_top_k(in, s);
}

void TokenSelectGpuStep::stage_compact(const TokenSelectGpuInput& in, cuda::Stream s) {
  if (!selects(in.n_kv))
    cuda::budget_key_ranges({.keys = keys_, .n_init = in.n_kv, .n_kv = in.n_kv}, s);
  cuda::compact_kv({.k_pool = in.k_pool, .v_pool = in.v_pool, .slots = in.slots, .keys = keys_,
                    .n_keys = n_keys(in.n_kv), .k_out = k_c_, .v_out = v_c_, .inv_freq = in.inv_freq,
                    .attn_factor = in.rope_factor,
                    .n_kv_head = shape_.n_kv_head, .head_dim = shape_.head_dim, .fp8 = in.pool_fp8,
                    .k_scale = in.k_scale, .v_scale = in.v_scale},
                   s);
}

void TokenSelectGpuStep::stage_attention(const TokenSelectGpuInput& in, cuda::Stream s) {
  const int64_t L = n_keys(in.n_kv), C = in.n_rows;
  const size_t q_bytes = size_t(C) * size_t(shape_.n_head) * size_t(shape_.head_dim) * 2;
  cuda::copy_d2d(q_rot_, in.q, q_bytes, s);
  cuda::RopeParams rp;
  rp.q = q_rot_;
  rp.n_q_heads = shape_.n_head;
  rp.head_dim = shape_.head_dim;
  rp.n_tokens = C;
  rp.pos0 = L - C;
  rp.inv_freq = in.inv_freq;
  rp.attn_factor = in.rope_factor;
  cuda::rope(rp, s);
  if (C == 1) {
    cuda::DecodeParams d;
    d.q = q_rot_;
    d.k = k_c_;
    d.v = v_c_;
    d.o = in.o;
    d.n_kv = L;
    d.scale = in.scale;
    d.n_head = shape_.n_head;
    d.n_kv_head = shape_.n_kv_head;
    d.head_dim = shape_.head_dim;
    d.workspace = decode_ws_;
    d.workspace_bytes = decode_ws_bytes_;
    cuda::attention_decode(d, s);
    return;
  }
  cuda::PrefillParams p;
  p.q = q_rot_;
  p.k = k_c_;
  p.v = v_c_;
  p.o = in.o;
  p.n_q = C;
  p.n_kv = L;
  p.n_head = shape_.n_head;
  p.n_kv_head = shape_.n_kv_head;
  p.head_dim = shape_.head_dim;
  p.q_pos0 = L - C;
  p.scale = in.scale;
  p.causal = true;
  cuda::attention_prefill(p, s);
}

void TokenSelectGpuStep::attend(const TokenSelectGpuInput& in, cuda::Stream s) {
  check(in);
  stage_compact(in, s);
  stage_attention(in, s);
}

}  // namespace longctx
