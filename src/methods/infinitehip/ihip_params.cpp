// ihip_params.cpp: see ihip_params.h.
#include "methods/infinitehip/ihip_params.h"

#include <fmt/format.h>

#include <algorithm>

#include "methods/method_args.h"
#include "sparse/sparse_index.h"
#include "util/error.h"

namespace longctx {

namespace {

constexpr const char* kKeys = "l_c, k, refresh, b_q, n_sink, n_stream, early_layers, k_early, rope, dense_layers, rank";

std::vector<int64_t> parse_list(const std::string& text, const std::string& key) {
  std::vector<int64_t> out;
  for (const std::string& v : split_spec(text, '/')) out.push_back(parse_count(v, "infinitehip", key));
  if (out.empty()) fail("infinitehip: {} needs a '/'-separated list (got '{}')", key, text);
  return out;
}

std::vector<int> parse_layers(const std::string& text) {
  std::vector<int> out;
  for (const std::string& part : split_spec(text, '+')) {
    const auto dash = part.find('-');
    const int64_t a = parse_count(part.substr(0, dash), "infinitehip", "dense_layers");
    const int64_t b = dash == std::string::npos ? a : parse_count(part.substr(dash + 1), "infinitehip", "dense_layers");
    if (b < a) fail("infinitehip: dense_layers range '{}' is empty", part);
    for (int64_t l = a; l <= b; ++l) out.push_back(int(l));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

template <class T>
std::string join(const std::vector<T>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? sep : "", v[i]);
  return s;
}

void check(const IhipParams& p) {
  if (p.stages.empty()) fail("infinitehip: at least one pruning stage is needed");
  if (p.refresh.size() != p.stages.size())
    fail("infinitehip: refresh has {} entries for {} stages", p.refresh.size(), p.stages.size());
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const IhipStage& s = p.stages[i];
    if (s.l_c < 1 || s.k < s.l_c || s.k % s.l_c)
      fail("infinitehip: stage {} needs l_c >= 1 and k a positive multiple of l_c (got l_c={} k={})", i + 1, s.l_c, s.k);
    if (p.refresh[i] < 1) fail("infinitehip: refresh of stage {} must be >= 1", i + 1);
    if (i > 0 && p.stages[i - 1].l_c % s.l_c)
      fail("infinitehip: l_c of stage {} ({}) must divide stage {}'s ({}) so that chunks stay contiguous", i + 1, s.l_c,
           i, p.stages[i - 1].l_c);
  }
  if (p.b_q != kSparseBlockQ) fail("infinitehip: b_q must be {} (the sparse index's query block), got {}", kSparseBlockQ, p.b_q);
  // The block's own rows sit in the streaming window, so no candidate is ever in a row's future.
  if (p.n_stream < p.b_q) fail("infinitehip: n_stream ({}) must be >= b_q ({})", p.n_stream, p.b_q);
  if (p.k_early < p.stages.back().l_c || p.k_early % p.stages.back().l_c)
    fail("infinitehip: k_early ({}) must be a positive multiple of the last stage's l_c ({})", p.k_early,
         p.stages.back().l_c);
  if (p.n_sink + p.n_stream + p.stages.front().k > INT32_MAX) fail("infinitehip: budgets too large");
}

}  // namespace

bool IhipParams::dense_layer(int layer) const {
  return std::binary_search(dense_layers.begin(), dense_layers.end(), layer);
}

IhipParams ihip_preset(const std::string& name) {
  IhipParams p;  // 3k
  if (name == "3k") return p;
  if (name == "3k-fast") p.refresh = {32, 16, 8};
  else if (name == "3k-flash") p.refresh = {96, 24, 8};
  else if (name == "5k") {
    p.stages = {{64, 32768}, {32, 16384}, {16, 4096}};
    p.k_early = 4096;
  } else {
    fail("infinitehip: unknown preset '{}' (presets: 3k, 3k-fast, 3k-flash, 5k)", name);
  }
  return p;
}

IhipParams parse_ihip_params(const std::string& arg) {
  std::vector<std::string> items = split_spec(arg, ',');
  IhipParams p;
  if (!items.empty() && items[0].find('=') == std::string::npos) {
    p = ihip_preset(items[0]);
    items.erase(items.begin());
  }
  std::vector<int64_t> l_c, k, refresh;
  for (const std::string& kv : items) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) fail("infinitehip: expected KEY=VALUE, got '{}' (a preset comes first; keys: {})", kv, kKeys);
    const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
    if (key == "l_c") l_c = parse_list(val, key);
    else if (key == "k") k = parse_list(val, key);
    else if (key == "refresh") refresh = parse_list(val, key);
    else if (key == "b_q") p.b_q = int(parse_count(val, "infinitehip", key));
    else if (key == "n_sink") p.n_sink = parse_count(val, "infinitehip", key);
    else if (key == "n_stream") p.n_stream = parse_count(val, "infinitehip", key);
    else if (key == "early_layers") p.early_layers = int(parse_count(val, "infinitehip", key));
    else if (key == "k_early") p.k_early = parse_count(val, "infinitehip", key);
    else if (key == "dense_layers") p.dense_layers = parse_layers(val);
    else if (key == "rope") {
      if (val == "on") p.rope = true;
      else if (val == "off") p.rope = false;
      else fail("infinitehip: rope must be on or off (got '{}')", val);
    } else if (key == "rank") {
      if (val == "paper") p.rank = IhipRank::paper;
      else if (val == "local") p.rank = IhipRank::local;
      else fail("infinitehip: rank must be paper or local (got '{}')", val);
    } else {
      fail("infinitehip: unknown key '{}' (keys: {})", key, kKeys);
    }
  }
  // Stage lists: l_c and k replace the preset's stages together (their lengths must agree).
  if (!l_c.empty() || !k.empty()) {
    if (l_c.empty()) for (const IhipStage& s : p.stages) l_c.push_back(s.l_c);
    if (k.empty()) for (const IhipStage& s : p.stages) k.push_back(s.k);
    if (l_c.size() != k.size()) fail("infinitehip: l_c has {} stages but k has {}", l_c.size(), k.size());
    p.stages.clear();
    for (size_t i = 0; i < l_c.size(); ++i) p.stages.push_back({int(l_c[i]), k[i]});
  }
  if (!refresh.empty()) p.refresh.assign(refresh.begin(), refresh.end());
  check(p);
  return p;
}

std::string ihip_params_text(const IhipParams& p) {
  std::vector<int64_t> l_c, k;
  for (const IhipStage& s : p.stages) l_c.push_back(s.l_c), k.push_back(s.k);
  std::string t = fmt::format("l_c={},k={},refresh={},b_q={},n_sink={},n_stream={},early_layers={},k_early={},rope={}",
                              join(l_c, "/"), join(k, "/"), join(p.refresh, "/"), p.b_q, p.n_sink, p.n_stream,
                              p.early_layers, p.k_early, p.rope ? "on" : "off");
  if (!p.dense_layers.empty()) t += ",dense_layers=" + join(p.dense_layers, "+");
  if (p.rank == IhipRank::local) t += ",rank=local";  // the default (paper) is left out
  return t;
}

}  // namespace longctx
