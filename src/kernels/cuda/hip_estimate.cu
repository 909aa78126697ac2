// hip_estimate.cu: see hip_estimate.h. One CTA of kPrefillCta (128) threads per (query head,
// query block) in prefill, several an SM; a cluster of kDecodeCluster CTAs of 512 threads per
// (sequence, head) in decode, each scoring a share of the branches and storing their rank keys
// into every CTA's shared memory.
// Scores: the fp32 FMA scorer (decode; prefill with > 32 sampled queries) has 64 groups of 8
// threads a CTA, each group loading up to 8 (branch, sampled key) items at a time (8 threads per
// dot product, 16-byte key loads, the xor-shuffle tree of hip_topk.h's order: bit-equal to the
// CPU); prefill's tensor-core scorer multiplies the 32 sampled queries (kept in shared memory in
// the mma's A-fragment order) by 8-key tiles (mma m16n8k16: bf16 keys bf16 x bf16; fp8 keys
// f16 x f16, one cvt per 2 codes, the queries scaled into f16 by a power of 2). head_dim 256 holds 4 key chunks a
// lane instead of 2 and half the items in flight.
// Keep-the-best: a radix select of the (score desc, branch asc) threshold over the bits where
// the 32-bit rank keys (the CPU's total order) differ, and ballot-based compaction in branch order
// that also writes the next iteration's halves (4-9 barriers an iteration in all, usually 6).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cooperative_groups.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/hip_estimate.h"
#include "kernels/cuda/kv_offload.cuh"
#include "kernels/cuda/mma.cuh"

namespace longctx::cuda {

namespace {

namespace cg = cooperative_groups;
// Decode CTAs have kThreads threads; prefill CTAs kCta (a template parameter, kPrefillCta by
// default: smaller CTAs, several an SM, overlap one search's selection barriers with another's
// key loads). The device functions take the CTA size as kCta.
constexpr int kThreads = 512, kLanes = 8;
constexpr int32_t kOpenEnd = 0x7fffffff;  // a decode window's end: clipped to the length by the kernel
// Prefill addresses key rows by 32-bit offsets in units of kKeyUnit elements (head_dim is a
// multiple of 8): up to 2^35 key elements a layer (64 GiB of bf16 keys).
constexpr int kKeyUnit = 8;
// Prefill's query blocks are the grid's y dimension (CUDA's limit).
constexpr int64_t kMaxGridY = 65535;

struct Branch {
  int32_t a, g;  // first key block, blocks
};

struct Shape {  // one CTA's search, after its region is known
  int n_qs, head_dim;
  int64_t block_begin, block_end, key_end;
};

// Shared memory carve: q samples (fp32, for the FMA scorer), their positions, chunks, branches,
// the branches' rank keys (two buffers: a cluster's CTAs write the next iteration's while the last
// is still read), the radix histograms and selection state, the per-warp counts of the
// branch-order scans, and for the tensor-core scorer the bf16 queries and, when a branch's items
// span n-tiles, per-item scores. Exact: a region the CTA's scorer never reads takes no bytes
// (prefill at the paper's defaults, d 128: 28,032 bytes a CTA, was 48,912: with 4 CTAs an SM the
// unified L1 / shared memory can keep ~124 KiB of L1 for the key loads instead of ~28).
// The selection's per-warp ballot counts: one per 32 branches of the longest list (2 * k/b_k).
constexpr int kScanSlots = 2 * kHipMaxBudgetBlocks / 32;
constexpr int kRadixBits = 8, kBins = 1 << kRadixBits, kPasses = 32 / kRadixBits;
struct Smem {
  float* q;
  int64_t* pos;
  Branch* chunks;
  Branch* br[2];  // this iteration's branches and the next's (the selection splits what it keeps)
  uint32_t* key[2];
  int* hist;   // [kPasses][kBins]
  int* sel;    // [2][warps] the selection's least and greatest keys a warp (load_q: [0] a scale)
  int* cnt;    // [2][kScanSlots]
  __nv_bfloat16* qb;  // kMma: the sampled queries, bf16, in A-fragment order (qfrag_offset)
  uint32_t* key0;     // kMma: [key0_slots(m)] each branch's first sampled key (first_key), kNoKey past 2m
  float* item;        // kMma, n_ks not dividing 8: [2m * n_ks] each (branch, sampled key) item's best score
};

// What a CTA's carve holds: n_qs sampled queries (the most a block has), head_dim d, m = k/b_k
// budget blocks, n_ks sampled keys a block, and the scorer (mma: tensor cores, else fp32 FMAs).
struct SmemShape {
  int n_qs, d;
  int64_t m;
  int n_ks;
  bool mma;
};

__host__ __device__ inline size_t align16(size_t n) { return (n + 15) / 16 * 16; }

// Tensor-core scorer: two m16 tiles of sampled queries, stored in the order of the mma's A
// fragments (see qfrag_offset): one 16-byte shared-memory load is a lane's whole fragment of a
// k-step, already in the 4 consecutive registers the mma reads (no moves), and a warp's 32 loads
// are 512 consecutive bytes (no bank conflicts).
constexpr int kMmaQueries = 32;
__host__ __device__ inline size_t qfrag_elems(int d) { return size_t(kMmaQueries) * ((d + 31) / 32 * 32); }

// Where query row r (< 32), element e of the fragment-ordered copy lives. score_mma permutes the
// head dimension (the same way in A and B): element e = 32p + 8t + 4j + 2h + x is lane t's
// k-step 2p + j, half h (k = 2t + x or 8 + 2t + x); row r = 16mt + g + 8rh is m-tile mt's row g
// (rh 0) or g + 8 (rh 1). A fragment register (PTX m16n8k16): a0 = (g, half 0), a1 = (g + 8,
// half 0), a2 = (g, half 1), a3 = (g + 8, half 1), i.e. register rh + 2h. Quad (16 bytes) index:
// ((mt * P + p) * 2 + j) * 32 + lane, P = ceil(d / 32), lane = 4g + t.
__device__ inline int qfrag_offset(int r, int e, int d) {
  const int mt = r / 16, g = r % 8, rh = (r / 8) % 2;
  const int p = e / 32, t = (e / 8) % 4, j = (e / 4) % 2, h = (e / 2) % 2, x = e % 2;
  return ((((mt * ((d + 31) / 32) + p) * 2 + j) * 32 + 4 * g + t) * 4 + rh + 2 * h) * 2 + x;
}
// The tensor-core scorer reads each branch's first sampled key, (a + g/2) * b_k + b_sk - 1, from
// s.key0, written once a branch where the branches are made (the first split, keep_best's
// compaction) instead of by each of the 4 lanes of each of its items from its Branch (~14
// instructions a lane and tile: ~1/4 of the fp8 scorer's loop). Empty branches hold kNoKey,
// which stays at or past any key_end (<= 2^31) with a sampled key's offset (< b_k) added, so
// one unsigned compare against key_end tells a live item. The array runs to a multiple of
// kKey0Round branches (4 n-tiles of 4 branches: score_mma's tiles at a time) so that the paper
// case's loop reads the padding as empty items instead of testing each item against the count.
constexpr uint32_t kNoKey = 0xffff0000u;
constexpr int kKey0Round = 16;
__host__ __device__ inline int64_t key0_slots(int64_t m) { return (2 * m + kKey0Round - 1) / kKey0Round * kKey0Round; }
__host__ __device__ inline uint32_t first_key(int32_t a, int32_t g, int b_k, int b_sk) {
  return g > 0 ? uint32_t((a + g / 2) * b_k + b_sk - 1) : kNoKey;
}

// Lays the carve out from base (nullptr: sizes only); returns the bytes. The one place the
// regions' sizes are written: hip_estimate_smem_bytes and the kernels agree by construction.
__host__ __device__ inline size_t lay_out(const SmemShape& c, char* base, Smem& s) {
  size_t off = 0;
  const auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += align16(bytes);
    return p;
  };
  s.q = c.mma ? nullptr : reinterpret_cast<float*>(take(size_t(c.n_qs) * c.d * 4));
  s.pos = reinterpret_cast<int64_t*>(take(size_t(c.n_qs) * 8));
  s.chunks = reinterpret_cast<Branch*>(take(size_t(c.m) * 8));
  for (int b = 0; b < 2; ++b) s.br[b] = reinterpret_cast<Branch*>(take(size_t(2 * c.m) * 8));
  for (int b = 0; b < 2; ++b) s.key[b] = reinterpret_cast<uint32_t*>(take(size_t(2 * c.m) * 4));
  s.hist = reinterpret_cast<int*>(take(kPasses * kBins * 4));
  s.sel = reinterpret_cast<int*>(take(2 * (kThreads / 32) * 4));
  s.cnt = reinterpret_cast<int*>(take(2 * kScanSlots * 4));
  s.qb = c.mma ? reinterpret_cast<__nv_bfloat16*>(take(qfrag_elems(c.d) * 2)) : nullptr;
  s.item = c.mma && 8 % c.n_ks != 0 ? reinterpret_cast<float*>(take(size_t(2 * c.m) * c.n_ks * 4)) : nullptr;
  s.key0 = c.mma ? reinterpret_cast<uint32_t*>(take(size_t(key0_slots(c.m)) * 4)) : nullptr;
  return off;
}
inline size_t smem_bytes(const SmemShape& c) {
  Smem s;
  return lay_out(c, nullptr, s);
}
__device__ Smem carve(char* base, const SmemShape& c) {
  Smem s;
  lay_out(c, base, s);
  return s;
}
// The prefill scorer: tensor cores for <= 32 sampled queries and head_dim a multiple of 32.
__host__ __device__ constexpr bool prefill_mma(int n_qs, int d) { return n_qs <= kMmaQueries && d % 32 == 0; }

// Rank key of a live branch's score: ascending = higher score first (-0 counts as +0, as the
// CPU's == does). Equal keys rank by branch index (the CPU's total order). Empty branches get
// kEmptyRank, above every live key (the lowest score, -inf, maps to 0xff800000; a NaN is never a
// best score).
__device__ inline uint32_t rank_key(float score) {
  if (score == 0.f) score = 0.f;
  const uint32_t bits = __float_as_uint(score);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);  // increasing in score
  return ~ordered;
}
constexpr uint32_t kEmptyRank = 0xffffffffu;

// Bench-only phase clocks (compile with -DLONGCTX_HIP_PHASE_CLOCKS; never in the engine's build):
// thread 0 of each prefill CTA splits its lifetime by clock64() into the phases below, summed over
// the CTAs into g_hip_phase (hip_estimate_phase_clocks reads and clears them). Warp 0's view: a
// phase includes the cycles the SM spent on other CTAs' warps meanwhile.
enum HipPhase { kPhProlog, kPhScore, kPhScoreWait, kPhRadix, kPhCompact, kPhEndWait, kPhEpilog, kPhIters, kPhCount };
#ifdef LONGCTX_HIP_PHASE_CLOCKS
__device__ unsigned long long g_hip_phase[kPhCount + 1];  // [kPhCount]: CTAs
#endif
struct PhaseClock {
  long long last = 0, t[kPhCount] = {};
  __device__ void begin() {
#ifdef LONGCTX_HIP_PHASE_CLOCKS
    if (threadIdx.x == 0) last = clock64();
#endif
  }
  __device__ void iteration() {
#ifdef LONGCTX_HIP_PHASE_CLOCKS
    if (threadIdx.x == 0) ++t[kPhIters];
#endif
  }
  __device__ void flush() {
#ifdef LONGCTX_HIP_PHASE_CLOCKS
    if (threadIdx.x == 0) {
      for (int i = 0; i < kPhCount; ++i) atomicAdd(&g_hip_phase[i], (unsigned long long)t[i]);
      atomicAdd(&g_hip_phase[kPhCount], 1ull);
    }
#endif
  }
  __device__ void mark(int phase) {
#ifdef LONGCTX_HIP_PHASE_CLOCKS
    if (threadIdx.x == 0) {
      const long long now = clock64();
      t[phase] += now - last;
      last = now;
    }
#endif
  }
};

// What keep_best keeps and how its halves are sampled (by value: decode's keep_best_call is a call,
// and a reference to the kernel parameters' config put a copy of it on the stack).
struct KeepShape {
  int64_t m;       // k/b_k: branches kept
  int32_t b_k, b_sk;
};

// Keeps the m = k/b_k best of the nb branches br ranked by key (ascending, ties by branch index),
// writes them to s.chunks[0, m) in branch order and their halves (the next iteration's branches:
// chunk c gives 2c, the first half, empty when c is one block, and 2c + 1; the CPU's list order
// with the empty halves removed) to next[0, 2m), and the halves' first sampled keys to s.key0.
// Returns whether this thread kept a chunk of more than one block (another iteration is needed
// when any did).
// The threshold T (the m-th smallest key) comes from a radix select over the bits where the keys
// differ: in prefill one barrier gives every warp the least key and the greatest live one, whose
// common top bits every key between them shares (real-valued scores of one sign usually share the
// sign and most of the exponent: a first pass over the top 8 bits finds one bin); decode starts
// at the top bits. Then 8 bits a pass (warp-aggregated shared-memory histograms; in prefill one
// barrier a pass: every warp scans the bins itself, no broadcast and its barrier; in decode warp 0
// scans and broadcasts, two barriers a pass), ending at the pass whose
// digit's bin holds exactly the rank left (every key of it is kept: usually the second in prefill,
// the third in decode). A branch is kept when its key is below T, or equal to T and among the
// first `rem` (the rank left at T) such in branch order. The m-th smallest key is always a live
// branch's: the m chunks give m + (chunks of two blocks or more) >= m + 1 live branches, so the
// empty ones (kEmptyRank, above every live key) are never kept and stay out of the range.
// Barriers: prefill 2-7, usually 4; decode usually 7 (three passes of two, then the compaction's);
// a bitonic sort of 512 keys takes 45.
// s.hist is zero on entry and on return (the passes' bins are cleared after the last reads).
template <int kCta>
__device__ bool keep_best(KeepShape ks, int nb, const Smem& s, const uint32_t* key, const Branch* br, Branch* next,
                          PhaseClock& pc) {
  constexpr int kWarps = kCta / 32;
  const int64_t m = ks.m;
  // Keys a thread keeps in registers across the passes (rounds past it are read again from shared
  // memory): the paper's 512 branches (4 a thread of a prefill CTA, 1 of a decode CTA).
  constexpr int kRegRounds = 512 / kCta;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int rounds = (nb + kCta - 1) / kCta;
  uint32_t reg[kRegRounds];  // branch r * kCta + tid's key (kEmptyRank past nb)
#pragma unroll
  for (int r = 0; r < kRegRounds; ++r) reg[r] = r * kCta + tid < nb ? key[r * kCta + tid] : kEmptyRank;
  // f(r, key) for each round of this thread, in order (uniform over the warp: f may use ballots).
  const auto each = [&](auto&& f) {
#pragma unroll
    for (int r = 0; r < kRegRounds; ++r)
      if (r < rounds) f(r, reg[r]);
    for (int r = kRegRounds; r < rounds; ++r) f(r, r * kCta + tid < nb ? key[r * kCta + tid] : kEmptyRank);
  };
  // The least key and the greatest live one (prefill). Decode's CTAs (kThreads, one search a pair
  // of SMs, nothing to overlap its barriers with) skip the step and start from the top bits: each
  // form measured the faster where it is used (docs/benchmarks.md).
  uint32_t lo = 0, hi = kEmptyRank - 1;
  if constexpr (kCta < kThreads) {
    lo = kEmptyRank, hi = 0;
    each([&](int r, uint32_t u) {
      lo = min(lo, u);  // (padding: kEmptyRank)
      hi = u != kEmptyRank ? max(hi, u) : hi;
    });
    uint32_t* const range = reinterpret_cast<uint32_t*>(s.sel);  // [2][kWarps]
    lo = __reduce_min_sync(0xffffffffu, lo);
    hi = __reduce_max_sync(0xffffffffu, hi);
    if (lane == 0) range[warp] = lo, range[kWarps + warp] = hi;
    __syncthreads();
    lo = __reduce_min_sync(0xffffffffu, lane < kWarps ? range[lane] : kEmptyRank);
    hi = __reduce_max_sync(0xffffffffu, lane < kWarps ? range[kWarps + lane] : 0u);
  }
  int top = 32 - __clz(int(lo ^ hi));  // bits [top, 32) are every candidate's (those of lo)
  uint32_t prefix = top == 32 ? 0u : lo & (~0u << top);
  int rem = int(m), passes = 0;
  bool split_ties = true;  // until a pass's digit bin holds exactly the rank left
#pragma unroll 1
  while (top > 0) {
    const int bits = top < kRadixBits ? top : kRadixBits, shift = top - bits;
    const uint32_t above = top == 32 ? 0u : ~0u << top;  // the bits decided so far
    int* const hist = s.hist + passes * kBins;
    each([&](int r, uint32_t u) {  // (padding and empty keys are never in the prefix, or counted)
      const bool in = r * kCta + tid < nb && (u & above) == prefix && u <= hi;
      const uint32_t dg = in ? (u >> shift) & ((1u << bits) - 1u) : uint32_t(kBins);
      const unsigned peers = __match_any_sync(0xffffffffu, dg);
      if (in && lane == __ffs(peers) - 1) atomicAdd(&hist[dg], __popc(peers));
    });
    ++passes;
    __syncthreads();
    // The digit where the running count reaches rem (lane L sums bins 8L..8L+7): the digit, the
    // keys below its bin and its bin's count, in the lane whose bins reach rem.
    constexpr int kPer = kBins / 32;
    static_assert(kPer == 8, "two 16-byte loads a lane");
    const auto scan = [&](int& digit, int& below, int& bin) {
      const int4 c0 = reinterpret_cast<const int4*>(hist)[2 * lane];
      const int4 c1 = reinterpret_cast<const int4*>(hist)[2 * lane + 1];
      const int c[kPer] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
      int sum = 0;
#pragma unroll
      for (int b = 0; b < kPer; ++b) sum += c[b];
      int incl = sum;
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
      }
      int acc = incl - sum, dg = -1, eq = 0;
#pragma unroll
      for (int b = 0; b < kPer; ++b)
        if (dg < 0) {
          if (acc + c[b] >= rem) dg = b, eq = c[b];
          else acc += c[b];
        }
      digit = kPer * lane + dg, below = acc, bin = eq;
      return __ffs(__ballot_sync(0xffffffffu, incl - sum < rem && rem <= incl)) - 1;  // that lane
    };
    int eq;
    if constexpr (kCta == kThreads) {
      // Decode: warp 0 scans and broadcasts through shared memory (a second barrier a pass), so
      // that 15 of the CTA's 16 warps do not repeat the scan (nothing else shares the SM).
      if (warp == 0) {
        int digit, below, bin;
        if (lane == scan(digit, below, bin))
          s.sel[0] = int(prefix | uint32_t(digit) << shift), s.sel[1] = rem - below, s.sel[2] = bin;
      }
      __syncthreads();
      prefix = uint32_t(s.sel[0]);
      rem = s.sel[1];
      eq = s.sel[2];
    } else {
      // Prefill: every warp scans the bins itself (no broadcast and its barrier; the SM's other
      // CTAs fill the gaps).
      int digit, below, bin;
      const int src = scan(digit, below, bin);
      prefix |= uint32_t(__shfl_sync(0xffffffffu, digit, src)) << shift;
      rem -= __shfl_sync(0xffffffffu, below, src);
      eq = __shfl_sync(0xffffffffu, bin, src);
    }
    top = shift;
    if (eq == rem) {  // the digit's bin is kept whole: T is its largest possible key
      prefix |= (1u << shift) - 1u;
      split_ties = false;
      break;
    }
  }
  pc.mark(kPhRadix);
  // Keep flags and compaction in branch order: thread t holds branches t + r * kCta (r <
  // rounds); a branch's place among the flagged ones is the flagged count of the warps and rounds
  // before it (per-warp ballot counts in s.cnt) plus its lanes below.
  const uint32_t T = prefix;
  const unsigned lower = (1u << lane) - 1u;
  int* cnt_eq = s.cnt;
  int* cnt_kept = s.cnt + kScanSlots;
  const auto before = [&](const int* cnt, int r) {  // warp-uniform call: the lanes share the sum
    int b = 0;
    for (int idx = lane; idx < r * kWarps + warp; idx += 32) b += cnt[idx];
    return int(__reduce_add_sync(0xffffffffu, unsigned(b)));
  };
  if (split_ties) {
    each([&](int r, uint32_t u) {  // (T is a live key: padding's kEmptyRank is never equal)
      const unsigned eq = __ballot_sync(0xffffffffu, u == T);
      if (lane == 0) cnt_eq[r * kWarps + warp] = __popc(eq);
    });
    __syncthreads();
  }
  const auto kept_of = [&](int r, uint32_t u) {  // warp-uniform call (ballot)
    if (!split_ties) return u <= T;
    const unsigned eq = __ballot_sync(0xffffffffu, u == T);
    const int eq_before = before(cnt_eq, r);
    return u < T || (u == T && eq_before + __popc(eq & lower) < rem);
  };
  each([&](int r, uint32_t u) {
    const unsigned kept = __ballot_sync(0xffffffffu, kept_of(r, u));
    if (lane == 0) cnt_kept[r * kWarps + warp] = __popc(kept);
  });
  __syncthreads();
  for (int i = tid; i < passes * kBins / 4; i += kCta) reinterpret_cast<int4*>(s.hist)[i] = make_int4(0, 0, 0, 0);
  bool wide = false;
  each([&](int r, uint32_t u) {
    const bool k = kept_of(r, u);
    const unsigned kept = __ballot_sync(0xffffffffu, k);
    const int kept_before = before(cnt_kept, r);
    if (k) {
      const int c = kept_before + __popc(kept & lower);
      const Branch b = br[r * kCta + tid];
      const int32_t h = b.g / 2;
      s.chunks[c] = b;
      next[2 * c] = {b.a, h};
      next[2 * c + 1] = {b.a + h, b.g - h};
      if (s.key0) {  // (read after the caller's end-of-iteration barrier)
        s.key0[2 * c] = first_key(b.a, h, ks.b_k, ks.b_sk);
        s.key0[2 * c + 1] = first_key(b.a + h, b.g - h, ks.b_k, ks.b_sk);
      }
      wide |= b.g > 1;
    }
  });
  pc.mark(kPhCompact);
  return wide;
}

// keep_best as a call of its own: decode's search (512 threads, 128 registers, the FMA scorer's
// 8 items of keys in flight) spilled more with it inlined (ptxas: 80 / 132 bytes vs 68 / 104).
template <int kCta>
__device__ __noinline__ bool keep_best_call(KeepShape ks, int nb, const Smem& s, const uint32_t* key, const Branch* br,
                                            Branch* next, PhaseClock& pc) {
  return keep_best<kCta>(ks, nb, s, key, br, next, pc);
}

// 8-element key chunks a lane holds (8 lanes a dot: lane l takes chunks l, l + 8, ...): kChunks = 2
// up to head_dim 128, 4 up to 256 (Gemma 3's global layers). The batch sizes below are for
// kChunks = 2; at 4 they halve, so the keys in flight take the same registers (no spills at
// 128 registers a thread) and the same bytes.
constexpr int kMaxHeadDim = 256;
constexpr int chunks_for(int head_dim) { return head_dim <= 128 ? 2 : 4; }
// (branch, sampled key) items a group loads at once: decode is bound by load latency (one query),
// prefill by the FMAs over its 32 sampled queries (fewer items: no register spills).
// With a decode cluster of 2 CTAs the paper's defaults give each group exactly 8 items (1024
// (branch, key) items over 128 groups): one batch of loads per iteration (two at head_dim 256).
constexpr int kDecodeItems = 8, kPrefillItems = 4;
// CTAs sharing one decode search (a thread-block cluster). Measured with 32 heads (bench_hip,
// docs/benchmarks.md): 2 beat 1, 4 and 8; clusters of 4 or 8 CTAs of 512 threads do not all fit
// the GPCs at once, and 2 CTAs an SM (64 registers) spill.
constexpr int kDecodeCluster = 2;
// Tensor-core prefill scoring: n-tiles of 8 items a warp loads at once at kChunks = 2 (measured: 4
// beat 2, and 1 at 2 CTAs an SM); 2 at head_dim 256 (the same registers).
// fp8 keys keep the same 4: their codes stay packed until their k-step pair is multiplied, which
// leaves the fp8 kernel without spills (bf16's: kBf16PairGroups below). Measured on H100 at 128K / 1M
// (docs/benchmarks.md): 8 n-tiles of codes loaded at once (twice the items in flight; spills)
// multiplied 4 or 2 at a time, and 4 multiplied 2 at a time (twice the epilogues) were slower:
// 19.8 / 21.1 / 20.2 ms vs 16.3 ms at 128K.
constexpr int kMmaTiles = 4;
// bf16 keys (twice fp8's registers a key) are loaded and multiplied in kBf16PairGroups groups of
// k-step pairs (all kTiles tiles at a time: pairs 0-1, then 2-3 at head_dim 128), so that half
// the keys are held at once: without it the kernel spilled (ptxas: 68 bytes stored, 224 loaded;
// ncu at 128K: 12 GB of local loads); with it none (the fp8 codes, half the bytes, fit at once).
// Measured on H100 (docs/benchmarks.md): bf16 estimate 1.13x at 128K, 1.02x at 1M (fewer key
// bytes in flight a warp where DRAM-bound).
constexpr int kBf16PairGroups = 2;
// Prefill CTA threads: kThreads / kPrefillCta CTAs share an SM (128 registers a thread either
// way), so one's selection barriers overlap another's key loads. Measured on H100 (bench_hip
// --cta, docs/benchmarks.md): 128 beat 256 and 512 at every length (1M: 420 / 444 / 511 ms).
constexpr int kPrefillCta = 128;

// 8 consecutive key elements as 8 bf16 (one uint4) for either scorer. bf16 keys: one 16-byte
// load. fp8 e4m3 keys (decode over the fp8 cache; prefill's FMA scorer over HipPrefillParams::k_fp8):
// one 8-byte load, widened exactly (every e4m3
// value is a bf16 value: 3 mantissa bits, exponents 2^-9..2^8). The layer's scale is left out:
// it multiplies every key of the layer, so the scores' order is that of the codes' (the search
// ranks, it never reports a score); the CPU twin scores the codes (e4m3_to_f32) the same way.
__device__ __forceinline__ uint4 load_key8(const __nv_bfloat16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint4 load_key8(const __nv_fp8_e4m3* p) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  uint4 out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // 4 codes -> 2 half2 (exact) -> float2 -> bf162 (exact)
    const uint2 h = fp8vec::e4m3x4_to_f16x4(i == 0 ? v.x : v.y);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const __half2 f16 = *reinterpret_cast<const __half2*>(k == 0 ? &h.x : &h.y);
      const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(f16));
      o[2 * i + k] = *reinterpret_cast<const uint32_t*>(&b);
    }
  }
  return out;
}
// The tensor-core scorer's fp8 keys: 8 codes (one uint2) as 8 f16 (one uint4, the bf16 load's
// element order), one cvt.rn.f16x2.e4m3x2 per 2 codes (fp8vec::e4m3x4_to_f16x4: no shifts),
// exact (e4m3 is a subset of f16: 3 mantissa bits, exponents 2^-9..2^8, all f16 normals). The
// queries are f16 too (load_q's power-of-2 scale).
__device__ __forceinline__ uint4 e4m3x8_to_f16(uint2 v) {
  const uint2 lo = fp8vec::e4m3x4_to_f16x4(v.x), hi = fp8vec::e4m3x4_to_f16x4(v.y);
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// The paper epilogue's max over the 8 lanes of a quad column (lanes t, t + 4, ..., t + 28: the
// query rows) of kTiles values at once, transposed: each exchange sends half of the values a lane
// still holds (kTiles 4: 2 + 1 + 1 shuffles instead of 12). Returns the max of value
// tile_of_lane(g), g = lane / 4; lanes g < kTiles hold every value once. fmaxf is exact, so the
// order of the maxes changes nothing.
template <int kTiles>
__device__ __forceinline__ int tile_of_lane(int g) {
  static_assert(kTiles == 2 || kTiles == 4, "kMmaTiles * 2 / kChunks");
  return kTiles == 4 ? 2 * (g & 1) + ((g >> 1) & 1) : g & 1;
}
template <int kTiles>
__device__ __forceinline__ float max_over_rows(const float (&v)[kTiles], int g) {
  const bool g0 = g & 1, g1 = g & 2;
  float c0, c1;  // kTiles 4: values 2 g0 and 2 g0 + 1, over lanes g and g ^ 1
  if constexpr (kTiles == 4) {
    c0 = fmaxf(g0 ? v[2] : v[0], __shfl_xor_sync(0xffffffffu, g0 ? v[0] : v[2], 4));
    c1 = fmaxf(g0 ? v[3] : v[1], __shfl_xor_sync(0xffffffffu, g0 ? v[1] : v[3], 4));
  } else {
    c0 = v[0], c1 = v[1];
  }
  const bool hi = kTiles == 4 ? g1 : g0;  // the bit whose exchange halves c0, c1
  float e = fmaxf(hi ? c1 : c0, __shfl_xor_sync(0xffffffffu, hi ? c0 : c1, kTiles == 4 ? 8 : 4));
  if constexpr (kTiles == 2) e = fmaxf(e, __shfl_xor_sync(0xffffffffu, e, 8));
  return fmaxf(e, __shfl_xor_sync(0xffffffffu, e, 16));
}

// Tensor-core scoring (prefill): every (branch, sampled key) item's best score over the sampled
// queries; when a branch's n_ks items lie in one n-tile (n_ks divides 8: the paper's b_k 2,
// b_sk 1 gives 2) the lanes holding them take their max and store the branch's rank key into
// `own` at once; otherwise the items go to s.item and the caller reduces them. Q [32 x d] (s.qb, bf16) times the items' keys [d x 8 per n-tile] with
// mma.m16n8k16 (bf16 in, fp32 accumulate), masked (causal, key_end, padding), max over the
// queries. Warp w takes n-tiles w, w + kWarps, ... kMmaTiles at a time. The head dimension is
// permuted the same way in A and B (a dot product does not depend on the order of its terms), so
// that each lane reads its B fragments of two k-steps as one 16-byte load of 8 consecutive
// elements: k-step 2p + j, half h, element e of lane t lives at 32p + 8t + 4j + 2h + e.
// The fp32 sums are not the CPU's FMA order: scores may differ in the last bits (near ties).
// kPaper: the common case, specialised (the epilogue is most of the instructions): 2 sampled keys
// a branch (a lane holds a whole branch's two items), all 32 query rows sampled, and every key of
// the search region at or before every sampled query (key_end - 1 <= the first query's position,
// so no causal mask: only keys past key_end are masked, from one ballot a tile). The other cases
// mask each (query, key) pair.
// fp8 keys (KeyRow gives e4m3 rows): f16 x f16 (e4m3x8_to_f16, load_q's scaled f16 queries),
// fp32 accumulation; the scores are the codes' times the CTA's power of 2 (the same order).
template <int kCta, int kChunks, bool kPaper, class KeyRow>
__device__ void score_mma(const HipEstimateConfig& cfg, const Shape& sh, const Smem& s, KeyRow key_row, int nb,
                          const Branch* brs, uint32_t* own) {
  using Elem = std::remove_cv_t<std::remove_pointer_t<decltype(key_row(0, false, 0))>>;
  constexpr bool kF16 = std::is_same_v<Elem, __nv_fp8_e4m3>;
  constexpr int kWarps = kCta / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4, d = sh.head_dim;
  const int n_ks = kPaper ? 2 : cfg.b_k / cfg.b_sk, n_items = nb * n_ks, n_tiles = (n_items + 7) / 8;
  const int n_pairs = (d + 31) / 32;  // the query copy's 32-element groups (qfrag_offset's P)
  const int32_t key_end = int32_t(sh.key_end);  // key positions fit int32 (hip_estimate_prefill checks n_kv)
  const bool in_tile = 8 % n_ks == 0;  // uniform
  int32_t qpos[4];  // this lane's query rows g, g + 8, g + 16, g + 24 (-1: padding, never valid)
#pragma unroll
  for (int r = 0; r < 4; ++r) qpos[r] = g + 8 * r < sh.n_qs ? int32_t(s.pos[g + 8 * r]) : -1;
  constexpr int kTiles = kMmaTiles * 2 / kChunks, kPairs = 2 * kChunks;  // k-step pairs: 32 elements each
  using Raw = std::conditional_t<kF16, uint2, uint4>;  // 8 elements: e4m3 codes or bf16
  // k-step pairs loaded (for all kTiles tiles) and multiplied at a time.
  constexpr int kGroupPairs = kF16 ? kPairs : kPairs / kBf16PairGroups;
  static_assert(kPairs % kBf16PairGroups == 0, "whole groups of k-step pairs");
  for (int tile0 = warp * kTiles; tile0 < n_tiles; tile0 += kWarps * kTiles) {
    int32_t key[kTiles];  // item g's key position (INT32_MAX: no key)
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      // (kPaper: branch (tile0 + j) * 4 + g / 2, one base address and immediate offsets)
      const int item = (tile0 + j) * 8 + g, bi = kPaper ? (tile0 + j) * 4 + (g >> 1) : item / n_ks;
      const int sk = kPaper ? g & 1 : item - bi * n_ks;
      // (kPaper: s.key0's padding holds the tiles past nb)
      const uint32_t kk = kPaper || item < n_items ? s.key0[bi] + uint32_t(sk * cfg.b_sk) : kNoKey;
      key[j] = kk < uint32_t(key_end) ? int32_t(kk) : INT32_MAX;
    }
    float acc[kTiles][2][4] = {};
#pragma unroll
    for (int p0 = 0; p0 < kPairs; p0 += kGroupPairs) {
      if (p0 > 0 && 32 * p0 >= d) break;
      Raw kb[kTiles][kGroupPairs];  // [tile][k-step pair p0 + i], d <= 64 * kChunks
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        // A padding item reads key key_end - 1 (always there: the region is not empty) without a
        // predicate: its columns are masked below.
        const bool ok = key[j] != INT32_MAX;
        const auto row = key_row(min(key[j], key_end - 1), ok, t);  // bf16 or e4m3 elements, from element 8t
#pragma unroll
        for (int i = 0; i < kGroupPairs; ++i)
          if (32 * (p0 + i) < d) {  // (pairs past d are never read)
            if constexpr (kF16) kb[j][i] = *reinterpret_cast<const uint2*>(row + 32 * (p0 + i));
            else kb[j][i] = load_key8(row + 32 * (p0 + i));
          }
      }
#pragma unroll
      for (int p = p0; p < p0 + kGroupPairs; ++p) {
        if (p > 0 && 32 * p >= d) break;  // head_dim >= 32 here (prefill_mma): the first k-steps always run
        uint4 kf[kTiles];                 // the tiles' B fragments of pair p (fp8: widened here, once)
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          if constexpr (kF16) kf[j] = e4m3x8_to_f16(kb[j][p - p0]);
          else kf[j] = kb[j][p - p0];
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {  // one m-tile's A fragments live at a time (registers)
          uint32_t a[2][4];               // [k-step of the pair]: the fragment-ordered copy's quads
          const uint4* qf = reinterpret_cast<const uint4*>(s.qb) + (mt * n_pairs + p) * 64 + lane;
          const uint4 q0 = qf[0], q1 = qf[32];
          a[0][0] = q0.x, a[0][1] = q0.y, a[0][2] = q0.z, a[0][3] = q0.w;
          a[1][0] = q1.x, a[1][1] = q1.y, a[1][2] = q1.z, a[1][3] = q1.w;
#pragma unroll
          for (int j = 0; j < kTiles; ++j) {
            if constexpr (kF16) {
              mma::mma_f16_16816(acc[j][mt], a[0], kf[j].x, kf[j].y);
              mma::mma_f16_16816(acc[j][mt], a[1], kf[j].z, kf[j].w);
            } else {
              mma::mma_bf16_16816(acc[j][mt], a[0], kf[j].x, kf[j].y);
              mma::mma_bf16_16816(acc[j][mt], a[1], kf[j].z, kf[j].w);
            }
          }
        }
      }
    }
    // C: acc[j][mt][0..1] = (query 16mt + g, items 2t, 2t + 1), [2..3] = query 16mt + g + 8.
    if constexpr (kPaper) {
      float b[kTiles];  // this lane's best of branch (tile0 + j) * 4 + t over its 4 query rows
      bool live = true;  // every item of the warp's tiles is a key of the region (most iterations)
#pragma unroll
      for (int j = 0; j < kTiles; ++j) live = live && key[j] != INT32_MAX;
      if (__all_sync(0xffffffffu, live)) {
#pragma unroll
        for (int j = 0; j < kTiles; ++j)
          b[j] = fmaxf(fmaxf(fmaxf(acc[j][0][0], acc[j][0][2]), fmaxf(acc[j][1][0], acc[j][1][2])),
                       fmaxf(fmaxf(acc[j][0][1], acc[j][0][3]), fmaxf(acc[j][1][1], acc[j][1][3])));
      } else {
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          // Lane 4i + t loaded item i: items 2t and 2t + 1 (this lane's columns) are ballot bits 8t, 8t + 4.
          const unsigned ok = __ballot_sync(0xffffffffu, key[j] != INT32_MAX) >> (8 * t);
          b[j] = -INFINITY;
          if (ok & 1u) b[j] = fmaxf(fmaxf(acc[j][0][0], acc[j][0][2]), fmaxf(acc[j][1][0], acc[j][1][2]));
          if (ok & 16u) b[j] = fmaxf(b[j], fmaxf(fmaxf(acc[j][0][1], acc[j][0][3]), fmaxf(acc[j][1][1], acc[j][1][3])));
        }
      }
      const int j = tile_of_lane<kTiles>(g);
      const float best = max_over_rows(b, g);
      const int bi = (tile0 + j) * 4 + t;
      if (g < kTiles && bi < nb) own[bi] = brs[bi].g > 0 ? rank_key(best) : kEmptyRank;
    } else {
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const int32_t k0 = __shfl_sync(0xffffffffu, key[j], 8 * t), k1 = __shfl_sync(0xffffffffu, key[j], 8 * t + 4);
        float b0 = -INFINITY, b1 = -INFINITY;
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // query row g + 8r: m-tile r / 2, half r % 2
          const float v0 = acc[j][r / 2][2 * (r % 2)], v1 = acc[j][r / 2][2 * (r % 2) + 1];
          if (k0 <= qpos[r]) b0 = fmaxf(b0, v0);
          if (k1 <= qpos[r]) b1 = fmaxf(b1, v1);
        }
#pragma unroll
        for (int off = 4; off < 32; off *= 2) {
          b0 = fmaxf(b0, __shfl_xor_sync(0xffffffffu, b0, off));
          b1 = fmaxf(b1, __shfl_xor_sync(0xffffffffu, b1, off));
        }
        const int item = (tile0 + j) * 8 + 2 * t;
        if (in_tile) {  // lanes t (g = 0) hold items 2t, 2t + 1: n_ks / 2 lanes a branch (one at n_ks <= 2)
          if (n_ks == 1) {
            if (g == 0 && item < n_items) own[item] = brs[item].g > 0 ? rank_key(b0) : kEmptyRank;
            if (g == 0 && item + 1 < n_items) own[item + 1] = brs[item + 1].g > 0 ? rank_key(b1) : kEmptyRank;
          } else {
            float b = fmaxf(b0, b1);
            for (int off = 1; 2 * off < n_ks; off *= 2) b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, off));
            const int bi = item / n_ks;
            if (g == 0 && item % n_ks == 0 && bi < nb) own[bi] = brs[bi].g > 0 ? rank_key(b) : kEmptyRank;
          }
        } else {
          if (g == 0 && item < n_items) s.item[item] = b0;
          if (g == 0 && item + 1 < n_items) s.item[item + 1] = b1;
        }
      }
    }
  }
  if (in_tile) return;
  __syncthreads();
  for (int bi = threadIdx.x; bi < nb; bi += kCta) {
    float best = -INFINITY;
    for (int sk = 0; sk < n_ks; ++sk) best = fmaxf(best, s.item[bi * n_ks + sk]);
    own[bi] = brs[bi].g > 0 ? rank_key(best) : kEmptyRank;
  }
}

// The bisection of hip_topk_blocks; leaves the selected blocks in s.chunks[0 .. count) (ascending)
// and returns count. KeyRow(j, ok, u) gives element 8u of key j's row of this head (u: the
// lane's first 8-element chunk, so that the address math is once an item); ok is false for padding
// items (the FMA scorer: j = 0, row never dereferenced; the tensor-core scorer: a row of the
// region read unpredicated, its scores masked).
// kCluster CTAs (a thread-block cluster, this CTA is `rank`) share one search: each scores a
// 1/kCluster share of the branches and stores their rank keys into every CTA's shared memory
// (distributed shared memory); after a cluster barrier each CTA runs the same selection on all of
// them (the same chunks everywhere, so every CTA takes the same number of iterations).
// Scores: group G (of kGroups * kCluster over the cluster) scores branches G, G + groups, ...,
// loading kItems sampled keys at a time; each lane loads its 8-element chunks of them once and
// runs every sampled query against them: lane l accumulates chunks l, l+8 (, l+16, l+24) with fp32 FMAs, then
// the xor-shuffle tree gives ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)): hip_topk.h's order. Every
// loop bound is uniform over the CTA (the shuffles are warp-wide).
// Barriers an iteration: one after the scores (a cluster barrier in decode), the selection's
// (keep_best), one at the end (which also says whether another iteration is needed).
template <int kCta, int kItems, int kCluster, bool kMma, int kChunks, class KeyRow>
__device__ int search(const HipEstimateConfig& cfg, const Shape& sh, const Smem& s, KeyRow key_row, PhaseClock& pc) {
  constexpr int kGroups = kCta / kLanes;
  const int tid = threadIdx.x, lane = tid % kLanes, d = sh.head_dim;
  int rank = 0;
  if constexpr (kCluster > 1) rank = int(cg::this_cluster().block_rank());
  const int n_groups = kGroups * kCluster, group = rank * kGroups + tid / kLanes;
  const int64_t m = cfg.budget_blocks();
  const int64_t n = sh.block_end > sh.block_begin ? sh.block_end - sh.block_begin : 0;
  if (n <= m) {
    for (int64_t i = tid; i < n; i += kCta) s.chunks[i] = {int32_t(sh.block_begin + i), 1};
    if constexpr (kCluster > 1) cg::this_cluster().sync();  // the caller's writes follow every CTA's reads
    else __syncthreads();
    return int(n);
  }
  // The first split (n > m: some chunk has two blocks or more, so at least one iteration runs):
  // chunk c = [lo, hi) of the region's blocks gives branches 2c (its first half) and 2c + 1.
  for (int64_t c = tid; c < m; c += kCta) {
    const int64_t lo = n * c / m, hi = n * (c + 1) / m;
    const int32_t a = int32_t(sh.block_begin + lo), g = int32_t(hi - lo), h = g / 2;
    s.br[0][2 * c] = {a, h};
    s.br[0][2 * c + 1] = {a + h, g - h};
    if (s.key0) {
      s.key0[2 * c] = first_key(a, h, cfg.b_k, cfg.b_sk);
      s.key0[2 * c + 1] = first_key(a + h, g - h, cfg.b_k, cfg.b_sk);
    }
  }
  if (s.key0)
    for (int64_t i = 2 * m + tid; i < key0_slots(m); i += kCta) s.key0[i] = kNoKey;
  for (int i = tid; i < kPasses * kBins; i += kCta) s.hist[i] = 0;
  __syncthreads();
  const int n_ks = cfg.b_k / cfg.b_sk;
  const int nb = int(2 * m);
  // score_mma's specialised case (uniform): 2 sampled keys a branch, 32 sampled queries, no causal
  // mask inside the search region (its keys end before the first sampled query).
  const bool paper = n_ks == 2 && sh.n_qs == kMmaQueries && sh.key_end - 1 <= s.pos[0];
  pc.mark(kPhProlog);
  for (int iter = 0;; ++iter) {
    // (selects, not indexing: no local-memory copy of s)
    uint32_t* const own = iter & 1 ? s.key[1] : s.key[0];
    const Branch* const brs = iter & 1 ? s.br[1] : s.br[0];
    Branch* const next = iter & 1 ? s.br[0] : s.br[1];
    if constexpr (kMma) {
      if (paper) score_mma<kCta, kChunks, true>(cfg, sh, s, key_row, nb, brs, own);
      else score_mma<kCta, kChunks, false>(cfg, sh, s, key_row, nb, brs, own);
    } else {
    // Score every non-empty branch by its middle block. Group G owns the branches
      // G, G + n_groups, ... (slots 0, 1, ...); its (slot, sampled key) items are loaded kItems at a
      // time, so that many independent key loads are in flight per lane.
      // Item indices are 32-bit (a 64-bit division by the runtime n_ks costs ~100 instructions per
      // item: the loop's main cost); key positions fit int32 (the KV cache indexes keys as int32).
      const int slots = (nb + n_groups - 1) / n_groups, n_items = slots * n_ks;
      int cur_slot = -1;  // the slot whose best score `cur_best` is being built (items are in slot order)
      float cur_best = -INFINITY;
      auto flush = [&](int slot, float best) {
        const int bi = slot * n_groups + group;
        if (slot < 0 || lane != 0 || bi >= nb) return;
        const uint32_t u = brs[bi].g > 0 ? rank_key(best) : kEmptyRank;
        if constexpr (kCluster > 1) {
#pragma unroll
          for (int c = 0; c < kCluster; ++c) cg::this_cluster().map_shared_rank(own, c)[bi] = u;
        } else {
          own[bi] = u;
        }
      };
      for (int base = 0; base < n_items; base += kItems) {
        uint4 raw[kItems][kChunks];
        int32_t key[kItems];
        bool kok[kItems];
        float ibest[kItems];
#pragma unroll
        for (int x = 0; x < kItems; ++x) {
          const int item = base + x, slot = item / n_ks, sk = item - slot * n_ks, bi = slot * n_groups + group;
          const Branch br = item < n_items && bi < nb ? brs[bi] : Branch{0, 0};
          key[x] = (br.a + br.g / 2) * cfg.b_k + sk * cfg.b_sk + cfg.b_sk - 1;
          kok[x] = br.g > 0 && key[x] < sh.key_end;
          ibest[x] = -INFINITY;
          const auto row = key_row(kok[x] ? key[x] : 0, kok[x], lane);  // bf16 or e4m3 elements, from 8 lane
#pragma unroll
          for (int cc = 0; cc < kChunks; ++cc) {
            const int c = lane + kLanes * cc;
            raw[x][cc] = kok[x] && c * 8 < d ? load_key8(row + 8 * kLanes * cc) : make_uint4(0, 0, 0, 0);
          }
        }
        for (int i = 0; i < sh.n_qs; ++i) {
          const float* q = s.q + size_t(i) * d;
          float acc[kItems];
#pragma unroll
          for (int x = 0; x < kItems; ++x) acc[x] = 0.f;
#pragma unroll
          for (int cc = 0; cc < kChunks; ++cc) {
            const int c = lane + kLanes * cc;
            if (c * 8 < d) {
#pragma unroll
              for (int e2 = 0; e2 < 4; ++e2) {
                const float q0 = q[8 * c + 2 * e2], q1 = q[8 * c + 2 * e2 + 1];
#pragma unroll
                for (int x = 0; x < kItems; ++x) {
                  const float2 kf = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&raw[x][cc])[e2]);
                  acc[x] = fmaf(q0, kf.x, acc[x]);
                  acc[x] = fmaf(q1, kf.y, acc[x]);
                }
              }
            }
          }
#pragma unroll
          for (int x = 0; x < kItems; ++x) {
            acc[x] += __shfl_xor_sync(0xffffffffu, acc[x], 4);
            acc[x] += __shfl_xor_sync(0xffffffffu, acc[x], 2);
            acc[x] += __shfl_xor_sync(0xffffffffu, acc[x], 1);
            if (kok[x] && key[x] <= s.pos[i] && acc[x] > ibest[x]) ibest[x] = acc[x];
          }
        }
#pragma unroll
        for (int x = 0; x < kItems; ++x) {
          const int item = base + x, slot = item / n_ks;
          if (item >= n_items) break;
          if (slot != cur_slot) {
            flush(cur_slot, cur_best);
            cur_slot = slot;
            cur_best = -INFINITY;
          }
          if (ibest[x] > cur_best) cur_best = ibest[x];
        }
      }
      flush(cur_slot, cur_best);
    }
    pc.mark(kPhScore);
    // Every CTA's keys are in place (the cluster barrier orders the remote stores before the reads).
    if constexpr (kCluster > 1) cg::this_cluster().sync();
    else __syncthreads();
    pc.mark(kPhScoreWait);
    bool kept_wide;  // (decode: a call, prefill: inlined)
    const KeepShape ks{m, cfg.b_k, cfg.b_sk};
    if constexpr (kCluster > 1) kept_wide = keep_best_call<kCta>(ks, nb, s, own, brs, next, pc);
    else kept_wide = keep_best<kCta>(ks, nb, s, own, brs, next, pc);
    const bool more = __syncthreads_or(kept_wide);
    pc.mark(kPhEndWait);
    pc.iteration();
    if (!more) break;
  }
  return int(m);
}

struct Region {
  int64_t key_end, block_begin, block_end;
};
__device__ Region region_of(const HipEstimateConfig& cfg, int64_t first) {
  Region r;
  r.key_end = first - cfg.window + 1 > cfg.sinks ? first - cfg.window + 1 : cfg.sinks;
  r.block_begin = cfg.sinks / cfg.b_k;
  const int64_t e = (r.key_end + cfg.b_k - 1) / cfg.b_k;
  r.block_end = r.key_end <= cfg.sinks ? r.block_begin : (e > r.block_begin ? e : r.block_begin);
  return r;
}

// Writes one row's R ranges: sinks, the count selected blocks, empty pads, the window.
template <int kCta>
__device__ void write_ranges(const HipEstimateConfig& cfg, const Smem& s, int count, int64_t key_end, int64_t sink_end,
                             int64_t win_end, int32_t* ranges) {
  const int64_t m = cfg.budget_blocks();
  for (int64_t i = threadIdx.x; i < m + 2; i += kCta) {
    int32_t a, b;
    if (i == 0) a = 0, b = int32_t(sink_end);
    else if (i <= count) a = s.chunks[i - 1].a * cfg.b_k, b = a + cfg.b_k;
    else if (i <= m) a = b = int32_t(key_end);
    else a = int32_t(key_end), b = int32_t(win_end);
    ranges[2 * i] = a;
    ranges[2 * i + 1] = b;
  }
}

// kMma: the bf16 fragment-ordered copy (s.qb, padding rows zero), else the fp32 copy (s.q).
// kMma reads 8 elements (16 bytes, head_dim a multiple of 32 there) a load and stores them as 4
// pairs (qfrag_offset keeps elements 2i and 2i + 1 adjacent): ncu at 1M put 4.6% of the stall
// samples on the element-wise copy's stores waiting for their 2-byte loads.
// kF16 (fp8 keys on tensor cores): the copy is f16, every element times 2^s, one s for the CTA:
// the largest element's bf16 exponent field E gives s = 142 - E (at most 127), so the largest
// lands in [2^15, 65280] (f16's largest finite is 65504) and the scores are the bf16 queries'
// times 2^s, exactly, for every element within 2^-32 of it (f16's 11 significant bits hold
// bf16's 8 down to its subnormal grid 2^-24, scaled exponent -17). Smaller elements round to
// that grid: a score moves by at most d * 2^-25 * max|k| in scaled units, under 2^-40 of the
// largest term (the fp8 keys' own quantization moves scores by up to ~2^-4 relative). Scaling
// by a power of 2 keeps the order the search ranks by.
template <int kCta, bool kMma, bool kF16 = false>
__device__ void load_q(const Smem& s, const __nv_bfloat16* q, int64_t q_row_stride, int n_qs, int b_sq, int rows,
                       int64_t pos0, int d) {
  if constexpr (kMma) {
    const int d8 = d / 8;
    float scale = 1.f;
    if constexpr (kF16) {
      uint32_t e_max = 0;  // the largest bf16 exponent field of the sampled rows
      for (int idx = threadIdx.x; idx < n_qs * d8; idx += kCta) {
        const int i = idx / d8, e = (idx - i * d8) * 8;
        const uint4 v = *reinterpret_cast<const uint4*>(q + min(i * b_sq + b_sq - 1, rows - 1) * q_row_stride + e);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) e_max = max(e_max, max((w[k] >> 7) & 0xffu, (w[k] >> 23) & 0xffu));
      }
      e_max = __reduce_max_sync(0xffffffffu, e_max);
      if (threadIdx.x == 0) s.sel[0] = 0;  // (the selection's state, free until the search)
      __syncthreads();
      if (threadIdx.x % 32 == 0) atomicMax(&s.sel[0], int(e_max));
      __syncthreads();
      const int sh = min(142 - s.sel[0], 127);  // in [-113, 127]: 2^sh is a normal fp32
      scale = __int_as_float((sh + 127) << 23);
    }
    for (int idx = threadIdx.x; idx < kMmaQueries * d8; idx += kCta) {
      const int i = idx / d8, e = (idx - i * d8) * 8;
      uint4 v = make_uint4(0, 0, 0, 0);  // padding query rows of the tensor-core tile: zeros (masked anyway)
      if (i < n_qs) {
        const int row = min(i * b_sq + b_sq - 1, rows - 1);
        v = *reinterpret_cast<const uint4*>(q + row * q_row_stride + e);
        if (e == 0) s.pos[i] = pos0 + row;
      }
      uint32_t w[4] = {v.x, v.y, v.z, v.w};  // elements e + 2k, e + 2k + 1
      if constexpr (kF16) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[k]));
          const __half2 h = __floats2half2_rn(f.x * scale, f.y * scale);
          w[k] = *reinterpret_cast<const uint32_t*>(&h);
        }
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) *reinterpret_cast<uint32_t*>(s.qb + qfrag_offset(i, e + 2 * k, d)) = w[k];
    }
  } else {
    for (int idx = threadIdx.x; idx < n_qs * d; idx += kCta) {
      const int i = idx / d, e = idx % d;
      const int row = min(i * b_sq + b_sq - 1, rows - 1);
      s.q[idx] = __bfloat162float(q[row * q_row_stride + e]);
      if (e == 0) s.pos[i] = pos0 + row;
    }
  }
  __syncthreads();
}

// Key: the scored keys' element type, __nv_bfloat16 (p.k) or __nv_fp8_e4m3 (p.k_fp8).
// kMma: tensor-core scores (else the fp32 FMA scorer: more than 32 sampled queries, or head_dim
// not a multiple of 32). kChunks: chunks_for(head_dim). kCta threads, kThreads / kCta CTAs an SM
// (128 registers a thread, as one CTA of kThreads).
template <class Key, bool kMma, int kChunks, int kCta>
__global__ void __launch_bounds__(kCta, kThreads / kCta) prefill_kernel(HipPrefillParams p) {
  extern __shared__ __align__(16) char smem[];
  PhaseClock pc;
  pc.begin();
  const HipEstimateConfig& cfg = p.cfg;
  // Launch order (grid x: the query heads of one KV head, y: query blocks, z: KV heads): the
  // heads of a group side by side, then the query blocks, then the KV heads. Co-resident CTAs then read one KV head's keys (as before), and the
  // heads of a group score the same rows in the first iteration (the same region, the same chunks)
  // and where their kept chunks agree later, within a short time: L2 serves the repeats. At 1M a
  // KV head's keys (256 MiB) are past L2 and the search was bound by DRAM (ncu: 2.6 TB/s, L2 hit
  // rate 26%); with blocks of one head side by side the 4 heads' reads were ~n_qblk CTAs apart.
  // (Grid indices, not a decomposed 1-D index: no extra values live across the search.)
  const int h = int(blockIdx.z * gridDim.x + blockIdx.x);
  const int64_t b = blockIdx.y, n_qblk = gridDim.y;
  const int64_t row0 = b * cfg.b_q;
  const int rows = int(p.n_q - row0 < cfg.b_q ? p.n_q - row0 : cfg.b_q);
  const int n_qs = (rows + cfg.b_sq - 1) / cfg.b_sq;
  const int n_qs_max = (cfg.b_q + cfg.b_sq - 1) / cfg.b_sq;
  const Smem s = carve(smem, {n_qs_max, p.head_dim, cfg.budget_blocks(), cfg.b_k / cfg.b_sk, kMma});
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + (row0 * p.n_head + h) * p.head_dim;
  load_q<kCta, kMma, kMma && std::is_same_v<Key, __nv_fp8_e4m3>>(s, q, int64_t(p.n_head) * p.head_dim, n_qs, cfg.b_sq,
                                                                 rows, p.q_pos0 + row0, p.head_dim);
  const Region r = region_of(cfg, p.q_pos0 + row0);
  const Shape sh{n_qs, p.head_dim, r.block_begin, r.block_end, r.key_end < p.n_kv ? r.key_end : p.n_kv};
  const void* keys = std::is_same_v<Key, __nv_fp8_e4m3> ? p.k_fp8 : p.k;
  // Key j's chunk u of this head: a 32-bit offset from the first key in units of kKeyUnit
  // elements (rows and heads start at multiples of head_dim, a multiple of 8): two IMADs and one
  // IMAD.WIDE an item instead of 64-bit multiplies and adds. hip_estimate_prefill checks that every
  // offset fits.
  const uint32_t unit_stride = uint32_t(p.n_kv_head * (p.head_dim / kKeyUnit));
  const uint32_t head_units = uint32_t(blockIdx.z * (p.head_dim / kKeyUnit));
  const int count = search<kCta, kPrefillItems * 2 / kChunks, 1, kMma, kChunks>(
      cfg, sh, s, [=](int64_t j, bool, int u) {
        return static_cast<const Key*>(keys) + size_t(uint32_t(j) * unit_stride + head_units + uint32_t(u)) * kKeyUnit;
      }, pc);
  const int64_t e = int64_t(h) * n_qblk + b, m = cfg.budget_blocks();
  if (p.blocks)
    for (int i = threadIdx.x; i < count; i += kCta) p.blocks[e * m + i] = s.chunks[i].a;
  if (p.n_blocks && threadIdx.x == 0) p.n_blocks[e] = count;
  if (p.ranges) {
    const int64_t end = min(p.q_pos0 + row0 + rows, p.n_kv), R = cfg.ranges_per_row();
    write_ranges<kCta>(cfg, s, count, r.key_end, min(cfg.sinks, end), end, p.ranges + 2 * e * R);
    if (threadIdx.x == 0) {
      p.range_ptr[e + 1] = (e + 1) * R;
      p.col_ptr[e + 1] = 0;
      if (e == 0) p.range_ptr[0] = p.col_ptr[0] = 0;
    }
  }
  pc.mark(kPhEpilog);
  pc.flush();
}

// Key: the cache's element type, __nv_bfloat16 or __nv_fp8_e4m3 (load_key8 widens the codes).
// kOffload: keys are read through p.offload's GPU cache (hits from the bank, misses zero-copy
// from the host pools of p.kv, recorded for kv_offload_update); the same values either way, so
// the selected blocks are the same.
// kCluster CTAs (one thread-block cluster, consecutive blockIdx.x) share each head's search;
// the first (rank 0) writes the outputs. kChunks: chunks_for(head_dim).
template <class Key, bool kOffload, int kCluster, int kChunks>
__global__ void __launch_bounds__(kThreads) decode_kernel(HipDecodeParams p) {
  extern __shared__ __align__(16) char smem[];
  const HipEstimateConfig& cfg = p.cfg;
  const int h = blockIdx.x / kCluster, seq = blockIdx.y;
  const bool writer = blockIdx.x % kCluster == 0;
  const int64_t r = int64_t(seq) * p.n_head + h, R = cfg.ranges_per_row();
  if (writer && threadIdx.x == 0) {
    p.range_ptr[r + 1] = int32_t((r + 1) * R);
    p.col_ptr[r + 1] = 0;
    if (r == 0) p.range_ptr[0] = p.col_ptr[0] = 0;
  }
  const int64_t len = p.kv.seq_lens[seq], pos = len - 1;
  // Every CTA of the cluster reads refresh_pos before the writer updates it: the update follows
  // the search's last cluster barrier.
  const int64_t last = p.refresh_pos[r];
  if (pos < 0 || !(last < 0 || pos < last || pos - last >= p.refresh)) return;  // cached step
  const Smem s = carve(smem, {1, p.kv.head_dim, cfg.budget_blocks(), cfg.b_k / cfg.b_sk, false});
  const int d = p.kv.head_dim;
  load_q<kThreads, false>(s, static_cast<const __nv_bfloat16*>(p.q) + r * d, 0, 1, 1, 1, pos, d);
  const Region rg = region_of(cfg, pos);
  const Shape sh{1, d, rg.block_begin, rg.block_end, rg.key_end < len ? rg.key_end : len};
  const auto* pool = static_cast<const Key*>(p.kv.k_pool);
  const int32_t* table = p.kv.block_table + int64_t(seq) * p.kv.max_pages_per_seq;
  const int page = p.kv.page_size, n_kv_head = p.kv.n_kv_head, hk = h / (p.n_head / n_kv_head);
  auto host_row = [=](int64_t j) {
    const uint32_t u = uint32_t(j), pg = u / uint32_t(page);  // 32-bit: key positions fit int32
    const int64_t row = int64_t(table[pg]) * page + (u - pg * uint32_t(page));
    return pool + (row * n_kv_head + hk) * d;
  };
  int count;
  PhaseClock pc;  // (prefill's bench-only phase clocks; unused here)
  if constexpr (kOffload) {
    const KvOffloadCache& c = p.offload;
    const auto* bank = static_cast<const Key*>(c.bank_k);
    const bool counter = threadIdx.x % kLanes == 0;  // one thread of each 8 reading a key counts it
    unsigned reads = 0, misses = 0;
    const auto key_row = [&](int64_t j, bool ok, int u) {
      const int32_t t = int32_t(j), slot = offload_lookup(c, hk, t, ok && counter);
      reads += ok && counter;
      misses += ok && counter && slot < 0;
      if (slot < 0) return host_row(j) + 8 * u;
      return bank + ((int64_t(slot) * c.line_tokens + t % c.line_tokens) * n_kv_head + hk) * d + 8 * u;
    };
    count = search<kThreads, kDecodeItems * 2 / kChunks, kCluster, false, kChunks>(cfg, sh, s, key_row, pc);
    offload_add_stats(c, reads, misses);
  } else {
    count = search<kThreads, kDecodeItems * 2 / kChunks, kCluster, false, kChunks>(
        cfg, sh, s, [=](int64_t j, bool, int u) { return host_row(j) + 8 * u; }, pc);
  }
  if (!writer) return;
  const int64_t m = cfg.budget_blocks();
  if (p.blocks)
    for (int i = threadIdx.x; i < m; i += kThreads) p.blocks[r * m + i] = i < count ? s.chunks[i].a : -1;
  write_ranges<kThreads>(cfg, s, count, rg.key_end, cfg.sinks, kOpenEnd, p.ranges + 2 * r * R);
  if (threadIdx.x == 0) p.refresh_pos[r] = int32_t(pos);
}

void check_cfg(const HipEstimateConfig& c, int head_dim) {
  LC_REQUIRE(c.k >= 1 && c.b_q >= 1 && c.b_sq >= 1 && c.b_k >= 1 && c.b_sk >= 1 && c.k % c.b_k == 0 &&
                 c.b_k % c.b_sk == 0 && c.b_q % c.b_sq == 0,
             "internal: hip estimate with k=%lld b_q=%d b_sq=%d b_k=%d b_sk=%d", (long long)c.k, c.b_q, c.b_sq, c.b_k,
             c.b_sk);
  static_assert(2 * kHipMaxBudgetBlocks == 32 * kScanSlots, "the selection's ballot counts");
  LC_REQUIRE(c.budget_blocks() <= kHipMaxBudgetBlocks, "hip: k/b_k = %lld blocks is over the GPU estimator's %lld",
             (long long)c.budget_blocks(), (long long)kHipMaxBudgetBlocks);
  LC_REQUIRE(head_dim > 0 && head_dim % 8 == 0 && head_dim <= kMaxHeadDim,
             "hip: the GPU estimator needs head_dim a multiple of 8 up to %d, got %d", kMaxHeadDim, head_dim);
  static_assert(kMaxHeadDim == 8 * kLanes * 4, "chunks_for: 4 chunks of 8 elements a lane at most");
}

// Raises the kernel's dynamic shared memory limit once per size (outside any graph capture: the
// first eager call of a step does it, as every kernel's one-time setup; kernels/cuda/runtime.h).
void set_smem(const void* kernel, size_t bytes, size_t& done) {
  if (bytes <= done) return;
  int dev = 0, limit = 0;
  LC_CUDA_CHECK(cudaGetDevice(&dev), "hip estimate device");
  LC_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "hip estimate");
  LC_REQUIRE(bytes <= size_t(limit), "hip: k/b_k and b_q/b_sq need %zu bytes of shared memory per CTA, over the device's %d",
             bytes, limit);
  LC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
                "hip estimate smem %zu bytes", bytes);
  done = bytes;
}

// What set_smem has allowed so far, per kernel: prefill [fp8][mma][chunks 4][CTA 128/256/512],
// decode [chunks 4][fp8 + 2 offload].
size_t g_prefill_smem[2][2][2][3] = {}, g_decode_smem[2][4] = {};

// Launches a decode kernel as clusters of kDecodeCluster CTAs (graph-capturable).
void launch_decode(void (*kernel)(HipDecodeParams), size_t bytes, size_t& done, Stream s, const HipDecodeParams& p) {
  set_smem(reinterpret_cast<const void*>(kernel), bytes, done);
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(unsigned(p.n_head * kDecodeCluster), unsigned(p.kv.n_seq));
  lc.blockDim = dim3(kThreads);
  lc.dynamicSmemBytes = bytes;
  lc.stream = static_cast<cudaStream_t>(s);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kDecodeCluster;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  LC_CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel, p), "hip_estimate_decode launch");
}

template <class Key, bool kMma, int kCta>
void launch_prefill_cta(const HipPrefillParams& p, size_t bytes, dim3 grid, cudaStream_t st) {
  const bool wide = chunks_for(p.head_dim) == 4;
  const auto kernel = wide ? prefill_kernel<Key, kMma, 4, kCta> : prefill_kernel<Key, kMma, 2, kCta>;
  set_smem(reinterpret_cast<const void*>(kernel), bytes,
           g_prefill_smem[std::is_same_v<Key, __nv_fp8_e4m3>][kMma][wide][kCta == 128 ? 0 : kCta == 256 ? 1 : 2]);
  kernel<<<grid, kCta, bytes, st>>>(p);
}

// One prefill kernel (key type x scorer x chunks x CTA size), picked at run time. CTA sizes other
// than kPrefillCta are built for the bf16 tensor-core scorer only (the engine's path).
template <class Key, bool kMma>
void launch_prefill(const HipPrefillParams& p, size_t bytes, dim3 grid, cudaStream_t st) {
  const int cta = p.cta_threads ? p.cta_threads : kPrefillCta;
  if constexpr (std::is_same_v<Key, __nv_bfloat16> && kMma) {
    if (cta == 128) return launch_prefill_cta<Key, kMma, 128>(p, bytes, grid, st);
    if (cta == 256) return launch_prefill_cta<Key, kMma, 256>(p, bytes, grid, st);
    if (cta == 512) return launch_prefill_cta<Key, kMma, 512>(p, bytes, grid, st);
  }
  LC_REQUIRE(cta == kPrefillCta, "internal: hip prefill CTA of %d threads (built: %d; 128/256/512 for bf16 keys on tensor cores)",
             cta, kPrefillCta);
  launch_prefill_cta<Key, kMma, kPrefillCta>(p, bytes, grid, st);
}

// The decode kernel for the cache's key type, offload or not, at kChunks.
template <int kChunks>
void launch_decode_kernel(const HipDecodeParams& p, bool fp8, bool offload, size_t bytes, Stream s) {
  size_t& done = g_decode_smem[kChunks == 4][int(fp8) + 2 * int(offload)];
  if (offload) {
    if (fp8) launch_decode(decode_kernel<__nv_fp8_e4m3, true, kDecodeCluster, kChunks>, bytes, done, s, p);
    else launch_decode(decode_kernel<__nv_bfloat16, true, kDecodeCluster, kChunks>, bytes, done, s, p);
  } else {
    if (fp8) launch_decode(decode_kernel<__nv_fp8_e4m3, false, kDecodeCluster, kChunks>, bytes, done, s, p);
    else launch_decode(decode_kernel<__nv_bfloat16, false, kDecodeCluster, kChunks>, bytes, done, s, p);
  }
}

}  // namespace

size_t hip_estimate_smem_bytes(const HipEstimateConfig& c, int head_dim) {
  const int n_qs = (c.b_q + c.b_sq - 1) / c.b_sq;
  return smem_bytes({n_qs, head_dim, c.budget_blocks(), c.b_k / c.b_sk, prefill_mma(n_qs, head_dim)});
}

void hip_estimate_check(const HipEstimateConfig& c, int head_dim) {
  check_cfg(c, head_dim);
  const size_t bytes = hip_estimate_smem_bytes(c, head_dim);
  LC_REQUIRE(bytes <= kHipMaxSmemBytes,
             "hip: k/b_k = %lld blocks, %d sampled keys a block and %d sampled queries at head_dim %d need %zu bytes of "
             "GPU shared memory per CTA, over the %zu a Hopper CTA can have: lower k, b_k/b_sk or b_q/b_sq",
             (long long)c.budget_blocks(), c.b_k / c.b_sk, (c.b_q + c.b_sq - 1) / c.b_sq, head_dim, bytes,
             kHipMaxSmemBytes);
}

void hip_estimate_prefill(const HipPrefillParams& p, Stream s) {
  check_cfg(p.cfg, p.head_dim);
  LC_REQUIRE(p.n_kv <= INT32_MAX && p.n_kv * p.n_kv_head * (p.head_dim / kKeyUnit) <= int64_t(UINT32_MAX) + 1,
             "hip: the GPU prefill estimator addresses keys with 32-bit offsets: %lld keys x %d KV heads x head_dim %d "
             "is over 2^35 key elements (or 2^31 keys) a layer",
             (long long)p.n_kv, p.n_kv_head, p.head_dim);
  LC_REQUIRE(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.k) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(p.k_fp8) % 16 == 0,
             "internal: hip prefill estimate reads q and k in 16-byte pieces (unaligned tensors)");
  LC_REQUIRE(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0, "hip: %d query heads are not groups of the %d KV heads",
             p.n_head, p.n_kv_head);
  if (p.n_q <= 0) return;
  const int64_t n_qblk = (p.n_q + p.cfg.b_q - 1) / p.cfg.b_q;
  LC_REQUIRE(n_qblk <= kMaxGridY, "hip: a prefill chunk of %lld queries is over the GPU estimator's %lld (blocks of %d)",
             (long long)p.n_q, (long long)kMaxGridY * p.cfg.b_q, p.cfg.b_q);
  const size_t bytes = hip_estimate_smem_bytes(p.cfg, p.head_dim);
  const dim3 grid(unsigned(p.n_head / p.n_kv_head), unsigned(n_qblk), unsigned(p.n_kv_head));  // prefill_kernel's order
  const auto st = static_cast<cudaStream_t>(s);
  const bool mma = prefill_mma((p.cfg.b_q + p.cfg.b_sq - 1) / p.cfg.b_sq, p.head_dim);
  if (p.k_fp8) {
    if (mma) launch_prefill<__nv_fp8_e4m3, true>(p, bytes, grid, st);
    else launch_prefill<__nv_fp8_e4m3, false>(p, bytes, grid, st);
  } else {
    if (mma) launch_prefill<__nv_bfloat16, true>(p, bytes, grid, st);
    else launch_prefill<__nv_bfloat16, false>(p, bytes, grid, st);
  }
  LC_LAUNCH_CHECK("hip_estimate_prefill n_q=%lld n_kv=%lld heads=%d", (long long)p.n_q, (long long)p.n_kv, p.n_head);
}

#ifdef LONGCTX_HIP_PHASE_CLOCKS
void hip_estimate_phase_clocks(uint64_t out[kHipPhaseSlots]) {
  static_assert(kHipPhaseSlots == kPhCount + 1, "hip_estimate.h's phase slots");
  LC_CUDA_CHECK(cudaMemcpyFromSymbol(out, g_hip_phase, sizeof(uint64_t) * kHipPhaseSlots), "hip phase clocks");
  const uint64_t zero[kHipPhaseSlots] = {};
  LC_CUDA_CHECK(cudaMemcpyToSymbol(g_hip_phase, zero, sizeof zero), "hip phase clocks");
}
#endif

void hip_estimate_decode(const HipDecodeParams& p, Stream s) {
  check_cfg(p.cfg, p.kv.head_dim);
  LC_REQUIRE(p.kv.elem == KvElem::bf16 || p.kv.elem == KvElem::fp8_e4m3,
             "hip: GPU decode estimation reads bf16 or fp8 e4m3 keys (KV element %d)", int(p.kv.elem));
  if (p.kv.n_seq <= 0) return;
  const bool fp8 = p.kv.elem == KvElem::fp8_e4m3;
  const size_t bytes = smem_bytes({1, p.kv.head_dim, p.cfg.budget_blocks(), p.cfg.b_k / p.cfg.b_sk, false});
  const bool offload = p.offload.enabled();
  if (offload)
    LC_REQUIRE(p.kv.n_seq == 1 && p.offload.n_kv_head == p.kv.n_kv_head && p.offload.bank_k,
               "hip: offloaded decode estimation serves one sequence through a keys cache of the view's %d KV heads",
               p.kv.n_kv_head);
  if (chunks_for(p.kv.head_dim) == 4) launch_decode_kernel<4>(p, fp8, offload, bytes, s);
  else launch_decode_kernel<2>(p, fp8, offload, bytes, s);
  LC_LAUNCH_CHECK("hip_estimate_decode n_seq=%d heads=%d", p.kv.n_seq, p.n_head);
}

}  // namespace longctx::cuda
