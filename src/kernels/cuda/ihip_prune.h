// ihip_prune.h (cuda): InfiniteHiP's pruning stage, the CUDA twin of kernels/ref/ihip_prune.h:
// at decode (one query token per sequence) with the decode index of the last stage's output, and
// for a prefill chunk (every 64-query block at once; "Prefill" below) with its sparse index.
// Tests: tests/cuda/test_ihip_gpu.cpp; benchmark: bench/bench_infinitehip.cu.
//
// Decode. What, per sequence s (length len = kv.seq_lens[s], query position pos = len - 1) and stage
// (l_c, k): candidates are either the stage-0 range [n_sink, cand_end), cand_end =
// max(n_sink, pos - n_stream + 1) (in == nullptr), or the previous stage's output
// in[s * in_cap + i], i < in_len[s]. Chunks, SelectRep, chunk scores, ranking and the output
// follow ihip_prune.h exactly: the output lists are equal to the CPU reference's, ties included,
// and the chunk scores bit-equal, for the same bf16 inputs (same fp32 rotation and dot order).
// How (two kernels, no host syncs, grids sized from host bounds so a step is graph-replayable
// while seq_lens and the cached lists change):
//   score   one CTA of 256 threads per floor(32 / n_kv_head) chunks (3 KV heads: 10 chunks, 2 of
//           the 32 items idle); the CTA first loads the pool rows of
//           its chunks' entries into shared memory (one round of independent loads, shared by the
//           chunk's KV heads), then 8 threads per (chunk, KV head) item run the bisection, each
//           step loading its two probe keys (the middle of each half) together and scoring both
//           against the group's query heads 4 at a time (16-byte key loads in hip_topk.h's lane
//           order: lane l holds elements 64 c + 8 l .. + 8, so the rotate-half pairs (i, i + D/2)
//           sit in one lane, at D = 64 in lanes l and l + 4: one shuffle; 2 probes x 4 heads are
//           independent FMA and xor-shuffle chains, so a step waits on one chain's latency, not
//           2 x group of them), max over the group's query
//           heads, the running max of the probes, then max over KV heads in shared memory;
//   select  one CTA of 1024 threads per sequence: topk::block_top_k (topk_select.cuh: radix
//           select of the K-th (score desc, chunk asc) key, ballot compaction in chunk order),
//           the kept chunks' entries written in position order.
// Keys through the paged KvView: bf16, or the fp8 cache's e4m3 (kv.elem fp8_e4m3: each element
// dequantised as e4m3 * kv.k_scale in fp32, the CPU twin's IhipStageInput::k_fp8; half the bytes a
// probe); head_dim 64, 128 or 256, n_kv_head <= 32. The select waits for the score kernel before
// it lets the next stage's score kernel launch (PDL), so that kernel's CTAs spread over free SMs.
// rank=local (offset set): a third kernel runs first, ihip_offsets_decode: one CTA per (KV head,
// sequence), 32 items of 8 lanes over the row's local keys (sinks [0, min(n_sink, pos + 1)), window
// [max(n_sink, pos - n_stream + 1), pos]), each key loaded, dequantised and rotated at
// ihip_local_key_pos as a probe is and dotted with the group's query heads in hip_dot's order
// (ihip_local_offsets: bit-equal); the score kernel subtracts offset[h] (__fsub_rn) from each head's
// dot before the max, ihip_probe's order.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "kernels/params/kv_view.h"

namespace longctx::cuda {

struct IhipStageGpuParams {
  int l_c = 256;
  int64_t k = 32768;
  int rope_mode = 0;  // IhipRopeMode: 0 none, 1 relative, 2 chunk-indexed
  int64_t n_sink = 256, n_stream = 1024;
  const void* q = nullptr;  // bf16 [n_seq, n_head, D] (un-rotated unless rope_mode == 0), D = kv.head_dim
  KvView kv;                // bf16 or e4m3 keys (k_scale), device, head_dim D = 64, 128 or 256
  int n_head = 0;
  const float* rope_cos = nullptr;  // [rope_n_pos, D / 2] device (ihip_rope_table's values)
  const float* rope_sin = nullptr;
  int64_t rope_n_pos = 0;
  const int32_t* in = nullptr;      // [n_seq, in_cap] or nullptr: the stage-0 range
  const int32_t* in_len = nullptr;  // [n_seq]
  int64_t in_cap = 0;
  int32_t* out = nullptr;      // [n_seq, out_cap], out_cap >= k
  int32_t* out_len = nullptr;  // [n_seq]
  int64_t out_cap = 0;
  float* scores = nullptr;     // workspace [n_seq, max_chunks]
  int64_t max_chunks = 0;      // bound on ceil(candidates / l_c) of any sequence (grid size)
  int32_t* win_begin = nullptr;  // stage-0 input only (optional): [n_seq] cand_end, the window's anchor
  // rank=local: workspace [n_seq, n_head] the stage's offsets (ihip_offsets_decode writes them,
  // the score kernel subtracts them); nullptr: the paper's raw logits.
  float* offset = nullptr;
};
// offset set: ihip_offsets_decode, then the two launches below.
void ihip_prune_stage_decode(const IhipStageGpuParams& p, Stream s = nullptr);
// rank=local: p.offset of each sequence whose stage prunes (n_chunk > k / l_c; others untouched).
void ihip_offsets_decode(const IhipStageGpuParams& p, Stream s = nullptr);
// Its two launches, separately (the benchmark times each): chunk scores into p.scores, then the
// ranking and the output.
void ihip_score_decode(const IhipStageGpuParams& p, Stream s = nullptr);
void ihip_select_decode(const IhipStageGpuParams& p, Stream s = nullptr);

// The decode index (kernels/params/decode_index.h, one shared index head) of each sequence:
// ranges [0, n_sink), one per kept chunk of the last stage (l_c entries from its first), pads
// [w, w) and the window [w, open end) with w = win_begin[s]: exactly 2 + out_cap / l_c ranges
// per sequence (range_ptr[s] = s * that), no columns.
struct IhipIndexGpuParams {
  const int32_t* sel = nullptr;      // [n_seq, sel_cap] the last stage's output
  const int32_t* sel_len = nullptr;  // [n_seq]
  int64_t sel_cap = 0;
  int l_c = 8;
  int64_t n_sink = 256;
  const int32_t* win_begin = nullptr;  // [n_seq]
  int n_seq = 0;
  int32_t* range_ptr = nullptr;  // [n_seq + 1]
  int32_t* ranges = nullptr;     // [n_seq * ranges_per_seq()][2]
  int32_t* col_ptr = nullptr;    // [n_seq + 1], all 0
  constexpr int64_t ranges_per_seq() const { return 2 + sel_cap / l_c; }  // constexpr: device-callable
};
void ihip_decode_index(const IhipIndexGpuParams& p, Stream s = nullptr);

// ---- Prefill: a chunk of queries, one stage per call for all its 64-row query blocks at once.
// Query block b holds chunk rows [64 b, min(64 b + 64, n_q)) at positions q_pos0 + row, its last
// query at q_last(b); its stage input is the stage-0 range [n_sink, max(n_sink, q_last - n_stream
// + 1)) or its previous stage's list; SelectRep pools over the group's query heads x the block's
// rows (ihip_pack_queries' queries, rotated per row), so the survivors equal ihip_prune_block's
// and the chunk scores are bit-equal to ihip_chunk_scores (same fp32 rotation and dot order)
// except on the tensor-core path below (equal up to near ties).
// How (ihip_prune_prefill.cu): score kernel, CTAs of 256 threads per (KV head, block), each
// looping over groups of chunks; each bisection step gathers the group's probe keys (the middle
// of each half of each chunk) into shared memory and scores them against every query, then a max
// over the queries and the running max of each chunk's probes. The FMA path takes groups of 16
// chunks with the group's queries (<= 256 at a time) in shared memory; the tensor-core path takes
// groups of 32 chunks (64 probes a pass) with each warp's query A fragments in registers, loaded
// once per CTA. Scoring: <= 4 query heads per KV head (one query tile) on tensor cores (bf16
// mma.m16n8k16, fp32 accumulate: the sums are not hip_dot's order, so a near tie in a bisection
// step may go the other way: bit-equal on inputs with exact dots, fp64-judged otherwise,
// tests/cuda/test_ihip_gpu.cpp), in every RoPE mode unless rope_tensor_cores is off: with RoPE the
// queries are rotated once per CTA as their fragments load, the gathered probe keys in registers
// before they enter shared memory, both with rotate()'s fp32 formula and table (the FMA path's
// values) and then rounded to bf16 (relative error <= 2^-9 an operand: the mma path's scores are
// those of the rounded operands, so they are judged against an fp64 replay on the same rounded
// values); else fp32 FMAs in hip_dot's 8-lane order, 4 queries x 8 probes a thread (rotated
// queries and keys in fp32: bit-equal to ihip_chunk_scores).
// Select kernel: ihip_prune.cuh's select_chunks per block over the max of the KV heads' scores.
// rank=local (offset set): ihip_offsets_prefill first writes each block's offsets (ihip_local_offsets
// for its rows: one CTA per (KV head, block) gathers the rows' local keys kSlots at a time, rotated
// at ihip_local_key_pos, into the FMA scorer's transposed tile and takes the 4 x 8 tile dots in
// hip_dot's order, a key counting for the rows at or after it: bit-equal), then the score kernel
// takes the path the paper's rule would: on tensor cores each row's accumulators start at minus
// its offset (the mma sums q.k - offset; separate kLocal instantiations, so the paper's kernels
// keep their registers), judged against the fp64 replay minus the CPU's offsets (bit-equal on
// exact-dot inputs); on the FMA path offset[t] is subtracted (__fsub_rn) from each dot before the
// max over the queries: the chunk scores bit-equal to ihip_chunk_scores with IhipStageInput::offset.

struct IhipPrefillGpuParams {
  const void* q = nullptr;  // bf16 [n_q, n_head, D] (un-rotated unless rope_mode == 0)
  const void* k = nullptr;  // bf16 [n_kv, n_kv_head, D], keys 0..n_kv-1 contiguous
  int64_t n_q = 0, n_kv = 0, q_pos0 = 0;
  int n_head = 0, n_kv_head = 0;
  int head_dim = 128;  // D: 64, 128 or 256
  int rope_mode = 0;  // IhipRopeMode: 0 none, 1 relative, 2 chunk-indexed
  // RoPE modes: score on tensor cores where one query tile holds the group (bf16 rotated
  // operands), or false: the fp32 FMA scorer, bit-equal to the CPU reference.
  bool rope_tensor_cores = true;
  // RoPE none on tensor cores: wgmma (a warpgroup reads each probe key once, sm_90a), or false:
  // mma.sync (each warp reads every probe key). The same probes; dots summed in either's fp32 order.
  bool wgmma_scorer = true;
  // The pipelined RoPE-none scorer (wgmma or mma.sync): whether each bisection step also warms
  // L2 with the 4 keys a chunk's next step may probe (2 of them used). Off: measured 1.10-1.13x faster
  // stage 1 at 1M + 32K on an H100 (the extra L2 / DRAM traffic and instructions cost more than
  // the gathers' latency they hide). The same probes and scores either way.
  bool l2_prefetch = false;
  int64_t n_sink = 256, n_stream = 1024;
  const float* rope_cos = nullptr;  // [rope_n_pos, D / 2] device (ihip_rope_table's values)
  const float* rope_sin = nullptr;
  int64_t rope_n_pos = 0;
  // rank=local: workspace [n_blk, n_kv_head, group * 64] (query t = h' * rows + r of the block's KV
  // head: ihip_pack_queries' order): each stage's offsets; nullptr: the paper's raw logits.
  float* offset = nullptr;
  int64_t n_blk() const { return (n_q + 63) / 64; }
};
struct IhipPrefillStage {
  int l_c = 256;
  int64_t k = 32768;
  const int32_t* in = nullptr;      // [n_blk, in_cap] or nullptr: the stage-0 range
  const int32_t* in_len = nullptr;  // [n_blk]
  int64_t in_cap = 0;
  int32_t* out = nullptr;      // [n_blk, out_cap], out_cap >= k
  int32_t* out_len = nullptr;  // [n_blk]
  int64_t out_cap = 0;
  float* scores = nullptr;     // workspace [n_blk, n_kv_head, max_chunks]: per KV head chunk scores
  int64_t max_chunks = 0;      // bound on ceil(candidates / l_c) of any block (grid size)
};
void ihip_prune_stage_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, Stream s = nullptr);
// Whether the stage scores on tensor cores: a KV head's block queries (group x 64) fit one tile
// (groups <= 4), and RoPE none or rope_tensor_cores; rank=local (offset) or not alike.
bool prefill_uses_mma(const IhipPrefillGpuParams& p);
// rank=local: p.offset of each block whose stage prunes (n_chunk > k / l_c; others untouched).
void ihip_offsets_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, Stream s = nullptr);
// Its two launches, separately (benchmarks).
void ihip_score_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, Stream s = nullptr);
void ihip_select_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, Stream s = nullptr);

// The prefill sparse index (cuda::DeviceSparseIndex layout, one index head, no columns) of the
// last stage's lists: per block exactly ranges_per_blk() ranges: [0, min(n_sink, q_last + 1)),
// one per l_c-run of the list (consecutive positions), pads [w, w) and the window [w, q_last + 1)
// with w = max(n_sink, q_last - n_stream + 1): ihip_key_set's keys.
struct IhipPrefillIndexParams {
  const int32_t* sel = nullptr;      // [n_blk, sel_cap]
  const int32_t* sel_len = nullptr;  // [n_blk]
  int64_t sel_cap = 0;
  int l_c = 8;
  int64_t n_q = 0, q_pos0 = 0, n_sink = 256, n_stream = 1024;
  int64_t* range_ptr = nullptr;  // [n_blk + 1]
  int32_t* ranges = nullptr;     // [n_blk * ranges_per_blk()][2]
  int64_t* col_ptr = nullptr;    // [n_blk + 1], all 0
  int64_t n_blk() const { return (n_q + 63) / 64; }
  constexpr int64_t ranges_per_blk() const { return 2 + sel_cap / l_c; }  // constexpr: device-callable
};
void ihip_prefill_index(const IhipPrefillIndexParams& p, Stream s = nullptr);

}  // namespace longctx::cuda
