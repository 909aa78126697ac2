// sparse_attention_sm90.cu (cuda): sparse (block / vertical-slash) prefill attention, Hopper.
//
// What: sparse_attention.h, head_dim 128 and 256. The GPU twin of sparse/sparse_attention.cpp;
// tested against an fp64 oracle with the same boolean mask in tests/cuda/test_sparse_attention.cpp
// (the row window: tests/cuda/test_sparse_window.cpp),
// timed by bench/bench_sparse.cu and bench/bench_hip.cu (scripts/gpu-sparse.sh, at d 256
// scripts/gpu-sparse-d256.sh, fp8 K/V tiles scripts/gpu-sparse-fp8.sh: run them on the device
// machine). K/V in bf16, or in fp8 e4m3 with a scale each (widened to f16 in shared memory).
//
// How (structure of attention_prefill_sm90.cu, the FA3-style dense kernel, adapted):
// - Plan kernel (sparse_plan.h, shared with the generic kernel): each block's lists made
//   canonical in the workspace (disjoint merged ranges clipped to the causal frontier; columns
//   causal, unique and outside every range), at the same CSR offsets as the input.
// - Main kernel (d 128): CTA = 2 consumer warpgroups + 1 producer warpgroup (384 threads). Each
//   consumer warpgroup owns one task (query head, 64-row query block) with its own Q tile and its own
//   3-stage ring of 64-key K/V tiles; producer warps w and w + 2 feed consumer w (both walk the
//   index; w writes the headers and issues the TMA copies, each copies half of every gathered
//   tile; at d 256 all four producer warps feed the one consumer). A range tile (64 keys
//   from any start position: ranges need no alignment) is two TMA bulk tensor copies per
//   operand; a column tile is gathered row by row with cp.async into the same 128-byte-swizzled
//   layout (then fence.proxy.async, so the tensor cores see the writes). A range's tail of at
//   most kSparsePackMax keys (after its whole tiles) goes into a packed tile instead: 16-key
//   segments of several ranges' tails, one TMA box of 16 rows each, so a vertical-slash row of
//   many short ranges visits few masked slots. The producer writes a tile header next to the
//   stage (range tiles: first key and count; packed tiles: each segment's first key and count;
//   column tiles: the key of each slot, -1 = empty; flags "needs mask", "range", "packed", "end"),
//   so consumers never parse the index: one online softmax over range and column tiles alike.
//   Tails of at most SparseAttnParams::tail_gather_max keys (HiP's 2-key blocks: a 16-key
//   segment would carry 2 valid keys) join the columns in gathered tiles, 64 keys each, filled
//   in order (range tails, then columns) and copied with cp.async. Each lane's copies arrive on
//   the stage's full barrier as they land (cp.async.mbarrier.arrive), so the producer never
//   waits for a gathered tile: every free stage of the ring can hold one in flight. A batch of
//   32 ranges' gathered tails (HiP's rows) are appended with all lanes at once (a warp prefix sum
//   and a binary search per slot), not range by range; only the batch's longer ranges go one by one. The consumer fences the async
//   proxy before its wgmmas read a gathered tile (kHdrFlagGather).
// - Row window (SparseAttnParams::window > 0, Self-Extend's near part; the SparseGeo::kWindow
//   variant, bf16 K/V, 3 stages): the plan already dropped each block's keys below its first
//   row's bound (<= first row's position - window); the producer also flags "needs mask" on every
//   tile whose lowest key is <= the block's last row's position - window (range tiles: their
//   first key; gathered tiles: their smallest; packed tiles are always masked), and the consumer
//   then drops row i's keys <= q_pos0 + i - window by the key's position, whichever path loaded
//   it (like the causal mask on the tiles straddling k = q). Windowless instantiations are the
//   code they were (identical PTX); the d 256 variant holds its 255 registers without spilling
//   with 32-bit window bounds (64-bit ones spilled 48 bytes: ptxas -v).
// - Consumer: S = Q K^T with wgmma m64n64k16, Q from registers (loaded once per task with
//   ldmatrix: the SS form read Q and K from shared memory per instruction, ~32 FLOP/B, at the
//   SM's shared-memory bandwidth), K from shared memory; online softmax in registers (log2
//   domain), O += P V with wgmma m64n128k16 (P from registers, V MN-major); FA3's
//   intra-warpgroup overlap (S of tile t in flight with P V of tile t-1).
// - Head dim 256 (Gemma 3's global layers; SparseGeo): tiles of 32 KB, so a CTA holds one
//   consumer warpgroup (Q 32 KB + 3 stages x 64 KB = 224 KB) next to the producer warpgroup,
//   Q is read from shared memory (its fragments would not fit the registers beside O's 128),
//   and O is two 128-column accumulators; the producer's paths are the same, per 64-dim panel.
// - fp8 e4m3 K/V tiles (SparseAttnParams::kv_dtype fp8_e4m3, read straight from the fp8 KV
//   cache): the producer's paths are the same with byte tiles: a range tile or packed segment is
//   one TMA box (u8 map, 128-byte rows, no swizzle) per 128-dim part, a gathered row 16 dims per
//   cp.async (empty slots zero-filled); the e4m3 bytes of part i land unswizzled in the stage's
//   panel 2 i + 1, so a key tile moves half the bytes. The consumer warpgroup widens them in
//   place to f16 in the same 128-byte-swizzled layout its wgmma reads (widen_operand: one
//   cvt.f16x2.e4m3x2 per pair, exact; a row's f16 overwrite only that row's codes): K before
//   S = Q K^T, V while S runs on the tensor cores (at d = 256 before it: 253 of 255 registers).
//   The wgmmas take f16 operands: Q widened to f16 once per task (exact for |q| in [2^-14,
//   65504], saturated beyond, tiny values become f16 subnormals: absolute error < 2^-25), P in
//   f16 (3 more mantissa bits than bf16). k_scale joins the softmax scale (so the LSE), v_scale
//   multiplies O once at the end: the math is on the exact e4m3 values.
//   Why f16 and not bf16 tiles: sm_90 converts e4m3 pairs to f16 in one instruction and has no
//   e4m3 -> bf16 conversion (a bit shuffle and a multiply by 2^120: ~5 instructions a pair), and
//   the conversion rate bounds the fp8 kernel. Why not FA3's fp8 wgmma: it needs Q and P in e4m3
//   (Q's 3 mantissa bits on every score: far more error than the cache's own rounding of K) and
//   V transposed to K-major for the B operand (a transpose per tile instead of a widening).
//   Why the consumers widen and not the spare producer warps: a first version staged the bytes
//   for one converter warp per consumer warpgroup (d 128; three at d 256) between loader and
//   consumer; on an H100 it ran at 0.45-0.94x of bf16 tiles: the conversions of a whole tile
//   went through one warp scheduler's conversion unit, and the 3-stage ring serialised load,
//   conversion and use. The consumer warpgroup spreads them over the SM's four schedulers and
//   overlaps V's with the tensor cores. H100, same index (bench/results/2026-11-26-h100-sparse-
//   sm90-fp8-d7f2b1c.json): fp8 tiles 1.04x bf16 tiles on HiP's index (d 128), 1.2x at d 256 and
//   on 1M block-sparse; 0.65-0.74x on 128K MInference indices (L2-resident: the K widening before
//   S costs more than the halved transfer saves), 0.82x on 1M vertical-slash.
// Why 64-key tiles and one task per warpgroup: a query block's keys are its own (MInference
// indexes per query head and per 64-row block), so two warpgroups cannot share K/V tiles; 64
// keys match the index granularity, and at d 128 three 32 KB stages per warpgroup fit the 227 KB
// limit.
// Tasks (h, b) are scheduled heaviest-first (causal work grows with b); the two warpgroups of a
// CTA take heads 2x and 2x+1 of the same block (same KV head under GQA: shared L2 lines). The
// kernel moves ~64 FLOP per byte of K/V tile (half the dense kernel's 128-key tiles shared by
// 128 rows), so it is bound by L2 -> SM traffic; the CTA order (task_of) keeps the resident CTAs
// on one or two KV heads over 32 neighbouring query blocks, whose selected key blocks overlap,
// so the K/V they read stays in L2 (hit rate 63% -> 87%).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/cuda/sparse_attention_generic.h"
#include "kernels/cuda/sparse_plan.h"

namespace longctx::cuda {
namespace {

using namespace sm90;

using bf16 = __nv_bfloat16;


// Geometry shared by both head dims.
constexpr int kBQ = kSparseQBlock;  // 64 query rows per task (one consumer warpgroup: wgmma M = 64)
constexpr int kBK = 64;          // keys per tile (the index granularity)
constexpr int kHalf = 64 * 64 * 2;   // one [64 rows][64 dims] bf16 TMA box (a panel): 8 KB (128-byte rows)
// Tile header per stage: key position of each slot (-1 = empty; column tiles only), then flags,
// then (range tiles) the first key and the key count: a range tile's slot i is key t0 + i, so its
// mask is two compares per element instead of a shared-memory read.
// kHdrFlagGather: the tile's rows were written by cp.async (the generic proxy); the consumer
// fences before its wgmmas read them (the async proxy).
constexpr int kHdrFlagMask = 1, kHdrFlagEnd = 2, kHdrFlagRange = 4, kHdrFlagPacked = 8, kHdrFlagGather = 16;
constexpr int kHdrFlags = kBK, kHdrT0 = kBK + 1, kHdrCnt = kBK + 2;
// Packed tiles: slots [kSeg j, kSeg (j + 1)) hold keys hdr[j] + 0.. of segment j, the first
// hdr[kSegs + j] of them valid (0: an unused segment, loaded from a valid key and masked).
constexpr int kSeg = kSparsePackSeg, kSegs = kBK / kSeg;
static_assert(kBK % kSeg == 0 && kSparsePackMax < kBK && kSeg % 8 == 0, "tail packing geometry");
constexpr int kHdrBytes = (kBK + 3) * 4;

// Per head dim (kD) and K/V ring depth (kStages): every tile ([64 rows][kD] bf16: Q, K or V) is
// kD / 64 panels of kHalf. Each consumer warpgroup owns a Q tile and a ring of kStages K and V
// tiles, so the shared memory per warpgroup is (1 + 2 kStages) tiles:
//   d = 128 (16 KB tiles): 2 consumer warpgroups x 3 stages = 2 x 112 KB = 224 KB.
//   d = 256 (32 KB tiles): one warpgroup fits, with 2 stages (160 KB) or 3 (224 KB); two would
//     need 2 x 96 KB with a single stage, and one stage cannot overlap S of tile t with P V of
//     tile t - 1 (both tiles live). So a CTA is 1 consumer + 1 producer warpgroup (256 threads),
//     one CTA per SM; the consumer gets O 128 + S 32 + P 16 registers and reads Q from shared
//     memory (Q's fragments in registers would be 64 more: over the 255 a thread may hold).
template <int kD_, int kStages_, bool kFp8_ = false, bool kWindow_ = false>
struct SparseGeo {
  static_assert((kD_ == 128 && kStages_ == 3) || (kD_ == 256 && (kStages_ == 2 || kStages_ == 3)),
                "sparse Hopper kernel: head_dim 128 with 3 stages, or 256 with 2 or 3");
  static_assert(!(kFp8_ && kWindow_), "the row window is a bf16 K/V variant (check_sparse_params)");
  static constexpr int kD = kD_;
  static constexpr int kStages = kStages_;
  static constexpr bool kFp8 = kFp8_;               // K/V in e4m3, widened to f16 tiles (header)
  // Row-level window (SparseAttnParams::window > 0, Self-Extend's near part): a separate
  // instantiation, so calls without a window run exactly the code they had (same SASS).
  static constexpr bool kWindow = kWindow_;
  static constexpr int kWgs = kD == 128 ? 2 : 1;    // consumer warpgroups (tasks) per CTA
  static constexpr int kThreads = 128 * (kWgs + 1);  // + 1 producer warpgroup
  static constexpr int kPanels = kD / 64;           // 64-dim panels per tile row
  static constexpr int kParts = kD / 128;           // 128-column parts of the O accumulator
  static constexpr int kTile = kPanels * kHalf;     // [64][kD] bf16: 16 / 32 KB
  static constexpr int kWgQ = 0;
  static constexpr int kWgK = kTile;
  static constexpr int kWgV = kWgK + kStages * kTile;
  static constexpr int kWgBytes = kWgV + kStages * kTile;
  static constexpr int kBarsPerWg = 1 + 2 * kStages;  // q_full, full[s], empty[s]
  // Producer warps per consumer warpgroup (the producer warpgroup's 4 warps, split evenly): all
  // walk the same index; the first writes headers and issues the TMA copies, and each issues
  // 1 / kFeedWarps of every gathered tile's rows (the rows of a random 2-key block are 2 KB apart:
  // a tile is 2048 (bf16) or 1024 (fp8) 16-byte copies, which one warp issued slowly).
  static constexpr int kFeedWarps = 4 / kWgs;
  static constexpr int kSmemMeta = kWgs * kWgBytes;
  // + mbarriers, tile headers, and slack to align the base to 1024
  static constexpr int kSmemBytes = kSmemMeta + kWgs * kBarsPerWg * 8 + kWgs * kStages * kHdrBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  // S = Q K^T with Q in registers (wgmma RS, kD / 4 registers per thread) instead of shared memory.
  // d = 128, H200, structured inputs: block-sparse +0% / +3% / +5% at 128K / 512K / 1M,
  // vertical-slash +0-1% (shared-memory reads were not the main limit: L2 -> SM traffic is, see
  // task_of). d = 256: no room (above).
  static constexpr bool kQInRegs = kD == 128;
};
// Default ring depth per head dim (SparseAttnParams::sm90_stages = 0). d = 256, H100, 128K
// queries, 16 / 8 heads (bench/results/2026-11-26-h100-sparse-sm90-d256-df36f7e.json): 3 stages
// 35.5 / 147.8 ms on block-sparse / vertical-slash, 2 stages 41.6 / 183.0 (with one warpgroup
// per SM, no second warpgroup's work covers a tile's load: the ring must).
constexpr int kStagesD128 = 3, kStagesD256 = 3;

// setmaxnreg split at d = 128 (384 threads): 128 x 56 + 256 x 224 = 384 x 168, what the CTA
// holds at launch (sm90::setmaxnreg_split_fits). The producers gather columns and short tails
// (64-bit addressing, the batched range walk, the issue loop unrolled by 4): ptxas -v reports
// 28-44 bytes of spill stores and 32-48 of loads (bf16 / fp8) at 56 registers, 24 (the dense
// kernel's TMA-only producer) more; the consumers do not spill at 224. At d = 256 the
// CTA has 256 threads, which start with 255 registers each: no split needed.
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
static_assert(setmaxnreg_split_fits(384, 128, kProducerRegs, kConsumerRegs), "register split");
// Task order (task_of): chunks of this many query blocks, KV-group-major inside (0 = block-major).
// H200, structured inputs (bench/results/*sparse-rate*): L2 hit rate 63% -> 87% at 128K, DRAM
// throughput 48% -> 14% of peak; block-sparse +7-10%, vertical-slash +16-30% over 0; 16 / 32 / 64
// within ~2% of each other.
constexpr int kOrderChunk = 32;

// D[64 x 64] (+)= A[64 x 16] * B[16 x 64], A from registers (the m16n8k16 A-fragment layout per
// warp: rows 16 warp + g, + 8; columns 2 tq, + 1, + 8, + 9), B from shared memory, K-major.
// Half the shared-memory bytes per instruction of the SS form (B only): at m64n64 the SS form
// reads 4 KB per 131 kFLOP, ~32 FLOP/B, the SM's shared-memory bandwidth at the tensor peak.
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17,"
      " %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// The fp8 path's f16 operands (e4m3 -> f16 is one exact cvt per pair; see the header): the same
// three wgmmas in f16. Operand lists of 32 and 64 fp32 accumulators:
#define LC_ACC32(d)                                                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),    \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),   \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define LC_ACC32_AT(d, o)                                                                                        \
  "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
      "+f"(d[o + 7]), "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]),          \
      "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15]), "+f"(d[o + 16]), "+f"(d[o + 17]), "+f"(d[o + 18]),       \
      "+f"(d[o + 19]), "+f"(d[o + 20]), "+f"(d[o + 21]), "+f"(d[o + 22]), "+f"(d[o + 23]), "+f"(d[o + 24]),       \
      "+f"(d[o + 25]), "+f"(d[o + 26]), "+f"(d[o + 27]), "+f"(d[o + 28]), "+f"(d[o + 29]), "+f"(d[o + 30]),       \
      "+f"(d[o + 31])
#define LC_REGS32                                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23," \
  " %24, %25, %26, %27, %28, %29, %30, %31}"
#define LC_REGS64                                                                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23," \
  " %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45," \
  " %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// S (d = 128): D[64 x 64] (+)= A[64 x 16] (registers) * B[16 x 64] (shared, K-major), f16.
__device__ __forceinline__ void wgmma_rs_n64_f16(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " LC_REGS32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : LC_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
// S (d = 256): D[64 x 64] (+)= A[64 x 16] * B[16 x 64], both from shared memory, K-major, f16.
__device__ __forceinline__ void wgmma_ss_n64_f16(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " LC_REGS32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : LC_ACC32(d)
      : "l"(da), "l"(db), "r"(scale_d));
}
// O += P V: D[64 x 128] += A[64 x 16] (registers) * B[16 x 128], B MN-major, f16.
__device__ __forceinline__ void wgmma_rs_tb_f16(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " LC_REGS64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : LC_ACC32_AT(d, 0), LC_ACC32_AT(d, 32)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
#undef LC_ACC32
#undef LC_ACC32_AT
#undef LC_REGS32
#undef LC_REGS64

// bf16 pair -> f16 pair (Q of the fp8 path), saturated to f16's finite range: exact for |q| in
// [2^-14, 65504]; smaller values become f16 subnormals (absolute error < 2^-25).
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t x) {
  constexpr float kF16Max = 65504.f;
  const float lo = fminf(fmaxf(__uint_as_float(x << 16), -kF16Max), kF16Max);
  const float hi = fminf(fmaxf(__uint_as_float(x & 0xffff0000u), -kF16Max), kF16Max);
  return mma::pack_f16(lo, hi);
}

// The u8 map over e4m3 K or V [n_tok, n_heads, head_dim] bytes; box = box_tokens tokens x 1 head x
// 128 dims (128-byte rows, no swizzle: the staging layout the widening pass reads).
inline CUtensorMap make_map_e4m3(const void* ptr, int64_t n_tok, int n_heads, int box_tokens, const char* what,
                                 int head_dim) {
  CUtensorMap m;
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(n_heads), cuuint64_t(n_tok)};
  const cuuint64_t strides[2] = {cuuint64_t(head_dim), cuuint64_t(n_heads) * head_dim};  // bytes, dims 1..2
  const cuuint32_t box[3] = {128, 1, cuuint32_t(box_tokens)};
  const cuuint32_t estr[3] = {1, 1, 1};
  const CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(ptr), dims, strides, box,
                                 estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  LC_REQUIRE(r == CUDA_SUCCESS, "%s: cuTensorMapEncodeTiled(e4m3, tokens=%lld, heads=%d, box=%d) failed: %d", what,
             (long long)n_tok, n_heads, box_tokens, int(r));
  return m;
}

// ---- main kernel -----------------------------------------------------------------------------
struct MainArgs : SparseKernelArgs {
  float v_scale;    // fp8: O's factor (k_scale is folded into scale_log2); 1 for bf16
  int order_chunk;  // task order: 0 = block-major; C > 0 = chunks of C blocks, KV-group-major inside
  int tail_gather_max;  // SparseAttnParams::tail_gather_max
};

// CTA i -> (head unit, query block b); a unit is the kWgs heads kWgs unit + w a CTA's consumer
// warpgroups take (a pair at d = 128, one head at d = 256). Heaviest blocks first either way
// (causal work grows with b). order_chunk 0: block-major (all units of block b, then b - 1, ...).
// order_chunk C: the blocks are cut into chunks of C (heaviest chunk first); inside a chunk, the
// units that share a KV head (group / kWgs of them) run over the chunk's C blocks before the
// next KV group: the CTAs resident at a time touch the K/V of one or two KV heads over C
// neighbouring blocks, whose selected blocks overlap (clustered), instead of all KV heads over a
// few blocks.
template <int kWgs>
__device__ __forceinline__ void task_of(const MainArgs& a, int64_t i, int& unit, int64_t& b) {
  const int n_units = (a.n_head + kWgs - 1) / kWgs;
  if (a.order_chunk <= 0) {
    unit = int(i % n_units);
    b = a.n_qblk - 1 - i / n_units;
    return;
  }
  const int64_t C = a.order_chunk;
  const int64_t c = i / (C * n_units);                // chunk (all chunks but the last are full)
  const int64_t cb = min(C, a.n_qblk - c * C);         // blocks in this chunk
  const int64_t t = i - c * C * n_units;
  const int gp = max(1, a.group / kWgs);               // units per KV group
  const int sg = int(t / (int64_t(gp) * cb));          // all groups but the last are full
  const int gl = min(gp, n_units - sg * gp);           // units in this group
  const int64_t u = t - int64_t(sg) * gp * cb;
  unit = sg * gp + int(u % gl);
  b = a.n_qblk - 1 - (c * C + u / gl);
}

// fp8: a consumer warpgroup widens one staged operand tile in place (the e4m3 bytes of 128-dim
// part i sit unswizzled, 128-byte rows, in the tile's panel 2 i + 1; the f16 go to panels 2 i,
// 2 i + 1, swizzled as TMA writes bf16). The work is groups of 4 rows x 128 dims: lane l of warp
// wp reads 16 codes (row 4 g + l / 8, dims 16 (l % 8) ..) and writes them as 16 f16. A row's f16
// overwrite only that row's codes, so a warp reads its groups before it writes them (one
// __syncwarp between). Then each thread fences (the wgmma reads through the async proxy); the
// caller syncs the warpgroup before a wgmma reads the tile.
__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ void sts128(uint32_t a, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
template <class G>
__device__ __forceinline__ void widen_operand(uint32_t tile, int wp, int lane) {
  constexpr int kGroupsPerPart = kBK / 4;
  constexpr int kPerWarp = G::kParts * kGroupsPerPart / 4;  // groups per warp: 4 (d 128), 8 (d 256)
  // groups read before they are written: 2 at d = 256; 1 at d = 128, where 2 spill 16 bytes of
  // the consumer's 224 registers (ptxas -v)
  constexpr int kBatch = G::kD == 128 ? 1 : 2;
  static_assert(kPerWarp % kBatch == 0, "widening batches");
  const int rl = lane / 8, c8 = lane % 8;
#pragma unroll
  for (int i0 = 0; i0 < kPerWarp; i0 += kBatch) {
    uint4 x[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int gi = wp + 4 * (i0 + j), part = gi / kGroupsPerPart, r = 4 * (gi % kGroupsPerPart) + rl;
      x[j] = lds128(tile + (2 * part + 1) * kHalf + r * 128 + c8 * 16);
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int gi = wp + 4 * (i0 + j), part = gi / kGroupsPerPart, r = 4 * (gi % kGroupsPerPart) + rl;
      using fp8vec::e4m3x4_to_f16x4;
      const uint2 f0 = e4m3x4_to_f16x4(x[j].x), f1 = e4m3x4_to_f16x4(x[j].y), f2 = e4m3x4_to_f16x4(x[j].z),
                  f3 = e4m3x4_to_f16x4(x[j].w);
      const uint4 lo = make_uint4(f0.x, f0.y, f1.x, f1.y), hi = make_uint4(f2.x, f2.y, f3.x, f3.y);
      // dims 16 c8 .. + 15 of the part: panel 2 part + c8 / 4, 16-byte chunks 2 (c8 % 4), + 1
      const uint32_t pr = tile + (2 * part + c8 / 4) * kHalf + r * 128;
      const int ch = 2 * (c8 % 4), sw = r % 8;
      sts128(pr + ((ch ^ sw) * 16), lo);
      sts128(pr + (((ch + 1) ^ sw) * 16), hi);
    }
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// tm_k16 / tm_v16: the K / V maps with 16-key boxes (packed tiles' segments).
template <class G>
__global__ void __launch_bounds__(G::kThreads, 1)
    sparse_attn_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                            const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_k16,
                            const __grid_constant__ CUtensorMap tm_v16, const MainArgs a) {
  constexpr int kD = G::kD, kStages = G::kStages, kWgs = G::kWgs, kPanels = G::kPanels, kTile = G::kTile;
  constexpr int kWgQ = G::kWgQ, kWgK = G::kWgK, kWgV = G::kWgV, kWgBytes = G::kWgBytes;
  constexpr int kBarsPerWg = G::kBarsPerWg, kSmemMeta = G::kSmemMeta;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (mma::smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* base_ptr = smem_raw + (base - mma::smem_u32(smem_raw));
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  // 0: q, 1+s full, 1+kStages+s empty
  auto bar = [&](int w, int i) { return base + kSmemMeta + 8u * (w * kBarsPerWg + i); };
  auto hdr = [&](int w, int s) {
    return reinterpret_cast<int32_t*>(base_ptr + kSmemMeta + kWgs * kBarsPerWg * 8 + (w * kStages + s) * kHdrBytes);
  };
  int unit;
  int64_t b;
  task_of<kWgs>(a, int64_t(blockIdx.x), unit, b);

  if (tid == 0) {
    for (int w = 0; w < kWgs; ++w) {
      mbar_init(bar(w, 0), 1);
      for (int s = 0; s < kStages; ++s) {
        mbar_init(bar(w, 1 + s), G::kFeedWarps);  // one arrival per feeding warp
        mbar_init(bar(w, 1 + kStages + s), 128);
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == kWgs) {
    // ---------------- producers: warp w feeds consumer warpgroup w ----------------
    if constexpr (kWgs == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    // warp pw feeds consumer w = pw % kWgs as its feeder f = pw / kWgs (f 0: headers, TMA, Q)
    const int pw = (tid - 128 * kWgs) / 32, lane = tid % 32;
    const int w = pw % kWgs, f = pw / kWgs;
    const bool lead = f == 0;
    const int h = kWgs * unit + w;
    if (f < G::kFeedWarps && h < a.n_head) {
      auto ld_bar = [&](int s) { return bar(w, 1 + s); };  // where a stage's loads complete
      const int kvh = h / a.group;
      const uint32_t wb = base + w * kWgBytes;
      const int64_t row = int64_t(h / a.heads_per_index) * a.n_qblk + b;
      const int64_t first_pos = a.q_pos0 + b * kBQ;  // position of the block's first row
      // Row window: row i drops keys <= its position - window. The plan already dropped the keys
      // below the first row's bound (<= first_pos - window); a key above the last row's bound
      // win_last is inside every row's window. So a tile needs the per-row window mask iff its
      // lowest key is <= win_last (the tiles straddling k = q - window, as the causal mask's
      // straddle k = q): range tiles test their first key, gathered tiles the smallest of their
      // keys, packed tiles are always masked. The bound uses the block's 64th row even in a
      // ragged last block (rows past n_q are not stored): at worst a tile is masked needlessly.
      const int64_t win_last = first_pos + kBQ - 1 - a.window;
      if (lead && lane == 0) {
        mbar_expect_tx(bar(w, 0), kTile);
#pragma unroll
        for (int pn = 0; pn < kPanels; ++pn)
          tma_load_3d(wb + kWgQ + pn * kHalf, &tm_q, bar(w, 0), 64 * pn, h, int(b * kBQ));
      }
      int t = 0;
      // The gather tile being filled: slots [0, ng) hold range-tail keys and columns, slot i in
      // lane i's gka (i < 32) or lane i - 32's gkb (-1 = empty). Its rows are copied with
      // cp.async, and the stage's full barrier completes when they land (cp.async.mbarrier.arrive):
      // the producer never waits for a gathered tile, so every free stage of the ring can hold one.
      int ng = 0;
      int32_t gka = -1, gkb = -1;
      // One TMA box height of K and V rows from key k0 into stage (sk, sv) at row byte offset off:
      // bf16, one swizzled box per 64-dim panel; fp8, one unswizzled 128-byte-row box per 128-dim
      // part, staged in the part's second panel (widen_operand). kTileLoad: the bytes of a whole tile.
      constexpr uint32_t kTileLoad = G::kFp8 ? kTile : 2 * kTile;
      auto load_rows = [&](uint32_t sk, uint32_t sv, const CUtensorMap* mk, const CUtensorMap* mv, uint32_t mb,
                           int32_t k0, uint32_t off) {
        if constexpr (G::kFp8) {
#pragma unroll
          for (int part = 0; part < G::kParts; ++part) {
            tma_load_3d(sk + (2 * part + 1) * kHalf + off, mk, mb, 128 * part, kvh, k0);
            tma_load_3d(sv + (2 * part + 1) * kHalf + off, mv, mb, 128 * part, kvh, k0);
          }
        } else {
#pragma unroll
          for (int pn = 0; pn < kPanels; ++pn) {
            tma_load_3d(sk + pn * kHalf + off, mk, mb, 64 * pn, kvh, k0);
            tma_load_3d(sv + pn * kHalf + off, mv, mb, 64 * pn, kvh, k0);
          }
        }
      };
      auto acquire = [&](int s) {
        if (t >= kStages) mbar_wait(bar(w, 1 + kStages + s), ((t / kStages) & 1) ^ 1);
      };
      // The packed tile being filled: segments [0, np), first keys ps[], counts pc[] (registers:
      // indexed by unrolled constants only).
      int np = 0;
      int32_t ps[kSegs], pc[kSegs];
      auto flush_pack = [&] {
        const int s = t % kStages;
        acquire(s);
        if (!lead && lane == 0) mbar_arrive(ld_bar(s));
        if (lead && lane == 0) {  // the header first: the arrive in mbar_expect_tx publishes it
          int32_t* hd = hdr(w, s);
          hd[kHdrFlags] = kHdrFlagPacked | kHdrFlagMask;
#pragma unroll
          for (int j = 0; j < kSegs; ++j) {
            hd[j] = j < np ? ps[j] : ps[0];
            hd[kSegs + j] = j < np ? pc[j] : 0;
          }
          const uint32_t sk = wb + kWgK + s * kTile, sv = wb + kWgV + s * kTile;
          mbar_expect_tx(ld_bar(s), kTileLoad);
#pragma unroll
          for (int j = 0; j < kSegs; ++j) {
            const int32_t k0 = hd[j];
            const uint32_t off = j * kSeg * 128;  // 16 rows of 128 bytes: 1024-byte aligned, same swizzle
            load_rows(sk, sv, &tm_k16, &tm_v16, ld_bar(s), k0, off);
          }
        }
        ++t;
        np = 0;
      };
      auto add_segment = [&](int32_t k0, int32_t cnt) {
#pragma unroll
        for (int j = 0; j < kSegs; ++j)
          if (j == np) ps[j] = k0, pc[j] = cnt;
        if (++np == kSegs) flush_pack();
      };
      auto flush_gather = [&] {
        const int s = t % kStages;
        acquire(s);
        if (lead) {
          int32_t* hd = hdr(w, s);
          hd[lane] = gka;
          hd[lane + 32] = gkb;
          int32_t gmax = max(gka, gkb);  // the tile's last key (empty slots are -1)
#pragma unroll
          for (int o = 16; o > 0; o /= 2) gmax = max(gmax, __shfl_xor_sync(0xffffffffu, gmax, o));
          bool full = ng == kBK && (!a.causal || gmax <= first_pos);
          if constexpr (G::kWindow) {  // the tile's first key (empty slots: none)
            int32_t gmin = min(gka < 0 ? INT_MAX : gka, gkb < 0 ? INT_MAX : gkb);
#pragma unroll
            for (int o = 16; o > 0; o /= 2) gmin = min(gmin, __shfl_xor_sync(0xffffffffu, gmin, o));
            full = full && gmin > win_last;
          }
          if (lane == 0) hd[kHdrFlags] = kHdrFlagGather | (full ? 0 : kHdrFlagMask);
        }
        const uint32_t sk = wb + kWgK + s * kTile;
        // 64 rows x kC chunks of 16 bytes per operand, 32 per iteration: chunk i = 32 it + lane is
        // row i / kC, chunk i % kC (bf16 d = 128: two rows an iteration; d = 256: one). fp8: a
        // chunk is 16 dims, staged unswizzled (128-byte rows) in panel 2 part + 1 of 128-dim part
        // c / 8 (the widening pass's layout, see widen_operand), empty slots zero-filled.
        // A lane's chunk column c is the same in every iteration (32 is a multiple of kC), and its
        // rows step by kRowsIt: the loop is unrolled whole so that a copy costs its key's
        // broadcast, one wide multiply-add an operand (32-bit key x 32-bit bytes a token + the
        // column) and the swizzle's xor, ~10 instructions a pair of copies where the generic
        // form (signed row division, 64-bit multiply, pointer selects) took ~35: the producer
        // warps' issue rate bounded HiP's gathered tiles (ncu at 128K: the consumers waited on
        // full stages while the producers seldom waited on empty ones).
        constexpr int kC = G::kFp8 ? kD / 16 : kD / 8;
        constexpr int kRowsIt = 32 / kC;        // rows an iteration
        constexpr int kElem = G::kFp8 ? 1 : 2;  // bytes per K/V element
        // (opaque: the compiler would otherwise hoist every iteration's destination out of the
        // producer's loop and spill them from its small register budget, and re-add the tensors'
        // base addresses to every copy's offset)
        int c = lane % kC, r0 = f * (kBK / G::kFeedWarps) + lane / kC;  // this lane's chunk, first row
        asm volatile("" : "+r"(c), "+r"(r0));
        const uint32_t ld = uint32_t(a.n_kv_head * kD * kElem);  // bytes per token
        const uint8_t* kcol = reinterpret_cast<const uint8_t*>(a.k) + (kvh * kD + c * (16 / kElem)) * kElem;
        const uint8_t* vcol = reinterpret_cast<const uint8_t*>(a.v) + (kvh * kD + c * (16 / kElem)) * kElem;
        asm volatile("" : "+l"(kcol), "+l"(vcol));
        // Feeder f copies rows [f 64 / kFeedWarps, (f + 1) 64 / kFeedWarps) of the tile, all in
        // slots 0..31 (gka) or all in 32..63 (gkb).
        constexpr int kIters = kBK * kC / 32 / G::kFeedWarps;
        static_assert(kIters * kRowsIt * G::kFeedWarps == kBK && 2 * (G::kFeedWarps / 2) == G::kFeedWarps,
                      "gather split");
        const int32_t gk = 2 * f < G::kFeedWarps ? gka : gkb;
        // Row r's chunk c: 128-byte rows; bf16 16-byte chunks swizzled within a 64-dim panel
        // (chunk (c ^ r) % 8), fp8 in panel 2 part + 1 unswizzled. V's stage is K's + kStages tiles.
        const uint32_t kb0 = sk + (G::kFp8 ? (2 * (c / 8) + 1) * kHalf + (c % 8) * 16 : (c / 8) * kHalf) + r0 * 128;
        const uint32_t r16 = uint32_t(r0) * 16, c16 = uint32_t(c) * 16;
        static_assert(kWgV - kWgK == kStages * kTile, "V's stage at a fixed offset from K's");
#pragma unroll
        for (int i = 0; i < kIters; ++i) {
          const int r = r0 + kRowsIt * i;
          const int32_t key = __shfl_sync(0xffffffffu, gk, r);  // slot r: lane r % 32 of gka / gkb (wraps)
          const uint32_t kk = key >= 0 ? uint32_t(key) : 0u;    // an empty slot (key < 0) zero-fills
          const uint32_t dk = kb0 + 128 * kRowsIt * i + (G::kFp8 ? 0u : ((r16 + 16 * kRowsIt * i) ^ c16) & 0x70u);
          mma::cp_async16_zfill_if_negative(dk, kcol + size_t(kk) * ld, key);
          mma::cp_async16_zfill_if_negative(dk + kStages * kTile, vcol + size_t(kk) * ld, key);
        }
        // Each lane's copies arrive on the stage's full barrier when they land (the pending count
        // goes up by one per lane now, down when its copies complete); lane 0's arrival, after
        // every lane's (and the header's writes: __syncwarp), is the phase's own.
        asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(ld_bar(s)) : "memory");
        __syncwarp();
        if (lane == 0) mbar_arrive(ld_bar(s));
        ++t;
        ng = 0;
        gka = gkb = -1;
      };
      // Appends n ascending keys key_at(0..n) to the gather tile (flushing it when full).
      auto add_keys = [&](auto key_at, int n) {
        for (int i0 = 0; i0 < n;) {
          const int take = min(kBK - ng, n - i0);
          if (lane >= ng && lane < ng + take) gka = key_at(i0 + lane - ng);
          if (lane + 32 >= ng && lane + 32 < ng + take) gkb = key_at(i0 + lane + 32 - ng);
          ng += take;
          i0 += take;
          if (ng == kBK) flush_gather();
        }
      };
      // Appends a batch of short ranges, one per lane (lane j: keys rs_j .. rs_j + c_j - 1, c_j = 0
      // for none), to the gather tile with all lanes at once: a warp prefix sum puts range j's
      // keys at positions excl_j .. of the batch's key stream, and each tile slot finds the range
      // of its position by a binary search over the lanes (excl is non-decreasing: the last lane
      // with excl_j <= q holds q). HiP's rows are ~256 such ranges: a range at a time, the walk
      // (a few dependent shuffles and branches per 2-key range) bounded the producer.
      auto add_batch = [&](int32_t rs_j, int c_j) {
        int incl = c_j;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
          const int v = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += v;
        }
        const int excl = incl - c_j, total = __shfl_sync(0xffffffffu, incl, 31);
        const int32_t base_j = rs_j - excl;  // the key at stream position q of range j: base_j + q
        auto key_of = [&](int q) {
          int j = 0;
#pragma unroll
          for (int step = 16; step > 0; step /= 2)
            if (__shfl_sync(0xffffffffu, excl, j + step) <= q) j += step;
          return __shfl_sync(0xffffffffu, base_j, j) + q;
        };
        for (int done = 0; done < total;) {
          const int take = min(kBK - ng, total - done);
          const int qa = done + lane - ng, qb = qa + 32;  // stream positions of slots lane, lane + 32
          const int32_t ka = key_of(min(max(qa, 0), total - 1)), kb = key_of(min(max(qb, 0), total - 1));
          if (lane >= ng && lane < ng + take) gka = ka;
          if (lane + 32 >= ng && lane + 32 < ng + take) gkb = kb;
          ng += take;
          done += take;
          if (ng == kBK) flush_gather();
        }
      };
      const int32_t* rg = a.ranges + 2 * a.range_ptr[row];
      const int nr = a.n_r[row];
      // The ranges, 32 at a time: lane j loads range i0 + j (one coalesced read instead of a
      // dependent load per range). The batch's ranges that are gathered whole (HiP's 2-key blocks)
      // go in at once (add_batch); the longer ones (merged blocks of structured inputs,
      // MInference's rows) then range by range, each broadcast from its lane.
      // The next batch's ranges are loaded before this one is walked (their latency, ~3% of the
      // kernel's stall samples at 128K, hides behind the walk).
      int32_t rs_n = 0, re_n = 0;
      if (lane < nr) rs_n = rg[2 * lane], re_n = rg[2 * lane + 1];
      for (int i0 = 0; i0 < nr; i0 += 32) {
        const int32_t rs_l = rs_n, re_l = re_n;  // lanes >= the batch's ranges: 0, 0
        rs_n = re_n = 0;
        if (i0 + 32 + lane < nr) rs_n = rg[2 * (i0 + 32 + lane)], re_n = rg[2 * (i0 + 32 + lane) + 1];
        const bool gathered = re_l - rs_l <= a.tail_gather_max;  // empty ranges too (lanes past nr)
        const uint32_t longs = __ballot_sync(0xffffffffu, !gathered);
        if (__any_sync(0xffffffffu, gathered && re_l > rs_l)) add_batch(rs_l, gathered ? max(re_l - rs_l, 0) : 0);
        for (uint32_t m = longs; m != 0; m &= m - 1) {
          const int i = __ffs(m) - 1;
          const int32_t rs = __shfl_sync(0xffffffffu, rs_l, i), re = __shfl_sync(0xffffffffu, re_l, i);
          int32_t t0 = rs;
          for (; t0 < re && re - t0 > kSparsePackMax; t0 += kBK, ++t) {
            const int s = t % kStages;
            acquire(s);
            const int cnt = min(kBK, re - t0);
            int32_t* hd = hdr(w, s);
            const bool full = cnt == kBK && (!a.causal || t0 + kBK - 1 <= first_pos) && (!G::kWindow || t0 > win_last);
            if (!lead) {
              if (lane == 0) mbar_arrive(ld_bar(s));
              continue;
            }
            if (lane == 0) {
              hd[kHdrFlags] = kHdrFlagRange | (full ? 0 : kHdrFlagMask);
              hd[kHdrT0] = t0;
              hd[kHdrCnt] = cnt;
            }
            __syncwarp();
            if (lane == 0) {
              const uint32_t sk = wb + kWgK + s * kTile, sv = wb + kWgV + s * kTile;
              mbar_expect_tx(ld_bar(s), kTileLoad);
              load_rows(sk, sv, &tm_k, &tm_v, ld_bar(s), t0, 0);
            }
          }
          if (re - t0 > 0 && re - t0 <= a.tail_gather_max) {
            add_keys([t0](int j) { return t0 + j; }, re - t0);
            continue;
          }
          for (; t0 < re; t0 += kSeg) add_segment(t0, min(kSeg, re - t0));
        }
      }
      if (np > 0) flush_pack();
      const int32_t* cl = a.cols + a.col_ptr[row];
      add_keys([cl](int j) { return cl[j]; }, a.n_c[row]);
      if (ng > 0) flush_gather();
      {  // end marker
        const int s = t % kStages;
        acquire(s);
        if (lane == 0) {
          if (lead) hdr(w, s)[kHdrFlags] = kHdrFlagEnd;
          mbar_arrive(ld_bar(s));
        }
      }
    }
  } else {
    // ---------------- consumers ----------------
    if constexpr (kWgs == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int w = wg;
    const int h = kWgs * unit + w;
    if (h < a.n_head) {
      const int ltid = tid - 128 * w;
      const int warp = ltid / 32, lane = ltid % 32;
      const int g = lane / 4, tq = lane % 4;
      const int64_t row0 = b * kBQ + 16 * warp + g;  // rows row0, row0 + 8 (chunk-relative)
      const int64_t vis0 = a.q_pos0 + row0;
      // Row window (kWindow): rows row0, row0 + 8 drop keys <= wk[0], wk[1] (keys are int32: the
      // bounds clamped to [-1, INT_MAX], so the per-element compares are 32-bit).
      int32_t wk[2] = {-1, -1};
      if constexpr (G::kWindow)
#pragma unroll
        for (int r = 0; r < 2; ++r) wk[r] = int32_t(min(max(vis0 + 8 * r - a.window, int64_t(-1)), int64_t(INT_MAX)));
      const uint32_t wb = base + w * kWgBytes;
      const uint32_t sQ = wb + kWgQ;

      constexpr int kParts = G::kParts;
      float o[kParts][64];  // O columns 128 part .. 128 part + 127
#pragma unroll
      for (int part = 0; part < kParts; ++part)
#pragma unroll
        for (int i = 0; i < 64; ++i) o[part][i] = 0.f;
      auto fence_o = [&] {
#pragma unroll
        for (int part = 0; part < kParts; ++part) fence_regs(o[part]);
      };
      float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};

      // Q's A fragments, loaded once per task from the swizzled Q tile (ldmatrix x4 per 16-dim
      // step); d = 256 reads Q from shared memory instead (a 1-element dummy).
      uint32_t qf[G::kQInRegs ? kD / 16 : 1][4];
      auto issue_s = [&](float (&sc)[32], uint32_t k_tile) {
        fence_regs(sc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const uint32_t off = (kk / 4) * kHalf + (kk % 4) * 32;
          if constexpr (G::kQInRegs && G::kFp8)
            wgmma_rs_n64_f16(sc, qf[kk], desc_sw128(k_tile + off, 16), kk > 0);
          else if constexpr (G::kQInRegs)
            wgmma_rs_n64(sc, qf[kk], desc_sw128(k_tile + off, 16), kk > 0);
          else if constexpr (G::kFp8)
            wgmma_ss_n64_f16(sc, desc_sw128(sQ + off, 16), desc_sw128(k_tile + off, 16), kk > 0);
          else
            wgmma_ss(sc, desc_sw128(sQ + off, 16), desc_sw128(k_tile + off, 16), kk > 0);
        }
        wgmma_commit();
      };
      auto issue_pv = [&](uint32_t (&p)[4][4], uint32_t v_tile) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk)  // part i of O reads V's panels 2i, 2i + 1 (LBO: the stride)
#pragma unroll
          for (int part = 0; part < kParts; ++part) {
            if constexpr (G::kFp8)
              wgmma_rs_tb_f16(o[part], p[kk], desc_sw128(v_tile + 2 * part * kHalf + kk * 2048, kHalf));
            else
              wgmma_rs_tb(o[part], p[kk], desc_sw128(v_tile + 2 * part * kHalf + kk * 2048, kHalf));
          }
        wgmma_commit();
      };
      auto softmax = [&](float (&sc)[32], const int32_t* hd, float (&corr)[2]) {
        const int flags = hd[kHdrFlags];
        if ((flags & (kHdrFlagMask | kHdrFlagRange)) == (kHdrFlagMask | kHdrFlagRange)) {
          // range tile: slot i is key t0 + i; valid slots i < cnt, causal key <= row position
          const int32_t t0 = hd[kHdrT0], cnt = hd[kHdrCnt];
          const int64_t lim0 = a.causal ? vis0 - t0 : int64_t(kBK);  // last visible slot of row 0
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int slot = 8 * j + 2 * tq + (e & 1);
              if (slot >= cnt || slot > lim0 + (e >> 1) * 8) sc[4 * j + e] = -INFINITY;
              if constexpr (G::kWindow)
                if (t0 + slot <= wk[e >> 1]) sc[4 * j + e] = -INFINITY;
            }
        } else if (flags & kHdrFlagPacked) {
          // packed tile: slot i is key hdr[i / kSeg] + i % kSeg, valid when i % kSeg < its count
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int seg = (8 * j) / kSeg;
            const int32_t k0 = hd[seg], cnt = hd[kSegs + seg];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int in = (8 * j) % kSeg + 2 * tq + (e & 1);
              if (in >= cnt || (a.causal && int64_t(k0) + in > vis0 + (e >> 1) * 8)) sc[4 * j + e] = -INFINITY;
              if constexpr (G::kWindow)
                if (k0 + in <= wk[e >> 1]) sc[4 * j + e] = -INFINITY;
            }
          }
        } else if (flags & kHdrFlagMask) {
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int32_t key = hd[8 * j + 2 * tq + (e & 1)];
              if (key < 0 || (a.causal && key > vis0 + (e >> 1) * 8)) sc[4 * j + e] = -INFINITY;
              if constexpr (G::kWindow)
                if (key <= wk[e >> 1]) sc[4 * j + e] = -INFINITY;
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m_r[r], mx);
          const float m_use = m_new == -INFINITY ? 0.f : m_new;
          corr[r] = fast_exp2((m_r[r] - m_use) * a.scale_log2);
          m_r[r] = m_new;
          const float ms = m_use * a.scale_log2;
          float sum = 0.f;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            sc[4 * j + 2 * r] = fast_exp2(fmaf(sc[4 * j + 2 * r], a.scale_log2, -ms));
            sc[4 * j + 2 * r + 1] = fast_exp2(fmaf(sc[4 * j + 2 * r + 1], a.scale_log2, -ms));
            sum += sc[4 * j + 2 * r] + sc[4 * j + 2 * r + 1];
          }
          l_r[r] = l_r[r] * corr[r] + sum;
        }
      };
      auto to_p = [&](const float (&sc)[32], uint32_t (&p)[4][4]) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            p[kk][i] = G::kFp8 ? mma::pack_f16(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1])
                               : mma::pack_bf16(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
      };
      auto rescale_o = [&](const float (&corr)[2]) {
#pragma unroll
        for (int part = 0; part < kParts; ++part)
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            o[part][4 * j + 0] *= corr[0];
            o[part][4 * j + 1] *= corr[0];
            o[part][4 * j + 2] *= corr[1];
            o[part][4 * j + 3] *= corr[1];
          }
      };

      mbar_wait(bar(w, 0), 0);
      if constexpr (G::kQInRegs) {
        // lane l addresses row 16 warp + l % 16, dims 16 kk + 8 (l / 16): matrices (g, 0-7),
        // (g + 8, 0-7), (g, 8-15), (g + 8, 8-15) = registers a0a1, a2a3, a4a5, a6a7.
        const int r = 16 * warp + lane % 16;
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const int col = 16 * kk + 8 * (lane / 16);
          const uint32_t addr = sQ + (col / 64) * kHalf + r * 128 + ((((col % 64) / 8) ^ (r % 8)) * 16);
          mma::ldmatrix_x4(addr, qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
          if constexpr (G::kFp8)
#pragma unroll
            for (int i = 0; i < 4; ++i) qf[kk][i] = bf16x2_to_f16x2(qf[kk][i]);
        }
      } else if constexpr (G::kFp8) {
        // Q tile to f16 in place (each thread its own 16-byte chunks), then visible to wgmma
        uint8_t* qp = base_ptr + w * kWgBytes + kWgQ;
#pragma unroll 4
        for (int i = ltid; i < kTile / 16; i += 128) {
          uint4 x = *reinterpret_cast<const uint4*>(qp + 16 * i);
          x = make_uint4(bf16x2_to_f16x2(x.x), bf16x2_to_f16x2(x.y), bf16x2_to_f16x2(x.z), bf16x2_to_f16x2(x.w));
          *reinterpret_cast<uint4*>(qp + 16 * i) = x;
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync 1, 128;\n" ::: "memory");  // the consumer warpgroup (d = 256: the only one)
      }
      // fp8: the warpgroup widens stage s's K before S = Q K^T (then syncs: the wgmma reads every
      // warp's rows) and its V while S and the previous tile's P V run on the tensor cores; the
      // next tile's sync publishes that V before its P V.
      constexpr bool kWidenVInFlight = kD == 128;
      auto widen = [&](uint32_t tile) {
        if constexpr (G::kFp8) widen_operand<G>(tile, warp, lane);
      };
      auto wg_sync = [&] {
        if constexpr (G::kFp8) asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
      };
      // A gathered tile's rows came through the generic proxy (cp.async, completed on the full
      // barrier this thread has just observed): fence before the wgmmas (async proxy) read them.
      auto fence_gathered = [&](int s) {
        if (hdr(w, s)[kHdrFlags] & kHdrFlagGather) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      };
      mbar_wait(bar(w, 1), 0);
      if (!(hdr(w, 0)[kHdrFlags] & kHdrFlagEnd)) {
        uint32_t p[4][4];
        float corr[2];
        {
          float sc[32];
          fence_gathered(0);
          widen(wb + kWgK);
          wg_sync();
          issue_s(sc, wb + kWgK);
          widen(wb + kWgV);
          wgmma_wait<0>();
          fence_regs(sc);
          softmax(sc, hdr(w, 0), corr);
          to_p(sc, p);
        }
        int sp = 0;
        for (int t = 1;; ++t) {
          const int s = t % kStages;
          float sc[32];
          fence_o();
          fence_p(p);
          mbar_wait(bar(w, 1 + s), (t / kStages) & 1);
          if (hdr(w, s)[kHdrFlags] & kHdrFlagEnd) break;
          fence_gathered(s);
          widen(wb + kWgK + s * kTile);
          if constexpr (!kWidenVInFlight) widen(wb + kWgV + s * kTile);
          wg_sync();
          issue_s(sc, wb + kWgK + s * kTile);
          issue_pv(p, wb + kWgV + sp * kTile);
          if constexpr (kWidenVInFlight) widen(wb + kWgV + s * kTile);
          wgmma_wait<1>();
          fence_regs(sc);
          softmax(sc, hdr(w, s), corr);
          wgmma_wait<0>();
          fence_o();
          fence_p(p);
          mbar_arrive(bar(w, 1 + kStages + sp));
          rescale_o(corr);
          to_p(sc, p);
          sp = s;
        }
        wg_sync();
        issue_pv(p, wb + kWgV + sp * kTile);
        wgmma_wait<0>();
        fence_o();
        fence_p(p);
        mbar_arrive(bar(w, 1 + kStages + sp));
      }

      if constexpr (G::kFp8)  // O = sum p (code * v_scale) / l
#pragma unroll
        for (int part = 0; part < kParts; ++part)
#pragma unroll
          for (int i = 0; i < 64; ++i) o[part][i] *= a.v_scale;
      store_o_lse_parts<kParts>(o, l_r, m_r, row0, tq, h, a.n_q, a.n_head, a.scale_log2, a.o, a.lse);
    }
  }
}

// ---- host side ---------------------------------------------------------------------------------
bool is_hopper() { return current_sm() == 90; }

// The ring depth p asks for (0: the default of its head dim).
int stages_of(const SparseAttnParams& p) {
  if (p.sm90_stages != 0) return p.sm90_stages;
  return p.head_dim == 256 ? kStagesD256 : kStagesD128;
}

void check_params(const SparseAttnParams& p) {
  LC_REQUIRE(is_hopper(), "sparse_attention: needs an sm_90 (Hopper) GPU");
  LC_REQUIRE(p.head_dim == 128 || p.head_dim == 256, "sparse_attention: head_dim %d unsupported (128 or 256)",
             p.head_dim);
  const int st = stages_of(p);
  LC_REQUIRE(p.head_dim == 128 ? st == 3 : (st == 2 || st == 3),
             "sparse_attention: sm90_stages %d at head_dim %d (3 at 128; 2 or 3 at 256)", p.sm90_stages, p.head_dim);
  LC_REQUIRE(p.kv_dtype != KvDtype::fp8_e4m3 || st == 3,
             "sparse_attention: fp8 K/V tiles take the 3-stage ring (sm90_stages %d)", p.sm90_stages);
  LC_REQUIRE(p.window == 0 || st == 3,
             "sparse_attention: a row window (%lld) takes the 3-stage ring (sm90_stages %d; pass 0 or 3)",
             (long long)p.window, p.sm90_stages);
  check_sparse_params(p, "sparse_attention");
}

template <class G>
void launch_main(const SparseAttnParams& p, Stream s) {
  static const cudaError_t err =
      cudaFuncSetAttribute(sparse_attn_sm90_kernel<G>, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmemBytes);
  LC_CUDA_CHECK(err, "sparse_attn_sm90_kernel<d=%d,stages=%d,fp8=%d,window=%d>: raising dynamic shared memory to %d bytes",
                G::kD, G::kStages, int(G::kFp8), int(G::kWindow), G::kSmemBytes);
  MainArgs a{};
  static_cast<SparseKernelArgs&>(a) = sparse_kernel_args(p);
  const CUtensorMap tq = make_map(p.q, p.n_q, p.n_head, kBQ, "sparse_attention: q", G::kD);
  auto kv_map = G::kFp8 ? make_map_e4m3 : make_map;
  const CUtensorMap tk = kv_map(p.k, p.n_kv, p.n_kv_head, kBK, "sparse_attention: k", G::kD);
  const CUtensorMap tv = kv_map(p.v, p.n_kv, p.n_kv_head, kBK, "sparse_attention: v", G::kD);
  const CUtensorMap tk16 = kv_map(p.k, p.n_kv, p.n_kv_head, kSeg, "sparse_attention: k (segments)", G::kD);
  const CUtensorMap tv16 = kv_map(p.v, p.n_kv, p.n_kv_head, kSeg, "sparse_attention: v (segments)", G::kD);
  a.v_scale = 1.f;
  if (G::kFp8) {  // S = Q (code k_scale): k_scale joins the softmax scale (and so the LSE)
    a.scale_log2 *= p.k_scale;
    a.v_scale = p.v_scale;
  }
  a.order_chunk = kOrderChunk;
  a.tail_gather_max = p.tail_gather_max;
  const int64_t n_cta = int64_t((p.n_head + G::kWgs - 1) / G::kWgs) * p.index.n_qblk;
  LC_REQUIRE(n_cta <= 0x7fffffff, "sparse_attention: %lld CTAs exceed the grid limit", (long long)n_cta);
  const dim3 grid{unsigned(n_cta)};
  sparse_attn_sm90_kernel<G><<<grid, G::kThreads, G::kSmemBytes, static_cast<cudaStream_t>(s)>>>(tq, tk, tv, tk16,
                                                                                                 tv16, a);
  LC_LAUNCH_CHECK("sparse_attn_sm90_kernel<d=%d,stages=%d,fp8=%d,window=%d> n_q=%lld n_kv=%lld q_pos0=%lld window=%lld "
                  "heads=%d/%d grid=%d", G::kD, G::kStages, int(G::kFp8), int(G::kWindow), (long long)p.n_q,
                  (long long)p.n_kv, (long long)p.q_pos0, (long long)p.window, p.n_head, p.n_kv_head, grid.x);
}

}  // namespace

size_t sparse_attention_workspace_bytes(const DeviceSparseIndex& index) { return sparse_plan_layout(index).total; }

void sparse_attention_plan(const SparseAttnParams& p, Stream s) {
  check_params(p);
  launch_sparse_plan(p, s, "sparse_attention");
}

void sparse_attention_run(const SparseAttnParams& p, Stream s) {
  check_params(p);
  if (p.kv_dtype == KvDtype::fp8_e4m3) {
    if (p.head_dim == 128) return launch_main<SparseGeo<128, kStagesD128, true>>(p, s);
    return launch_main<SparseGeo<256, 3, true>>(p, s);
  }
  if (p.window > 0) {  // bf16 only (check_sparse_params), 3 stages (check_params)
    if (p.head_dim == 128) return launch_main<SparseGeo<128, kStagesD128, false, true>>(p, s);
    return launch_main<SparseGeo<256, 3, false, true>>(p, s);
  }
  if (p.head_dim == 128) return launch_main<SparseGeo<128, kStagesD128>>(p, s);
  if (stages_of(p) == 2) return launch_main<SparseGeo<256, 2>>(p, s);
  launch_main<SparseGeo<256, 3>>(p, s);
}

void sparse_attention(const SparseAttnParams& p, Stream s) {
  // head_dim 64 and GPUs before or after Hopper take the generic kernel; a row window (Self-
  // Extend's near part) runs on either.
  if ((p.head_dim != 128 && p.head_dim != 256) || !is_hopper()) return sparse_attention_generic(p, s);
  sparse_attention_plan(p, s);
  sparse_attention_run(p, s);
}

}  // namespace longctx::cuda
