// registry.h: the table of attention methods that make_attention_method() knows.
// Adding a method = one factory function + one line in registry.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sparse/attention_method.h"

namespace longctx {

struct MethodEntry {
  const char* name;
  // arg: the text after "name=" in the --attn spec ("" if none).
  std::function<std::unique_ptr<AttentionMethod>(const std::string& arg, const MethodContext&)> make;
};

const std::vector<MethodEntry>& method_registry();

std::unique_ptr<AttentionMethod> make_dense_method();

}  // namespace longctx
