// attention_decode.cu (cuda): decode attention (one query per sequence), split-KV flash-decoding.
//
// What: for each sequence and query head, O = softmax(scale * q K^T) V over all n_kv keys, and
// the LSE. Layout and semantics: attention.h. Tested by tests/cuda/test_attention.cpp, timed by
// bench/bench_cuda.cu (goal: K+V streamed at >= 85% of the device copy bandwidth).
//
// How: decode is a pure stream of K and V, so the kernel is built around bytes in flight.
// One CTA = (KV split, KV head, sequence); its GQA group of query heads (<= 16) forms the 16 rows
// of one mma tile, so every K/V byte is read once for all heads that share it. The mainloop
// (cp.async pipeline, online softmax, fused last-CTA merge) is decode_split.cuh's, shared with
// sparse decode; this file gives it the key source "all keys of the sequence, in order"
// (DenseKeys) and plans the splits. The number of splits fills the GPU in one wave:
// n_kv_head * n_seq * n_splits ~= SMs * CTAs per SM. A sliding window (DecodeParams::window)
// streams only the tiles of each sequence's last `window` keys, and the plan splits those.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/decode_split.cuh"

namespace longctx::cuda {
namespace {

using namespace decode_split;

// Key source of dense decode: all keys 0..n of sequence b, in order, contiguous or paged.
struct DenseKeys {
  static constexpr bool kAllHeadDims = true;  // head_dim 16 and 32 too (decode_split.cuh with_variant)
  int64_t n_kv;               // the longest sequence (every sequence without kv_lens)
  const int32_t* kv_lens;     // optional per-sequence lengths
  const int32_t* page_table;  // optional: [n_seq][max_pages] page ids into the K/V pools
  int page_size, max_pages;
  int64_t kv_seq_stride;      // contiguous: elements between sequences
  int64_t ld_row;             // elements per pool row (n_kv_head * D)
  int tiles_per_split;        // fixed by the host plan for the longest sequence

  __device__ int64_t n_keys(int b, int) const { return kv_lens ? int64_t(kv_lens[b]) : n_kv; }
  __device__ int split_tiles(int64_t, int) const { return tiles_per_split; }
  struct Tile {
    int64_t first;  // element offset of the tile's first key
    int64_t ld_row;
    __device__ int64_t elem(int r) const { return first + r * ld_row; }
  };
  // A 64-key tile never straddles a page (page_size is a multiple of 64).
  __device__ Tile tile(int b, int, int64_t n0) const {
    if (!page_table) return {int64_t(b) * kv_seq_stride + n0 * ld_row, ld_row};
    const int64_t page = page_table[int64_t(b) * max_pages + n0 / page_size];
    return {(page * page_size + n0 % page_size) * ld_row, ld_row};
  }
};

constexpr int kDecodeBlockN = decode_split::kBlockN;

// Workspace: [counters: fixed 64 KB (decode_split.cuh)][o_part][lse_part].
struct WorkspaceLayout {
  size_t o_part, lse_part, total;  // byte offsets
};
WorkspaceLayout workspace_layout(int n_seq, int n_head, int head_dim, int64_t n_splits) {
  auto al = [](size_t x) { return (x + 255) & ~size_t(255); };
  WorkspaceLayout l{};
  const size_t rows = size_t(n_seq) * n_head;
  l.o_part = kCounterBytes;
  l.lse_part = l.o_part + al(rows * n_splits * head_dim * sizeof(float));
  l.total = l.lse_part + al(rows * n_splits * sizeof(float));
  return l;
}

// A windowed row streams at most window + one partial tile of keys.
int64_t streamed_keys(int64_t n_kv, int64_t window) {
  return window > 0 ? std::min(n_kv, window + kDecodeBlockN) : n_kv;
}

SplitPlan plan_dense(const DecodeParams& p) {
  return plan_splits<DenseKeys>(int64_t(p.n_seq) * p.n_kv_head, p.head_dim, p.kv_dtype == KvDtype::fp8_e4m3,
                                streamed_keys(p.n_kv, p.window), p.n_splits);
}

void check_decode(const DecodeParams& p) {
  LC_REQUIRE(p.q && p.k && p.v && p.o, "attention_decode: null q/k/v/o pointer");
  const bool wide = p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256;
  LC_REQUIRE(wide || ((p.head_dim == 16 || p.head_dim == 32) && p.kv_dtype == KvDtype::bf16),
             "attention_decode: head_dim %d unsupported (64, 128 or 256; 16 or 32 with a bf16 cache)", p.head_dim);
  LC_REQUIRE(p.window >= 0, "attention_decode: negative window %lld", (long long)p.window);
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 &&
                 p.n_head / p.n_kv_head <= kMaxGroup,
             "attention_decode: n_head %d / n_kv_head %d must be a positive integer <= %d", p.n_head, p.n_kv_head,
             kMaxGroup);
  LC_REQUIRE(p.kv_dtype == KvDtype::bf16 || (p.kv_dtype == KvDtype::fp8_e4m3 && p.k_scale > 0.f && p.v_scale > 0.f),
             "attention_decode: unknown kv_dtype %d or non-positive fp8 scales", int(p.kv_dtype));
  LC_REQUIRE(p.n_seq > 0 && p.n_kv > 0, "attention_decode: n_seq %d and n_kv %lld must be positive", p.n_seq,
             (long long)p.n_kv);
  LC_REQUIRE(p.n_seq <= 65535 && int64_t(p.n_seq) * p.n_kv_head <= kMaxCounters,
             "attention_decode: n_seq %d x n_kv_head %d exceeds %lld per launch", p.n_seq, p.n_kv_head,
             (long long)kMaxCounters);
  LC_REQUIRE(!p.page_table || (p.page_size > 0 && p.page_size % kDecodeBlockN == 0 && p.max_pages_per_seq > 0 &&
                               int64_t(p.max_pages_per_seq) * p.page_size >= p.n_kv),
             "attention_decode: paged KV needs page_size a multiple of %d (got %d) and max_pages_per_seq * "
             "page_size >= n_kv (%d * %d < %lld)",
             kDecodeBlockN, p.page_size, p.max_pages_per_seq, p.page_size, (long long)p.n_kv);
}

}  // namespace

int decode_num_splits(const DecodeParams& p) {
  check_decode(p);
  return plan_dense(p).n_splits;
}

size_t decode_workspace_bytes(int n_seq, int n_head, int head_dim, int64_t n_kv) {
  // Upper bound over any n_splits (at most one split per 64-key tile, at most kMaxSplits);
  // n_kv_head <= n_head bounds the counters.
  const int64_t n_tiles = std::max<int64_t>(1, (n_kv + kDecodeBlockN - 1) / kDecodeBlockN);
  return workspace_layout(n_seq, n_head, head_dim, std::min(n_tiles, kMaxSplits)).total;
}

void decode_workspace_init(void* workspace, size_t workspace_bytes, Stream s) {
  LC_REQUIRE(workspace, "decode_workspace_init: null workspace");
  LC_CUDA_CHECK(cudaMemsetAsync(workspace, 0, workspace_bytes, static_cast<cudaStream_t>(s)),
                "decode_workspace_init(%zu bytes)", workspace_bytes);
}

void attention_decode(const DecodeParams& p, Stream s) {
  check_decode(p);
  const bool fp8 = p.kv_dtype == KvDtype::fp8_e4m3;
  const SplitPlan plan = plan_dense(p);
  const WorkspaceLayout used = workspace_layout(p.n_seq, p.n_head, p.head_dim, plan.n_splits);
  LC_REQUIRE(p.workspace && p.workspace_bytes >= decode_workspace_bytes(p.n_seq, p.n_head, p.head_dim, p.n_kv),
             "attention_decode: workspace of %zu bytes given, %zu needed; size it with decode_workspace_bytes and "
             "zero it once with decode_workspace_init",
             p.workspace_bytes, decode_workspace_bytes(p.n_seq, p.n_head, p.head_dim, p.n_kv));
  DecodeArgs a{};
  a.q = static_cast<const bf16*>(p.q);
  a.k = p.k;
  a.v = p.v;
  char* ws = static_cast<char*>(p.workspace);
  a.o_part = reinterpret_cast<float*>(ws + used.o_part);
  a.lse_part = reinterpret_cast<float*>(ws + used.lse_part);
  a.counters = reinterpret_cast<int*>(ws);
  a.o = static_cast<bf16*>(p.o);
  a.lse = p.lse;
  a.n_head = p.n_head;
  a.group = p.n_head / p.n_kv_head;
  a.cta_heads = a.group;  // one unit per KV head: its whole GQA group
  a.n_splits = plan.n_splits;
  const float scale = p.scale > 0.f ? p.scale : 1.f / std::sqrt(float(p.head_dim));
  a.scale_log2 = scale * kLog2e * (fp8 ? p.k_scale : 1.f);
  a.v_scale = fp8 ? p.v_scale : 1.f;
  a.window = p.window;
  DenseKeys keys{};
  keys.n_kv = p.n_kv;
  keys.kv_lens = p.kv_lens;
  keys.page_table = p.page_table;
  keys.page_size = p.page_size;
  keys.max_pages = p.max_pages_per_seq;
  keys.ld_row = int64_t(p.n_kv_head) * p.head_dim;
  keys.kv_seq_stride = p.kv_seq_stride ? p.kv_seq_stride : p.n_kv * keys.ld_row;
  keys.tiles_per_split = plan.tiles_per_split;
  launch_split_kernel(a, keys, p.head_dim, fp8, p.n_kv_head, p.n_seq, static_cast<cudaStream_t>(s));
  LC_LAUNCH_CHECK("attn_decode_split_kernel<d=%d,fp8=%d> n_seq=%d n_kv=%lld heads=%d/%d splits=%d", p.head_dim, int(fp8),
                  p.n_seq, (long long)p.n_kv, p.n_head, p.n_kv_head, plan.n_splits);
}

}  // namespace longctx::cuda
