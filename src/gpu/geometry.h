// geometry.h: named model geometries for --random-weights (benchmarks without downloading weights).
//
// A geometry is a ModelConfig with the published hyperparameters of a model family member; the
// weights are then generated on the GPU (gpu/device_weights.h), so large shapes run with no
// file and no tokenizer. Names: llama3-8b, llama3.1-8b, qwen2.5-7b, smollm2-135m, gemma3-270m. A suffix
// ":N" keeps only the first N layers (e.g. "llama3-8b:2"), for scaled runs that must fit a time
// limit: per-layer work is identical, so time scales by n_layer / N (stated with the result).
//   ModelConfig c = geometry_config("llama3-8b");
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace longctx::gpu {

// Throws Error naming the known geometries when `spec` is not one of them (or N is bad).
ModelConfig geometry_config(const std::string& spec);
std::vector<std::string> geometry_names();

}  // namespace longctx::gpu
