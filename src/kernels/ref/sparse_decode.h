// sparse_decode.h (ref): the CPU twin of cuda::sparse_decode, fp32 math.
//
// What: one query token per (sequence, query head) attends the keys its decode index row selects
// (kernels/params/decode_index.h), read through a host KvView (kernels/params/kv_view.h: f32,
// bf16 or fp8 e4m3 pools, any page_size >= 1). O = softmax(scale * q K_S^T) V_S, LSE = natural
// log of the sum of exp(scores); an empty row gives O = 0, LSE = -inf.
//   q   fp32 [n_seq, n_head, head_dim]
//   o   fp32 [n_seq, n_head, head_dim]
//   lse fp32 [n_seq, n_head] (optional)
// How: each row is normalised once (decode_row_keys), then each query head of the row runs a
// plain two-pass softmax over the row's keys. Tested against an fp64 dense-with-mask oracle in
// tests/kernels/test_sparse_decode_ref.cpp (build/tests/kernels/test_kernels).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/params/decode_index.h"
#include "kernels/params/kv_view.h"

namespace longctx {

struct SparseDecodeRefParams {
  const float* q = nullptr;  // [n_seq, n_head, head_dim]
  float* o = nullptr;        // [n_seq, n_head, head_dim]
  float* lse = nullptr;      // [n_seq, n_head], optional
  int n_head = 0;
  KvView kv;                 // host view
  DecodeIndex index;         // host arrays; index.n_seq == kv.n_seq
  float scale = 0.f;         // 0 = 1/sqrt(head_dim)
};

// The distinct positions row r of idx attends in a sequence of len tokens, ascending: the union
// of its ranges and columns clipped to [0, len). Throws Error when the row breaks the format
// (unsorted ranges or columns, offsets past the capacities).
std::vector<int32_t> decode_row_keys(const DecodeIndex& idx, int64_t r, int64_t len);

// Throws Error on bad shapes (naming them) or a malformed index.
void sparse_decode_ref(const SparseDecodeRefParams& p);

}  // namespace longctx
