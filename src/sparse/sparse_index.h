// sparse_index.h: the one sparse attention index format every sparse method produces.
//
// What: for each (index head, query block of kSparseBlockQ = 64 rows) a sorted list of key ranges
// [start, end) plus a sorted list of single key columns. The attended set of a query row is the
// union of its block's ranges and columns, intersected with the causal mask (key <= the row's
// position). Keys are absolute positions in the KV cache (0 .. n_kv).
// Why: all sparse methods (A-shape, MInference VS/BS, later HiP, TokenSelect) end in "exact
// softmax attention over a chosen subset of keys"; they differ only in how they build this index,
// and one mainloop (sparse_attention.h) consumes it, on the CPU here and on the GPU later.
// How: one HeadIndex per index head, CSR over the chunk's query blocks.
//
// Format rules (checked by validate_sparse_index and by the mainloop):
//   - Query block b covers chunk rows [b*64, min((b+1)*64, n_q)), i.e. absolute positions
//     q_pos0 + b*64 ...; blocks are relative to the chunk start, not aligned to absolute 64s.
//   - ranges of a block are sorted by start; they may overlap or touch (the union counts once);
//     0 <= start <= end; an end past n_kv is clipped (producers may emit whole 64-key tiles).
//   - cols of a block are sorted ascending, each in [0, n_kv); duplicates, and columns that also
//     lie inside a range, are allowed and counted once (producers should avoid them: they cost).
//   - An empty block (no ranges, no columns, or nothing causal) yields O = 0 and LSE = -inf.
//   - Index heads: an index holds n_index_head = heads.size() heads; query head h uses index head
//     h / (n_head / n_index_head). So an index may be per query head (MInference), per KV head,
//     or shared by all heads (n_index_head = 1: A-shape, TokenSelect).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace longctx {

// Rows per query block: the paper's B = 64 (64x64 tiles, 64 last queries, 64-token pooling).
inline constexpr int kSparseBlockQ = 64;

struct KeyRange {
  int32_t start = 0;  // first key (absolute position)
  int32_t end = 0;    // one past the last key
};

// One index head over all query blocks of a chunk (CSR: block b owns
// ranges[range_ptr[b] .. range_ptr[b+1]) and cols[col_ptr[b] .. col_ptr[b+1])).
struct HeadIndex {
  std::vector<int64_t> range_ptr{0};  // [n_qblk + 1]
  std::vector<KeyRange> ranges;       // [range_ptr.back()]
  std::vector<int64_t> col_ptr{0};    // [n_qblk + 1]
  std::vector<int32_t> cols;          // [col_ptr.back()]

  int64_t n_blocks() const { return int64_t(range_ptr.size()) - 1; }
  // Closes the current block: everything pushed since the last end_block() belongs to it.
  void end_block() {
    range_ptr.push_back(int64_t(ranges.size()));
    col_ptr.push_back(int64_t(cols.size()));
  }
  std::span<const KeyRange> block_ranges(int64_t b) const {
    return {ranges.data() + range_ptr[b], size_t(range_ptr[b + 1] - range_ptr[b])};
  }
  std::span<const int32_t> block_cols(int64_t b) const {
    return {cols.data() + col_ptr[b], size_t(col_ptr[b + 1] - col_ptr[b])};
  }
};

struct SparseIndex {
  int64_t n_q = 0;              // query rows of the chunk the index was built for
  std::vector<HeadIndex> heads; // [n_index_head], each with n_qblk(n_q) blocks
};

inline int64_t n_query_blocks(int64_t n_q) { return (n_q + kSparseBlockQ - 1) / kSparseBlockQ; }

// The keys one block attends, normalised: disjoint sorted ranges, and sorted unique columns
// outside every range, all clipped to [0, limit) (limit = n_kv, or the block's causal frontier).
struct BlockKeys {
  std::vector<KeyRange> ranges;
  std::vector<int32_t> cols;
  int64_t size() const;  // number of distinct keys
};
// Normalises one block's (ranges, cols) into out (reusing its storage). Assumes the format rules
// (sorted inputs); the mainloop validates first.
void block_union(std::span<const KeyRange> ranges, std::span<const int32_t> cols, int64_t limit,
                 BlockKeys& out);

// Throws Error naming the head, block and rule when idx breaks the format rules above for a
// chunk of n_q queries against n_kv keys with n_head query heads.
void validate_sparse_index(const SparseIndex& idx, int64_t n_q, int64_t n_kv, int n_head);

// Kernel work of the index: the number of (query, key) score entries a block kernel computes,
// i.e. for every block, rows x |union of its keys clipped to the block's causal frontier|,
// summed over query heads (index heads weighted by the query heads that share them).
// dense_causal_pairs() is the same count for dense causal attention (per-row exact).
int64_t index_kernel_pairs(const SparseIndex& idx, int64_t n_q, int64_t q_pos0, int64_t n_kv, int n_head);
int64_t dense_causal_pairs(int64_t n_q, int64_t q_pos0, int n_head);

// Same as index_kernel_pairs for one head's index (no head weighting).
int64_t head_kernel_pairs(const HeadIndex& hi, int64_t n_q, int64_t q_pos0, int64_t n_kv);

}  // namespace longctx
