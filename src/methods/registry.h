// registry.h: the table of attention methods that --attn knows (the one registry: the CPU
// engine, the GPU engine and `longctx eval` all parse specs through it; spec.h).
// Adding a method = its folder + one line in registry.cpp (+ one in registry_gpu.cpp for the GPU).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "methods/method.h"

namespace longctx {

// Which phases a method covers when its spec names no phase ("minference=CFG" is a prefill
// method: decode stays dense unless a "decode:" clause says otherwise).
struct PhaseSet {
  bool prefill = true;
  bool decode = false;
};

struct MethodEntry {
  const char* name;
  const char* usage;  // the spec's form, for help and errors: "a_shape[=SINK,WINDOW]"
  PhaseSet default_phases;
  // arg: the text after "name=" in the spec ("" if none).
  std::function<std::unique_ptr<AttentionMethod>(const std::string& arg, const MethodContext&)> make;
};

const std::vector<MethodEntry>& method_registry();
const MethodEntry* find_method(const std::string& name);
std::string known_methods();  // "dense, a_shape[=SINK,WINDOW], ..." for messages

std::unique_ptr<AttentionMethod> make_dense_method(SelfExtendParams se = {});
// The dense entry's factory: "" or "self_extend=G:W" (throws Error naming anything else).
std::unique_ptr<AttentionMethod> make_dense_method_from(const std::string& arg);

}  // namespace longctx
