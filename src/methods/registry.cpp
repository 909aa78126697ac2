// registry.cpp: the methods --attn accepts.
#include "methods/registry.h"

#include "methods/a_shape/a_shape_method.h"
#include "methods/hip/hip_method.h"
#include "methods/infinitehip/infinitehip_method.h"
#include "methods/minference/minference_method.h"
#include "methods/tokenselect/tokenselect_method.h"
#include "util/error.h"

namespace longctx {

const std::vector<MethodEntry>& method_registry() {
  static const std::vector<MethodEntry> entries = {
      {"dense", "dense[=self_extend=G:W]", {.prefill = true, .decode = true},
       [](const std::string& arg, const MethodContext&) { return make_dense_method_from(arg); }},
      {"a_shape", "a_shape[=SINK,WINDOW]", {.prefill = true, .decode = false}, make_a_shape_method},
      {"minference", "minference=CONFIG.json[:dense_below=N][:dense_layers=N][:ratio=R]",
       {.prefill = true, .decode = false},
       [](const std::string& arg, const MethodContext& ctx) { return make_minference_method(arg, ctx); }},
      {"tokenselect",
       "tokenselect[=n_init=N,k=N,n_local=N,chunk=N,theta=X,vote=soft|hard|naive,keys=pre_rope|rotated,scores=f32|f16]",
       {.prefill = true, .decode = true}, make_tokenselect_method},
      {"hip", "hip[=k=512,b_q=64,b_sq=2,b_k=2,b_sk=1,window=256,sinks=16,refresh=8,dense_layers=3,self_extend=G:W]",
       {.prefill = true, .decode = true}, make_hip_method},
      {"infinitehip",
       "infinitehip[=3k|3k-fast|3k-flash|5k,l_c=256/32/8,k=32768/8192/2048,refresh=16/8/4,n_sink=256,n_stream=1024,"
       "early_layers=3,k_early=4096,rope=on|off,dense_layers=I+J-K]",
       {.prefill = true, .decode = true}, make_infinitehip_method},
  };
  return entries;
}

const MethodEntry* find_method(const std::string& name) {
  for (const auto& e : method_registry())
    if (name == e.name) return &e;
  return nullptr;
}

std::string known_methods() {
  std::string known;
  for (const auto& e : method_registry()) known += std::string(known.empty() ? "" : ", ") + e.usage;
  return known;
}

}  // namespace longctx
