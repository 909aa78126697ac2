// registry.cpp: the methods --attn accepts.
#include "sparse/registry.h"

#include "util/error.h"

namespace longctx {

const std::vector<MethodEntry>& method_registry() {
  static const std::vector<MethodEntry> entries = {
      {"dense",
       [](const std::string& arg, const MethodContext&) {
         if (!arg.empty()) fail("attention method 'dense' takes no parameters (got '{}')", arg);
         return make_dense_method();
       }},
  };
  return entries;
}

}  // namespace longctx
