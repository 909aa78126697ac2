// sequence_batch.h: the step-level batches behind Engine::start_batch (longctx/engine.h:
// SequenceBatch): the CPU one (batched decode over Transformer::decode_batch, prefill chunks
// interleaved with decode steps), the GPU one (the same over GpuTransformer::decode_batch and its
// paged pool: sequence_batch_gpu.cpp, CUDA builds) and the serial one over Engine::generate
// (methods without batched decode, e.g. HiP on the GPU; BatchOptions::batched false).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "longctx/engine.h"

namespace longctx {

class Transformer;

struct CpuBatchModel {
  Transformer& model;       // shared weights; each sequence gets its own SequenceState
  const Tokenizer& tok;
  const ModelConfig& cfg;
  int64_t max_context;      // tokens per sequence at most (prompt + max_tokens)
  int64_t prefill_chunk;    // the engine's chunk (generate's, so greedy tokens match generate)
  std::string attn;         // the engine's attention spec (a request naming it shares the model's method)
};

std::unique_ptr<SequenceBatch> make_cpu_batch(const CpuBatchModel& m, const BatchOptions& o);
#ifdef LONGCTX_WITH_GPU
namespace gpu {
class GpuTransformer;
}
struct GpuBatchModel {
  gpu::GpuTransformer& model;  // batches_decode() must be true (Engine::start_batch checks)
  const Tokenizer& tok;
  const ModelConfig& cfg;
  int64_t max_context;    // tokens per sequence at most
  int64_t prefill_chunk;  // prompt tokens per step (BatchOptions::prefill_chunk overrides; capped by the model's chunk)
  std::string attn;       // the engine's attention spec (requests may name only it)
};
// Sizes the model's KV pool for o.kv_tokens (Error with needed vs free when it does not fit).
std::unique_ptr<SequenceBatch> make_gpu_batch(const GpuBatchModel& m, const BatchOptions& o);
#endif

// attn: the engine's spec; requests may name only it (or none).
std::unique_ptr<SequenceBatch> make_serial_batch(Engine& eng, std::string attn, const BatchOptions& o);

}  // namespace longctx
