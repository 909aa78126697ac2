// a_shape_method.h: `--attn a_shape[=SINK,WINDOW]`, StreamingLLM-style static sparse prefill.
//
// Every query block attends the first SINK keys and its last WINDOW keys (a_shape_index.h),
// through the shared sparse mainloop. Defaults: the paper's 1024 sinks + 4096 window. Decode
// stays dense (the paper runs all baselines with dense decoding).
#pragma once
#include <memory>
#include <string>

#include "sparse/attention_method.h"

namespace longctx {

// arg: "" (defaults) or "SINK,WINDOW".
std::unique_ptr<AttentionMethod> make_a_shape_method(const std::string& arg, const MethodContext& ctx);

}  // namespace longctx
