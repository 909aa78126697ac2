// decode_index.h: which cached keys each decode query attends (sparse decode's index format).
//
// What: one decode step has one query token per (sequence, query head). The index lists, per row
// r = s * n_index_head + ih (sequence s, index head ih), the logical token positions of sequence
// s that the row attends, as key ranges plus single key columns. Plain data, no ownership: the
// same struct describes host arrays (CPU reference) and device arrays (CUDA kernel, on_device).
// Why: every decode-time sparse method is "exact softmax over a chosen subset of the cache"
// (A-shape/StreamingLLM: sinks + window = 2 ranges; MInference prefill then sparse decode; HiP:
// key blocks of 2-64 tokens per query head = ranges; TokenSelect: a per-layer list of token
// slots shared by all heads = columns); they differ only in how they fill this index.
// Same rules as the prefill index (src/sparse/sparse_index.h), for one query row per sequence.
//
// Format rules:
//   - CSR: row r owns ranges [range_ptr[r], range_ptr[r+1]) and cols [col_ptr[r], col_ptr[r+1]);
//     both pointer arrays have n_seq * n_index_head + 1 entries, start at 0 and never decrease.
//   - A range is (start, end), half-open, in logical token positions of the row's sequence.
//     A row's ranges are sorted by start; they may overlap or touch (the union counts once).
//   - A row's cols are sorted ascending; duplicates and columns inside a range count once.
//   - Everything is clipped to [0, seq_lens[s]) of the KvView: producers may emit whole blocks
//     or a window past the end. A negative start is clipped to 0.
//   - An empty row (nothing left after clipping) gives O = 0 and LSE = -inf for its heads.
//   - Query head h uses index head h / (n_head / n_index_head): n_index_head = n_head (per query
//     head: HiP, MInference), n_kv_head (per KV head), or 1 (shared: A-shape, TokenSelect).
//     n_index_head divides n_head, and the GQA group and the heads per index head divide one
//     another (so a GQA group shares one key set, or an index head's heads share one KV head).
//   - Capacity: range_capacity and col_capacity are the allocated lengths of ranges and cols
//     (the pointer arrays' last entries must not exceed them). They are fixed for the life of a
//     buffer, so a CUDA graph captured once replays while the contents (and the KvView's
//     seq_lens) change between replays; the kernels clamp offsets to them.
// Unsorted ranges or columns are outside the format: the result is then unspecified (the CPU
// reference throws).
#pragma once
#include <cstdint>

namespace longctx {

struct DecodeIndex {
  int n_seq = 0;
  int n_index_head = 0;
  const int32_t* range_ptr = nullptr;  // [n_seq * n_index_head + 1]
  const int32_t* ranges = nullptr;     // [range_capacity][2]: (start, end); 8-byte aligned
  const int32_t* col_ptr = nullptr;    // [n_seq * n_index_head + 1]
  const int32_t* cols = nullptr;       // [col_capacity]
  int64_t range_capacity = 0;
  int64_t col_capacity = 0;
  bool on_device = false;

  int64_t n_rows() const { return int64_t(n_seq) * n_index_head; }
};

}  // namespace longctx
