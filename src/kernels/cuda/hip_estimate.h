// hip_estimate.h (cuda): HiP's hierarchical top-k mask estimation on the GPU, and the sparse
// indexes it feeds (prefill: cuda::sparse_attention's DeviceSparseIndex; decode: DecodeIndex).
//
// What: the CUDA twin of kernels/ref/hip_topk.h + methods/hip/hip_mask.h: one CTA per (query
// head, query block) in prefill, a thread-block cluster of CTAs per (sequence, head) in decode,
// runs the bisection (chunks, split, middle-block representative, max over the sampled query x
// key pairs, keep the best k/b_k) and writes, per (head, block), a fixed run of
// R = k/b_k + 2 ranges: the sinks [0, sinks), the selected blocks in ascending order (unmerged;
// empty ranges [key_end, key_end) pad a region of fewer blocks), and the window [key_end, end).
// Both keep the CPU's ranking (score, then branch). Decode (and prefill with more than 32 sampled
// queries) scores with the CPU's fp32 dot order (8 threads per dot, hip_topk.h): block ids bit-equal
// to the reference for the same bf16 inputs. Prefill with <= 32 sampled queries (the paper's b_q 64,
// b_sq 2) and head_dim a multiple of 32 scores on tensor cores (bf16 x bf16, fp32 accumulation in
// the hardware's order): the same rule, but near-equal scores may rank differently than on the CPU
// (tested against an fp64 oracle with near-tie judging; exact on small-integer inputs).
// Prefill CTAs have 128 threads, 4 an SM (HipPrefillParams::cta_threads: 256 or 512 for tests and
// A/B; the same blocks at every size): at 128K the search is latency-bound (ncu: ~0.4 issued
// a cycle per scheduler, L2 hit rate ~90%, DRAM ~5%), and independent CTAs overlap one's selection
// barriers with another's key loads. At 1M a KV head's keys (256 MiB) are past L2 and the search
// is bound by DRAM (ncu: ~2.6 TB/s): the grid (query heads of a KV head, query blocks, KV heads)
// runs a group's heads side by side, so L2 serves the rows they share (the first iteration's
// all, later ones where their kept chunks agree); a chunk has at most 65535 query blocks.
// The tensor-core epilogue is specialised for the paper's
// shape (2 sampled keys a branch, 32 sampled queries, no causal mask inside the search region).
// Decode (graph-safe, no host sync): each (sequence, head) row keeps its last estimate's position
// in `refresh_pos` (device, per layer); a step re-estimates only when methods/hip/hip_method.h's
// hip_refreshes rule says so, otherwise the kernel returns at once and the cached ranges stay
// (the window's end is open: the decode kernel clips it to the sequence's length).
// KV offload (decode): HipDecodeParams::offload reads the keys through a GPU keys cache in front
// of a host-memory KvView (kernels/params/kv_offload.h); same blocks as without it.
// fp8 cache (decode): the keys may be e4m3 codes (KvView elem fp8_e4m3, one scale per layer). The
// estimator scores the codes widened to bf16 (exact) and leaves the layer's scale out: a positive
// factor common to every key does not change the order the search ranks by. CPU twin: the
// reference (hip_topk.h) over keys e4m3_to_f32(code) (kernels/ref/fp8_e4m3.h) gives the same
// block ids bit for bit (tests/cuda/test_hip_gpu.cpp).
// fp8 key copy (prefill, optional): HipPrefillParams::k_fp8, e4m3 codes of the chunk's keys with
// any positive scale (e.g. gpu/kv_fp8.h's amax / 448), is scored instead of the bf16 keys: half
// the key bytes, same rule over the codes; the CPU twin is the reference over e4m3_to_f32(code)
// (bit-equal on the FMA scorer, near ties judged on tensor cores). The tensor-core scorer takes
// it as f16 x f16 (each CTA's sampled queries times one power of 2 into f16's range: exact for
// elements within 2^-32 of the largest, smaller ones rounded, hip_estimate.cu's load_q). H100,
// Llama-3-8B geometry: 16.3 ms at 128K and 211 ms at 1M vs bf16's 19.3 / 317 (docs/benchmarks.md).
// Quantization moves scores by up to ~2^-4 relative, so blocks can differ from bf16's (mean
// block Jaccard 0.80 / 0.90 at 128K on random / structured Q/K).
// Tensors bf16 (decode keys: bf16 or e4m3), after RoPE, unscaled; head_dim a multiple of 8 up to
// 256 (64, 128 and Gemma 3's 256 are used): a lane holds 2 key chunks of 8 up to 128, 4 up to 256.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "kernels/params/kv_offload.h"
#include "kernels/params/kv_view.h"

namespace longctx::cuda {

struct HipEstimateConfig {
  int64_t k = 512;
  int b_q = 64, b_sq = 2, b_k = 2, b_sk = 1;
  int64_t window = 256, sinks = 16;
  // constexpr: callable from device code (--expt-relaxed-constexpr).
  constexpr int64_t budget_blocks() const { return k / b_k; }
  constexpr int64_t ranges_per_row() const { return budget_blocks() + 2; }
};

// The selection keeps 2 * k/b_k branches in registers, 8 per thread of a 512-thread CTA.
constexpr int64_t kHipMaxBudgetBlocks = 2048;

// Dynamic shared memory of one prefill CTA, sized for its scorer (tensor cores for <= 32 sampled
// queries and head_dim a multiple of 32, else fp32 FMAs; throws Error when over the device's limit at launch).
size_t hip_estimate_smem_bytes(const HipEstimateConfig& c, int head_dim);

// The most dynamic shared memory a Hopper CTA may opt into (sm_90: 227 KiB).
constexpr size_t kHipMaxSmemBytes = 227 * 1024;

// Throws Error (no GPU needed: for refusing a method up front) when the parameters, head_dim or
// the CTA's shared memory (hip_estimate_smem_bytes vs kHipMaxSmemBytes) are out of the
// estimator's reach, naming what to lower.
void hip_estimate_check(const HipEstimateConfig& c, int head_dim);

struct HipPrefillParams {
  HipEstimateConfig cfg;
  const void* q = nullptr;  // bf16 [n_q, n_head, head_dim]
  const void* k = nullptr;  // bf16 [n_kv, n_kv_head, head_dim], at most 2^35 elements (32-bit offsets)
  // Optional e4m3 codes of k [n_kv, n_kv_head, head_dim] (any positive scale): scored instead of k.
  const void* k_fp8 = nullptr;
  int64_t n_q = 0, q_pos0 = 0, n_kv = 0;
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  // Outputs, device: entry e = h * n_qblk + b (n_qblk = ceil(n_q / b_q)).
  int32_t* blocks = nullptr;    // [n_head * n_qblk * k/b_k] selected ids, ascending (optional)
  int32_t* n_blocks = nullptr;  // [n_head * n_qblk] how many (optional)
  int64_t* range_ptr = nullptr; // [n_head * n_qblk + 1] = e * R (b_q must be 64 for the index)
  int32_t* ranges = nullptr;    // [n_head * n_qblk * R][2]
  int64_t* col_ptr = nullptr;   // [n_head * n_qblk + 1], all 0
  // Threads a CTA (0: the tuned default; 128, 256 or 512 for bf16 keys on the tensor-core scorer,
  // for tests and benchmarks: the same blocks at every size).
  int cta_threads = 0;
};
void hip_estimate_prefill(const HipPrefillParams& p, Stream s = nullptr);

#ifdef LONGCTX_HIP_PHASE_CLOCKS
// Bench-only (a build with -DLONGCTX_HIP_PHASE_CLOCKS, never the engine's): the prefill CTAs'
// clock64() cycles since the last call, summed over CTAs, by phase: prologue, scoring, wait after
// it, radix select, compaction, the iteration's last barrier, epilogue; then iterations and CTAs.
// Clears them. Synchronous.
constexpr int kHipPhaseSlots = 9;
void hip_estimate_phase_clocks(uint64_t out[kHipPhaseSlots]);
#endif

struct HipDecodeParams {
  HipEstimateConfig cfg;
  int refresh = 8;            // r_m
  const void* q = nullptr;    // bf16 [n_seq, n_head, head_dim]
  KvView kv;                  // the layer's paged cache (bf16 or fp8 e4m3), device; seq_lens on the device
  int n_head = 0;
  int32_t* refresh_pos = nullptr;  // [n_seq * n_head] the layer's cache (-1: none)
  int32_t* blocks = nullptr;       // [n_seq * n_head * k/b_k] optional copy of the selected ids
  int32_t* range_ptr = nullptr;    // [n_seq * n_head + 1] = r * R (written by every launch)
  int32_t* ranges = nullptr;       // [n_seq * n_head * R][2]
  int32_t* col_ptr = nullptr;      // [n_seq * n_head + 1], all 0
  // KV offload (kernels/params/kv_offload.h), optional: kv's pools are in mapped host memory and
  // the keys are read through this keys cache (misses recorded for kv_offload_update). One
  // sequence. The selected blocks are the same as without it.
  KvOffloadCache offload;
};
void hip_estimate_decode(const HipDecodeParams& p, Stream s = nullptr);

}  // namespace longctx::cuda
