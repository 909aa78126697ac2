// cmd_tiny_model.cpp: `longctx tiny-model --out DIR`: write a tiny random-weight model in both
// formats (DIR/tiny.gguf and DIR/hf/), for smoke tests of a build in a second.
#include <cstdio>

#include "cli/commands.h"
#include "model/tiny_model.h"
#include "util/error.h"

namespace longctx::cli {

void register_tiny_model(CLI::App& app) {
  auto out = std::make_shared<std::string>();
  auto spec = std::make_shared<TinyModelSpec>();
  auto* c = app.add_subcommand("tiny-model", "Write a tiny random-weight model (GGUF + safetensors) for testing");
  c->add_option("--out", *out, "Output directory")->required();
  c->add_option("--arch", spec->arch, "llama or qwen2")->check(CLI::IsMember({"llama", "qwen2"}));
  c->add_option("--rope-scaling", spec->rope_scaling, "none, linear or llama3")
      ->check(CLI::IsMember({"none", "linear", "llama3"}));
  c->add_option("--context", spec->context_length, "Context length")->check(CLI::PositiveNumber);
  c->add_option("--seed", spec->seed, "Random seed");
  c->callback([out, spec] {
    write_tiny_model(*out, *spec);
    std::printf("wrote %s/tiny.gguf and %s/hf/\n", out->c_str(), out->c_str());
  });
}

}  // namespace longctx::cli
