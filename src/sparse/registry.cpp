// registry.cpp: the methods --attn accepts.
#include "sparse/registry.h"

#include "sparse/a_shape_method.h"
#include "sparse/minference_method.h"
#include "util/error.h"

namespace longctx {

const std::vector<MethodEntry>& method_registry() {
  static const std::vector<MethodEntry> entries = {
      {"dense",
       [](const std::string& arg, const MethodContext&) {
         if (!arg.empty()) fail("attention method 'dense' takes no parameters (got '{}')", arg);
         return make_dense_method();
       }},
      {"a_shape", [](const std::string& arg, const MethodContext& ctx) { return make_a_shape_method(arg, ctx); }},
      {"minference",
       [](const std::string& arg, const MethodContext& ctx) { return make_minference_method(arg, ctx); }},
  };
  return entries;
}

}  // namespace longctx
