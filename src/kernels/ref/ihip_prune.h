// ihip_prune.h: InfiniteHiP's pruning stage (the paper's Algorithms 2 and 3), CPU reference;
// one parametrised stage that every stage of every preset runs (notes/infinitehip.md §2.5-2.7).
//
// What, for one query block and one stage (l_c, k), given the stage's candidate keys `cand`
// (sorted absolute positions):
//   1. cand is cut into n_chunk = ceil(|cand| / l_c) chunks of l_c consecutive entries (the last
//      one may be shorter); if n_chunk <= K = k / l_c every candidate survives (nothing to prune);
//   2. SelectRep, per chunk and KV head g, as the authors' kernel runs it (hip-attention v1_2
//      chunk_controllable_sampling_mask_cuda; the paper's Algorithm 3 text says "the first index"
//      of each branch, the code probes the middle one): bisection on the chunk's entries
//      [lo, hi): while hi - lo > 1, mid = lo + (hi - lo) / 2, score the MIDDLE entry of each half
//      (entries[lo + (mid - lo) / 2] at the left-branch RoPE position, entries[mid + (hi - mid)
//      / 2] at the right-branch one) and keep the left half only when sigma_left > sigma_right
//      (ties go right); the representative is entry lo;
//   3. chunk score = max over KV heads of the largest probe score on g's bisection path and of
//      the representative at both branch positions (the authors' running max over iterations,
//      whose last, one-entry iteration probes the representative as left and right); a probe's
//      score sigma = max over the block's queries of group g (the group's query heads x the
//      block's rows) of q~ . k~ (hip_dot order, unscaled; NaN never wins);
//   4. the K best chunks (larger score first, then the earlier chunk: a total order, so the GPU
//      twin matches, ties included), emitted as the union of their entries in position order.
// RoPE during pruning (IhipRopeMode): none (keys cached rotated at their own positions; q and k
// are used as they are), relative (layers past the first few: q at n_stream + 1, left keys at 0,
// right keys at 1, paper Eq. 2-3) or chunk-indexed (first layers: q at
// min(i_orig, n_chunk - 1 + n_stream), every key of chunk j at j, j counted in this stage's
// candidate list). Keys are fp32 values or e4m3 bytes with a scale (the fp8 KV cache: IhipStageInput::
// k_fp8). Rotation is rotate-half (HF/NeoX) from an fp32 cos/sin table, with explicit
// fma so the GPU twin (kernels/cuda/ihip_prune.cu) rotates bit-identically.
// Ranking by local log weight (`rank=local`, opt-in; the paper's raw logits stay the default):
// IhipStageInput::offset holds, per KV head g and packed query t (head h', row r), the largest
// pruning-frame logit of that row over the keys it always attends (the local keys: its sinks
// [0, min(n_sink, pos + 1)) and the window [win_begin, pos], win_begin = max(n_sink, q_last -
// n_stream + 1) of the block's last row), and every probe dot becomes q~.k~ - offset before the
// max over the group's queries: a chunk then ranks by the largest log attention weight it would
// get against the local context (up to the row's softmax normaliser), which is comparable across
// heads and rows whose logit scales differ. The same pruning frame: RoPE none scores the stored
// (rotated) keys against the stored queries; the RoPE modes rotate the local keys at the
// left-branch position of the stage's last chunk, ihip_local_key_pos (relative: 0, every left
// probe's position; chunk-indexed: n_chunk - 1, the candidate chunk nearest the query), i.e. the
// local context is scored as if it were the nearest candidate, against the stage's packed
// (rotated) queries; so the offsets are per stage (the chunk-indexed query positions depend on
// n_chunk). The subtraction is one fp32 operation after hip_dot (the GPU twins' __fsub_rn).
// Why one stage: the paper's single kernel reused with different (b_q, l_c, k); b_q is the
// caller's choice of query rows (a 64-row block in prefill, the one token in decode).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace longctx {

enum class IhipRopeMode { none, relative, chunk_indexed };

// cos/sin of positions [0, n_pos): cos[pos * half + i] = cos(float(pos) * inv_freq[i]) (fp32
// product as HF computes it; the attention factor is left out: it scales every score alike).
struct IhipRopeTable {
  int half = 0;
  int64_t n_pos = 0;
  std::vector<float> cos, sin;  // [n_pos, half]
};
IhipRopeTable ihip_rope_table(const float* inv_freq, int head_dim, int64_t n_pos);

// out = x rotated at pos (rotate-half pairs (i, i + half)):
//   out[i] = fma(x[i], c, -(x[i+half] * s)),  out[i+half] = fma(x[i+half], c, x[i] * s).
void ihip_rotate(const float* x, float* out, int head_dim, const IhipRopeTable& t, int64_t pos);

// The paper's position assignments (Eq. 2-3); branch 0 = left, 1 = right.
int64_t ihip_query_pos(IhipRopeMode mode, int64_t i_orig, int64_t n_chunk, int64_t n_stream);
int64_t ihip_key_pos(IhipRopeMode mode, int branch, int64_t chunk);

struct IhipStage {
  int l_c = 256;      // chunk size
  int64_t k = 32768;  // tokens kept (a multiple of l_c)
  int64_t keep_chunks() const { return k / l_c; }
};

// One stage's queries and keys.
struct IhipStageInput {
  // The block's queries per KV group, already rotated for the stage (ihip_pack_queries):
  // q[(g * n_qs + t) * head_dim ...], t < n_qs (the group's heads x the block's rows).
  const float* q = nullptr;
  int n_qs = 0;
  const float* k = nullptr;  // key at position j, KV head g: k + j * k_stride + g * head_dim
  int64_t k_stride = 0;
  // The fp8 cache's keys instead of k (same layout, one byte an element): element = e4m3_to_f32(byte)
  // * k_scale, one fp32 product (the GPU twin's dequantisation), before the rotation and the dot.
  const uint8_t* k_fp8 = nullptr;
  float k_scale = 1.f;
  int n_kv_head = 0;
  int head_dim = 0;
  IhipRopeMode rope = IhipRopeMode::none;
  const IhipRopeTable* table = nullptr;  // covers every position the mode asks (not for none)
  // rank=local: [n_kv_head][n_qs] subtracted from each probe dot (ihip_local_offsets); nullptr:
  // the paper's raw logits.
  const float* offset = nullptr;
};

// The block's queries packed for a stage: rows [row0, row0 + rows) of q [n_q, n_head, d] at
// absolute positions pos0 + r; each rotated at ihip_query_pos(mode, pos, n_chunk, n_stream)
// (none: copied). out: [n_kv_head][group * rows][d], row-major inside a head (t = h' * rows + r).
void ihip_pack_queries(const float* q, int n_head, int n_kv_head, int head_dim, int64_t row0, int64_t rows,
                       int64_t pos0, IhipRopeMode mode, const IhipRopeTable* table, int64_t n_chunk,
                       int64_t n_stream, std::vector<float>& out);

// SelectRep over one chunk's entries (n of them, the chunk's index `chunk` in the stage's list)
// for KV head g: the representative's entry index in [0, n); rep_score (optional) gets the chunk
// score's term for g (step 3: the path's largest probe score).
int ihip_select_rep(const IhipStageInput& in, int g, const int32_t* entries, int n, int64_t chunk,
                    float* rep_score = nullptr);

// Score of one key (absolute position `key`, KV head g) rotated at `key_pos`: max over the
// group's queries t of hip_dot(q~_t, k~) (minus in.offset[g * n_qs + t] when set); -inf if every
// dot is NaN.
float ihip_probe(const IhipStageInput& in, int g, int32_t key, int64_t key_pos);

// The key position of the local keys in the pruning frame (rank=local; unused for none).
int64_t ihip_local_key_pos(IhipRopeMode mode, int64_t n_chunk);

// rank=local: the block's local keys, for one stage of n_chunk chunks. Rows r < rows sit at
// absolute positions pos0 + r.
struct IhipLocalKeys {
  int64_t rows = 1, pos0 = 0;
  int64_t n_sink = 256;
  int64_t win_begin = 0;  // max(n_sink, q_last - n_stream + 1) (ihip_candidate_end)
  int64_t n_chunk = 1;
};
// out[g * in.n_qs + t] = max over row r's local keys j (t = h' * rows + r) of hip_dot(q~_t, k~_j),
// k~_j at ihip_local_key_pos; NaN dots never win (-inf if all are NaN). in.offset is ignored.
void ihip_local_offsets(const IhipStageInput& in, const IhipLocalKeys& lk, std::vector<float>& out);

// Chunk scores of a stage (step 3), one per chunk, for tests and the GPU twin's check.
std::vector<float> ihip_chunk_scores(const IhipStage& st, const IhipStageInput& in, std::span<const int32_t> cand);

// The stage: out = the surviving candidates in position order (steps 1-4).
void ihip_prune_stage(const IhipStage& st, const IhipStageInput& in, std::span<const int32_t> cand,
                      std::vector<int32_t>& out);

// The K best of n scores (larger first, then the lower index), returned in index order.
std::vector<int32_t> ihip_top_chunks(std::span<const float> score, int64_t keep);

}  // namespace longctx
