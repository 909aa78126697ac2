// sequence_batch.h: the step-level batches behind Engine::start_batch (longctx/engine.h:
// SequenceBatch): the CPU one (batched decode over Transformer::decode_batch, prefill chunks
// interleaved with decode steps) and the serial one over Engine::generate (engines without
// batched decode: the GPU engine for now).
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
// attn: the engine's spec; requests may name only it (or none).
std::unique_ptr<SequenceBatch> make_serial_batch(Engine& eng, std::string attn, const BatchOptions& o);

}  // namespace longctx
