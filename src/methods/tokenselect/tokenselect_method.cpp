// tokenselect_method.cpp: see tokenselect_method.h.
#include "methods/tokenselect/tokenselect_method.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "kernels/ref/ops.h"
#include "methods/method_args.h"
#include "sparse/sparse_index.h"
#include "util/error.h"

namespace longctx {

namespace {

const char* vote_name(VoteMode v) { return v == VoteMode::soft ? "soft" : v == VoteMode::hard ? "hard" : "naive"; }

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

double parse_theta(const std::string& text) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v))
    fail("tokenselect: theta must be a number (got '{}')", text);
  return v;
}

// |a ∩ b| / |b| of two ascending position lists.
double overlap(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0, j = 0, common = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) ++common, ++i, ++j;
    else if (a[i] < b[j]) ++i;
    else ++j;
  }
  return b.empty() ? 1.0 : double(common) / double(b.size());
}

}  // namespace

std::string TokenSelectMethod::name() const {
  return fmt::format("tokenselect=n_init={},k={},n_local={},chunk={},theta={},vote={},keys={}{}", t_.n_init, t_.k,
                     t_.n_local, t_.chunk, t_.theta, vote_name(t_.vote),
                     t_.keys == KeyLayout::pre_rope ? "pre_rope" : "rotated", t_.scores_f16 ? ",scores=f16" : "");
}

std::unique_ptr<MethodState> TokenSelectMethod::start_sequence() const { return std::make_unique<State>(); }

std::vector<KeySegment> TokenSelectMethod::plan(const AttnParams& p, Phase phase, const LayerRope* rope, State& st,
                                                ThreadPool& pool) const {
  const int64_t D = p.head_dim, Q = int64_t(p.n_head) * D;
  std::vector<KeySegment> out;
  std::vector<float> rows, qs(static_cast<size_t>(Q));  // rows: [C, Q] rotated copies; qs: the selection query [Q]
  for (int64_t a = 0; a < p.n_q; a += t_.chunk) {
    const int64_t b = std::min(p.n_q, a + t_.chunk), C = b - a, n_kv = p.q_pos0 + b;
    KeySegment seg{a, b, {}};
    std::vector<int32_t> selected;
    if (n_kv > t_.budget()) {
      // The selection query: the mean of the sub-chunk's queries (pre_rope: each rotated at
      // n_local + i against un-rotated keys, as the authors' code scores).
      rows.assign(p.q + a * Q, p.q + b * Q);
      if (rope) rope_apply_ref(rows.data(), C, p.n_head, int(D), t_.n_local, rope->inv_freq, pool, rope->factor);
      std::fill(qs.begin(), qs.end(), 0.f);
      for (int64_t i = 0; i < C; ++i)
        for (int64_t e = 0; e < Q; ++e) qs[size_t(e)] += rows[size_t(i * Q + e)];
      for (float& x : qs) x /= float(C);
      const SelectInput in{.q = qs.data(), .k = p.k, .n_kv = n_kv, .n_head = p.n_head, .n_kv_head = p.n_kv_head,
                           .head_dim = p.head_dim, .scores_f16 = t_.scores_f16};
      // The audits of a fresh selection: scoring fp8-rounded keys, storing fp16 scores.
      auto audit = [&](const std::vector<int32_t>& exact) {
        const int ph = phase == Phase::decode ? 1 : 0;
        if (st.audit_f16) {
          SelectInput in16 = in;
          in16.scores_f16 = true;
          st.f16_overlap_sum[ph] += overlap(select_tokens(t_, in16, pool), exact);
          ++st.f16_selections[ph];
        }
        if (!st.audit_fp8) return;
        const std::vector<float> k8 = fp8_roundtrip(p.k, n_kv * p.n_kv_head * D);
        SelectInput in8 = in;
        in8.k = k8.data();
        st.fp8_overlap_sum[ph] += overlap(select_tokens(t_, in8, pool), exact);
        ++st.fp8_selections[ph];
      };
      if (phase == Phase::decode && p.n_q == 1) {  // the selection cache (Alg. 1)
        const size_t l = size_t(std::max(p.layer, 0));
        if (st.layers.size() <= l) st.layers.resize(l + 1);
        State::Layer& c = st.layers[l];
        if (!c.first && cosine(qs, c.q) >= t_.theta) {
          selected = c.selected;
          ++st.hits;
          if (st.audit) st.overlap_sum += overlap(selected, select_tokens(t_, in, pool));
        } else {
          selected = select_tokens(t_, in, pool);
          audit(selected);
          c = {.first = false, .q = qs, .selected = selected};
          ++st.misses;
        }
      } else {
        selected = select_tokens(t_, in, pool);
        audit(selected);
      }
    }
    seg.keys = budget_keys(t_, n_kv, selected);
    out.push_back(std::move(seg));
  }
  return out;
}

std::vector<KeySegment> TokenSelectMethod::select_keys(const AttnParams& p, Phase phase, const LayerRope& rope,
                                                       MethodState& state, ThreadPool& pool) const {
  return plan(p, phase, t_.keys == KeyLayout::pre_rope ? &rope : nullptr, static_cast<State&>(state), pool);
}

SparseIndex TokenSelectMethod::build_index(const AttnParams& p, Phase phase, MethodState& state,
                                           ThreadPool& pool) const {
  SparseIndex idx;
  idx.n_q = p.n_q;
  idx.heads.resize(1);  // one key set shared by every head
  HeadIndex& hi = idx.heads[0];
  for (const KeySegment& s : plan(p, phase, nullptr, static_cast<State&>(state), pool)) {
    const int64_t n_kv = p.q_pos0 + s.q_end;
    const bool dense = n_kv <= t_.budget();
    for (int64_t r = s.q_begin; r < s.q_end; r += kSparseBlockQ) {  // chunk is a multiple of 64
      if (dense) {
        hi.ranges.push_back({0, int32_t(n_kv)});
      } else {
        hi.ranges.push_back({0, int32_t(t_.n_init)});
        hi.ranges.push_back({int32_t(n_kv - t_.n_local), int32_t(n_kv)});
        hi.cols.insert(hi.cols.end(), s.keys.begin() + t_.n_init, s.keys.end() - t_.n_local);
      }
      hi.end_block();
    }
  }
  return idx;
}

std::unique_ptr<AttentionMethod> make_tokenselect_method(const std::string& arg, const MethodContext&) {
  TokenSelectParams t;
  for (const std::string& kv : split_spec(arg, ',')) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      fail("tokenselect: expected KEY=VAL (got '{}'; keys: n_init, k, n_local, chunk, theta, vote, keys, scores)", kv);
    const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
    if (key == "n_init") t.n_init = parse_count(val, "tokenselect", key);
    else if (key == "k") t.k = parse_count(val, "tokenselect", key);
    else if (key == "n_local") t.n_local = parse_count(val, "tokenselect", key);
    else if (key == "chunk") t.chunk = parse_count(val, "tokenselect", key);
    else if (key == "theta") t.theta = parse_theta(val);
    else if (key == "vote") {
      if (val == "soft") t.vote = VoteMode::soft;
      else if (val == "hard") t.vote = VoteMode::hard;
      else if (val == "naive") t.vote = VoteMode::naive;
      else fail("tokenselect: vote must be soft, hard or naive (got '{}')", val);
    } else if (key == "keys") {
      if (val == "pre_rope") t.keys = KeyLayout::pre_rope;
      else if (val == "rotated") t.keys = KeyLayout::rotated;
      else fail("tokenselect: keys must be pre_rope or rotated (got '{}')", val);
    } else if (key == "scores") {
      if (val == "f32") t.scores_f16 = false;
      else if (val == "f16") t.scores_f16 = true;
      else fail("tokenselect: scores must be f32 or f16 (got '{}')", val);
    } else {
      fail("tokenselect: unknown option '{}' (keys: n_init, k, n_local, chunk, theta, vote, keys, scores)", key);
    }
  }
  if (t.chunk == 0 || t.chunk % kSparseBlockQ != 0)
    fail("tokenselect: chunk must be a positive multiple of {} (got {})", kSparseBlockQ, t.chunk);
  // The local window holds the sub-chunk's own rows, so no query sees a later token.
  if (t.n_local < t.chunk) fail("tokenselect: n_local ({}) must be >= chunk ({})", t.n_local, t.chunk);
  if (t.k == 0) fail("tokenselect: k must be >= 1");
  if (t.budget() > INT32_MAX) fail("tokenselect: budget n_init + k + n_local is too large");
  return std::make_unique<TokenSelectMethod>(t);
}

}  // namespace longctx
