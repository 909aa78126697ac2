// a_shape_method.cpp: see a_shape_method.h.
#include "methods/a_shape/a_shape_method.h"

#include <fmt/format.h>

#include "methods/method_args.h"
#include "util/error.h"

namespace longctx {

std::string AShapeMethod::name() const { return fmt::format("a_shape={},{}", a_.sink, a_.window); }

SparseIndex AShapeMethod::build_index(const AttnParams& p, Phase, MethodState&, ThreadPool&) const {
  SparseIndex idx;
  idx.n_q = p.n_q;
  idx.heads.resize(1);  // one static index shared by every head
  build_a_shape_index(a_, p.n_q, p.q_pos0, p.n_kv, idx.heads[0]);
  return idx;
}

std::unique_ptr<AttentionMethod> make_a_shape_method(const std::string& arg, const MethodContext&) {
  AShapeParams a;
  if (!arg.empty()) {
    const auto parts = split_spec(arg, ',');
    if (parts.size() != 2) fail("a_shape: expected a_shape=SINK,WINDOW (got 'a_shape={}')", arg);
    a.sink = parse_count(parts[0], "a_shape", "SINK");
    a.window = parse_count(parts[1], "a_shape", "WINDOW");
  }
  if (a.window == 0) fail("a_shape: WINDOW must be >= 1 so that each token attends itself");
  return std::make_unique<AShapeMethod>(a);
}

}  // namespace longctx
