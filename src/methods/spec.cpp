// spec.cpp: see spec.h.
#include "methods/spec.h"

#include <fmt/format.h>

#include "methods/method_args.h"
#include "methods/phase_method.h"
#include "methods/registry.h"
#include "util/error.h"

namespace longctx {

std::vector<SpecClause> parse_spec_clauses(const std::string& spec) {
  if (spec.empty()) fail("--attn: empty attention spec (known methods: {})", known_methods());
  std::vector<SpecClause> out;
  bool have_prefill = false, have_decode = false;
  for (const std::string& text : split_spec(spec, ';')) {
    SpecClause c;
    std::string body = text;
    const auto colon = text.find(':'), eq = text.find('=');
    const bool phased = colon != std::string::npos && (eq == std::string::npos || colon < eq);
    if (phased) {
      const std::string phase = text.substr(0, colon);
      if (phase == "prefill") c.prefill = true;
      else if (phase == "decode") c.decode = true;
      else fail("--attn: unknown phase '{}' in '{}' (phases: prefill, decode)", phase, text);
      body = text.substr(colon + 1);
    }
    const auto e = body.find('=');
    c.method = body.substr(0, e);
    c.arg = e == std::string::npos ? "" : body.substr(e + 1);
    const MethodEntry* entry = find_method(c.method);
    if (!entry) fail("unknown attention method '{}' (known: {})", c.method, known_methods());
    if (!phased) {
      c.prefill = entry->default_phases.prefill;
      c.decode = entry->default_phases.decode;
    }
    if ((c.prefill && have_prefill) || (c.decode && have_decode))
      fail("--attn: the {} phase is given twice in '{}'", c.prefill && have_prefill ? "prefill" : "decode", spec);
    have_prefill = have_prefill || c.prefill;
    have_decode = have_decode || c.decode;
    out.push_back(std::move(c));
  }
  return out;
}

std::unique_ptr<AttentionMethod> make_attention_method(const std::string& spec, const MethodContext& ctx) {
  const std::vector<SpecClause> clauses = parse_spec_clauses(spec);
  // One method on exactly its default phases: the method itself (no wrapper).
  if (clauses.size() == 1) {
    const MethodEntry* e = find_method(clauses[0].method);
    if (clauses[0].prefill == e->default_phases.prefill && clauses[0].decode == e->default_phases.decode &&
        (e->default_phases.prefill && e->default_phases.decode))
      return e->make(clauses[0].arg, ctx);
  }
  std::unique_ptr<AttentionMethod> prefill, decode;
  std::string name;
  for (const SpecClause& c : clauses) {
    const MethodEntry* e = find_method(c.method);
    if (c.method == "dense" && c.arg.empty()) continue;  // a plain dense phase needs no method
    if (c.prefill) {
      prefill = e->make(c.arg, ctx);
      name += fmt::format("{}prefill:{}", name.empty() ? "" : ";", prefill->name());
    }
    if (c.decode) {
      decode = e->make(c.arg, ctx);
      name += fmt::format("{}decode:{}", name.empty() ? "" : ";", decode->name());
    }
  }
  if (!prefill && !decode) return make_dense_method();
  // One KV cache serves both phases: a pre-RoPE side forces un-rotated keys on the other.
  if (prefill && decode && prefill->needs().keys != decode->needs().keys)
    fail("--attn: '{}' and '{}' need different key layouts (pre-RoPE vs rotated) in one KV cache; "
         "give the pre-RoPE method keys=rotated (e.g. tokenselect=keys=rotated)",
         prefill->name(), decode->name());
  // A method alone on its default phases prints as itself.
  if (clauses.size() == 1) name = (prefill ? prefill : decode)->name();
  return std::make_unique<PhaseMethod>(std::move(prefill), std::move(decode), std::move(name));
}

}  // namespace longctx
