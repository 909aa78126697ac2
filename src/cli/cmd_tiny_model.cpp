// cmd_tiny_model.cpp: `longctx tiny-model --out DIR`: write a tiny random-weight model in both
// formats (DIR/tiny.gguf and DIR/hf/), for smoke tests of a build in a second.
#include <cstdio>

#include "cli/commands.h"
#include "cli/options.h"
#include "model/tiny_model.h"
#include "util/error.h"

namespace longctx::cli {

void register_tiny_model(CLI::App& app) {
  auto out = std::make_shared<std::string>();
  auto spec = std::make_shared<TinyModelSpec>();
  auto* c = app.add_subcommand("tiny-model", "Write a tiny random-weight model (GGUF + safetensors) for testing");
  c->add_option("--out", *out, "Output directory")->required();
  c->add_option("--arch", spec->arch, "llama or qwen2")->check(one_of({"llama", "qwen2"}, "architecture"));
  c->add_option("--rope-scaling", spec->rope_scaling, "none, linear or llama3")
      ->check(one_of({"none", "linear", "llama3"}, "RoPE scaling"));
  c->add_option("--trained-context", spec->context_length, "The model's trained context length in tokens")
      ->check(integer_at_least(1));
  c->add_option("--seed", spec->seed, "Random seed of the weights")->check(integer_at_least(0));
  c->callback([out, spec] {
    write_tiny_model(*out, *spec);
    std::printf("wrote %s/tiny.gguf and %s/hf/\n", out->c_str(), out->c_str());
  });
}

}  // namespace longctx::cli
