// self_extend.cpp: see self_extend.h.
#include "methods/self_extend/self_extend.h"

#include <fmt/format.h>

#include "methods/method_args.h"
#include "util/error.h"

namespace longctx {

namespace {
// Positions are rotated as fp32 (rope_apply_ref) and indexed as int32 keys: a larger G or W
// would say nothing a model can use.
constexpr int64_t kMaxSelfExtendValue = int64_t(1) << 24;
}  // namespace

SelfExtendParams parse_self_extend(std::string_view text, std::string_view method) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos)
    fail("{}: self_extend must be G:W (group size : neighbour window, e.g. self_extend=4:1024), got '{}'", method,
         text);
  SelfExtendParams se;
  se.group = parse_count(text.substr(0, colon), method, "self_extend group size G");
  se.neighbor = parse_count(text.substr(colon + 1), method, "self_extend neighbour window W");
  if (se.group < 1 || se.group > kMaxSelfExtendValue)
    fail("{}: self_extend group size G must be in [1, {}], got {}", method, kMaxSelfExtendValue, se.group);
  if (se.neighbor < 1 || se.neighbor > kMaxSelfExtendValue)
    fail("{}: self_extend neighbour window W must be in [1, {}] (each token attends itself as a neighbour), got {}",
         method, kMaxSelfExtendValue, se.neighbor);
  return se;
}

std::string self_extend_spec(const SelfExtendParams& se) {
  return se.on() ? fmt::format("self_extend={}:{}", se.group, se.neighbor) : std::string();
}

}  // namespace longctx
