// sparse_plan.h (cuda, internal): what the sparse attention kernels (sparse_attention_sm90.cu,
// sparse_attention_generic.cu) share on the host side: the parameter checks, the kernel
// arguments common to both, and the plan step.
//
// What: each (index head, 64-row query block) row of a DeviceSparseIndex, made canonical in the
// caller's workspace: its ranges clipped to [0, lim) (lim = the block's causal frontier, the
// last row's position + 1, or n_kv) and merged into disjoint ranges (touching ranges merge),
// written at the row's own offsets (with a row-level window, starts raised to the block's first
// row's position - window + 1); its columns kept when inside those bounds, not a repeat of the
// previous one (they are sorted) and not inside a merged range. Counts per row in n_r / n_c.
// Why: the index format allows overlaps, repeats and columns inside ranges (union counted once);
// the attention kernels then stream disjoint tiles with no per-key deduplication.
// How: one warp per row; ranges 32 at a time with a warp prefix-max of the ends (a range opens a
// new merged range iff its start exceeds every earlier end; the previous one then ends at that
// maximum), columns 32 at a time with a binary search in the merged ranges; ballots compact.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/sparse_attention.h"

namespace longctx::cuda {

// Compute capability of the current device as major * 10 + minor (0 without one); cached.
int current_sm();

// Throws Error ("<who>: ...") unless p's sizes, heads, causal frontier, index and workspace
// (sparse_plan_layout(p.index).total bytes at least) are consistent; kernel-specific limits
// (architecture, head_dim, alignment) are the caller's.
void check_sparse_params(const SparseAttnParams& p, const char* who);

// Offsets of the canonical lists in the workspace (bytes; 256-byte aligned parts).
struct SparsePlanLayout {
  size_t ranges = 0;  // int32 [2 * n_ranges] (start, end), at each row's range_ptr offset
  size_t cols = 0;    // int32 [n_cols], at each row's col_ptr offset
  size_t n_r = 0;     // int32 [rows] canonical range count
  size_t n_c = 0;     // int32 [rows] canonical column count
  size_t total = 0;
};
SparsePlanLayout sparse_plan_layout(const DeviceSparseIndex& ix);

// Device pointers to the canonical lists inside p.workspace.
struct SparsePlanView {
  const int32_t* ranges = nullptr;
  const int32_t* cols = nullptr;
  const int32_t* n_r = nullptr;
  const int32_t* n_c = nullptr;
};
SparsePlanView sparse_plan_view(const SparseAttnParams& p);

// Kernel arguments both attention kernels take (each extends them with its own); the lists are
// the plan's canonical ones in p.workspace.
struct SparseKernelArgs {
  const __nv_bfloat16* q;  // the generic kernel's (the Hopper kernel reads Q by TMA)
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  __nv_bfloat16* o;
  float* lse;
  const int64_t* range_ptr;
  const int64_t* col_ptr;
  const int32_t* ranges;  // canonical (plan output)
  const int32_t* cols;
  const int32_t* n_r;
  const int32_t* n_c;
  int64_t n_q, n_kv, q_pos0, n_qblk;
  int64_t window;  // row-level window (0: none; the generic kernel's windowed variant)
  int n_head, n_kv_head, group, heads_per_index;
  float scale_log2;  // (p.scale, or 1/sqrt(head_dim)) * log2(e)
  bool causal;
};
SparseKernelArgs sparse_kernel_args(const SparseAttnParams& p);

// Launches the plan kernel on stream s. The caller has checked p (shapes, index, workspace of
// at least sparse_plan_layout(p.index).total bytes); `who` names the caller in launch errors.
void launch_sparse_plan(const SparseAttnParams& p, Stream s, const char* who);

}  // namespace longctx::cuda
