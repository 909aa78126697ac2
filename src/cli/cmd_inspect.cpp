// cmd_inspect.cpp: `longctx inspect MODEL`: format, architecture, tensors, tokenizer, context.
#include <cstdio>

#include "cli/commands.h"
#include "loader/describe.h"
#include "loader/model_file.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace longctx::cli {

void register_inspect(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto tensors = std::make_shared<bool>(false);
  auto* c = app.add_subcommand("inspect", "Describe a model file: architecture, tensors, tokenizer, context");
  c->add_option("model", *model, "GGUF file or HF safetensors directory")->required();
  c->add_flag("--tensors", *tensors, "List every tensor");
  c->callback([model, tensors] {
    auto mf = open_model_file(*model);
    std::printf("%s\n", describe_model_file(*mf, *tensors).c_str());
    const auto cfg = ModelConfig::from_model_file(*mf);
    std::printf("model: %s\n", cfg.summary().c_str());
    const auto tok = Tokenizer::from_model_file(*mf);
    std::printf("tokenizer: %s, %d tokens, bos %d, eos %d\n", tok->kind().c_str(), tok->vocab_size(), tok->bos_id(),
                tok->eos_id());
  });
}

}  // namespace longctx::cli
