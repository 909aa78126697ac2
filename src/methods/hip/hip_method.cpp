// hip_method.cpp: see hip_method.h.
#include "methods/hip/hip_method.h"

#include <fmt/format.h>

#include "methods/method_args.h"
#include "util/error.h"

namespace longctx {

HipParams parse_hip_params(const std::string& arg) {
  HipParams hp;
  for (const std::string& kv : split_spec(arg, ',')) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) fail("hip: expected KEY=VALUE, got '{}' (keys: k, b_q, b_sq, b_k, b_sk, window, sinks, refresh, dense_layers, self_extend)", kv);
    const std::string key = kv.substr(0, eq);
    if (key == "self_extend") {
      hp.self_extend = parse_self_extend(std::string_view(kv).substr(eq + 1), "hip");
      continue;
    }
    const int64_t v = parse_count(std::string_view(kv).substr(eq + 1), "hip", key);
    if (key == "k") hp.topk.k = v;
    else if (key == "b_q") hp.topk.b_q = int(v);
    else if (key == "b_sq") hp.topk.b_sq = int(v);
    else if (key == "b_k") hp.topk.b_k = int(v);
    else if (key == "b_sk") hp.topk.b_sk = int(v);
    else if (key == "window") hp.window = v;
    else if (key == "sinks") hp.sinks = v;
    else if (key == "refresh") hp.refresh = int(v);
    else if (key == "dense_layers") hp.dense_layers = int(v);
    else fail("hip: unknown key '{}' (keys: k, b_q, b_sq, b_k, b_sk, window, sinks, refresh, dense_layers, self_extend)", key);
  }
  check_hip_topk_params(hp.topk, "hip");
  if (hp.topk.b_q != kSparseBlockQ) fail("hip: b_q must be {} (the sparse index's query block), got {}", kSparseBlockQ, hp.topk.b_q);
  if (hp.window < 1) fail("hip: window must be >= 1 so that each token attends itself");
  if (hp.refresh < 1 || hp.refresh > hp.window)
    fail("hip: refresh={} must be in [1, window={}] so that the tokens decoded since the last estimate stay in the window",
         hp.refresh, hp.window);
  return hp;
}

std::string HipMethod::name() const {
  const std::string se = self_extend_spec(hp_.self_extend);
  return fmt::format("hip=k={},b_q={},b_sq={},b_k={},b_sk={},window={},sinks={},refresh={},dense_layers={}{}{}",
                     hp_.topk.k, hp_.topk.b_q, hp_.topk.b_sq, hp_.topk.b_k, hp_.topk.b_sk, hp_.window, hp_.sinks,
                     hp_.refresh, hp_.dense_layers, se.empty() ? "" : ",", se);
}

Route HipMethod::route(const AttnStep& s) const {
  if (s.layer >= 0 && s.layer < hp_.dense_layers) return Route::dense;
  // The last row's search region: nothing to prune when it holds at most k keys.
  return s.n_kv - hp_.window - hp_.sinks <= hp_.topk.k ? Route::dense : Route::sparse;
}

SparseIndex HipMethod::build_index(const AttnParams& p, Phase phase, MethodState& state, ThreadPool& pool) const {
  if (phase == Phase::decode && p.n_q == 1) return decode_index(p, static_cast<HipState&>(state), pool);
  return hip_sparse_index(hp_, hip_estimate(hp_, p, pool), p);
}

SparseIndex HipMethod::decode_index(const AttnParams& p, HipState& st, ThreadPool& pool) const {
  if (p.layer < 0) fail("internal: hip decode needs the step's layer");
  if (st.layers.size() <= size_t(p.layer)) st.layers.resize(size_t(p.layer) + 1);
  HipDecodeCache& c = st.layers[size_t(p.layer)];
  if (hip_refreshes(c.refresh_pos, p.q_pos0, hp_.refresh)) {
    c.mask = hip_estimate(hp_, p, pool);
    c.refresh_pos = p.q_pos0;
    c.key_end = hip_region(hp_, p.q_pos0).key_end;
    ++st.estimates;
  }
  // The cached blocks, with the window anchored at the estimate's region end.
  SparseIndex idx = hip_sparse_index(hp_, c.mask, p);
  for (HeadIndex& hi : idx.heads)
    if (!hi.ranges.empty() && hi.ranges.back().end == int32_t(p.n_kv)) hi.ranges.back().start = int32_t(c.key_end);
  return idx;
}

std::unique_ptr<AttentionMethod> make_hip_method(const std::string& arg, const MethodContext& ctx) {
  HipParams hp = parse_hip_params(arg);
  if (ctx.n_layer > 0 && hp.dense_layers > ctx.n_layer)
    fail("hip: dense_layers={} exceeds the model's {} layers", hp.dense_layers, ctx.n_layer);
  return std::make_unique<HipMethod>(hp);
}

}  // namespace longctx
