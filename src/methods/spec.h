// spec.h: the one --attn syntax, for the CPU engine, the GPU engine and `longctx eval`.
//
//   SPEC    := CLAUSE (';' CLAUSE)*
//   CLAUSE  := [PHASE ':'] METHOD ['=' ARGS]        PHASE := prefill | decode
// A clause without a phase applies the method to the phases it covers by default (registry.h:
// dense both, a_shape and minference prefill); "prefill:" / "decode:" apply it to that phase
// only. A phase no clause covers runs dense. Each phase may be named once.
//   --attn minference=cfg.json                          MInference prefill, dense decode
//   --attn 'prefill:minference=cfg.json;decode:a_shape=128,4096'
//                                                       MInference prefill, sinks + window decode
//   --attn 'a_shape=1024,4096;decode:a_shape=128,4096'  A-shape for both, different windows
// ARGS are the method's own (registry.h usage strings); ';' never appears inside them, so a
// config path must not contain ';' (nor ':' for minference, whose options are ':'-separated).
// The parsed method's name() prints the canonical spec: a bare METHOD[=ARGS] when one method
// runs on exactly its default phases, else one "phase:" clause per non-dense phase.
#pragma once
#include <memory>
#include <string>

#include "methods/method.h"

namespace longctx {

struct SpecClause {
  bool prefill = false, decode = false;  // phases the clause covers
  std::string method;                    // registry name
  std::string arg;                       // text after '=' ("" if none)
};

// Splits and checks the syntax (unknown method names and phase errors throw Error); the
// methods' own ARGS are checked when the method is made.
std::vector<SpecClause> parse_spec_clauses(const std::string& spec);

}  // namespace longctx
