// engine_load_stub.cc: stands in for longctx::Engine::load while src/runtime does not exist yet,
// so test_eval links; eval tests inject a fake engine and never call this.
#include "longctx/engine.h"
#include "util/error.h"

namespace longctx {
std::unique_ptr<Engine> Engine::load(const LoadOptions&) { fail("the engine runtime is not built"); }
std::string default_model_path() { return "SmolLM2-135M-Instruct.Q4_1.gguf"; }
}  // namespace longctx
