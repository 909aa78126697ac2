// tiny_model.h: writes a tiny random-weight model in both formats, so the loader, tokenizer
// and forward pass are tested in seconds, and the GGUF and safetensors paths can be compared.
//
//   <dir>/tiny.gguf   GGUF v3, tensors F32 or Q8_0, Q/K rows permuted as convert_hf_to_gguf does
//                     for "llama", llama3 RoPE scaling as a rope_freqs.weight tensor
//   <dir>/hf/         config.json, model.safetensors (F32, the GGUF's values dequantized),
//                     tokenizer.json, tokenizer_config.json
// Both hold the same weights, so they must give the same logits. The tokenizer is byte-level BPE
// over the 256 bytes plus a few merges and ChatML special tokens.
#pragma once
#include <cstdint>
#include <string>

#include "loader/model_file.h"

namespace longctx {

struct TinyModelSpec {
  std::string arch = "llama";        // "llama" or "qwen2" (QKV bias)
  std::string rope_scaling = "none";  // "none", "linear" or "llama3"
  DType gguf_dtype = DType::F32;     // F32, F16, Q8_0, Q4_0 or Q4_1 for the 2-D weights
  bool tied_embeddings = true;
  int n_layer = 2, n_embd = 64, n_head = 4, n_kv_head = 2, n_ff = 128;
  int64_t context_length = 512;
  uint64_t seed = 1;
};

// Writes <dir>/tiny.gguf and <dir>/hf/; returns nothing, throws Error on I/O failure.
void write_tiny_model(const std::string& dir, const TinyModelSpec& spec);

}  // namespace longctx
