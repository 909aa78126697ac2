// minference_index.cu (cuda): MinferenceIndexBuilder (minference_index.h): validation, memory and
// the order of the stages; the kernels are in minference_{vs_estimate,select,block_sparse,csr}.cu.
//
// What build() does, on one stream:
//   1. per head: the pattern's budgets resolved as the CPU builders do (VS floors and clamps,
//      BS k_b, A-shape sink/window) into a small head table, uploaded with the VS batches (query
//      heads grouped by KV head) and, for block-sparse, every query block's row offset in the
//      score scratch;
//   2. vertical-slash heads: estimate (two passes over K) -> top-k_v columns, top-k_s offsets ->
//      slash gap lists;
//   3. block-sparse heads: pooled K (KV heads with a BS head) and query-block sums, then waves of
//      (scores -> per-row top-k) over a scratch small enough to stay in L2;
//   4. CSR: count per (head, block) -> CUB exclusive scans -> range_ptr / col_ptr; the two totals
//      are read back (the one stream synchronisation), storage grown if needed, then filled.
// Memory: the constructor allocates the shape-determined buffers (a "phase" region shared by the
// VS scores and the BS pooled/scratch data, never live at the same time; VS row statistics; CSR
// counts and pointers; CUB scratch; a pinned staging area). Budget/data-dependent buffers (lines,
// BS selections, ranges, columns, the attention workspace) grow on demand (GrowBuf).
#include "kernels/cuda/minference_index.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cub/device/device_scan.cuh>

#include "kernels/cuda/check.h"
#include "kernels/cuda/minference_kernels.cuh"

namespace longctx::cuda {
namespace {

using namespace mindex;

constexpr size_t kAlign = 256;
// Block-sparse score scratch per wave. Each wave is two kernel launches whose tails cost a few CTA
// latencies, so waves should be few; the select reads only ~1/8 of a row back
// (minference_select.cu), so L2 residency matters little. Measured on an H200 (1M keys, 32 BS
// heads, structured inputs): 128 MiB 160 waves 24.8 ms, 256 MiB 96 waves 22.7 ms, 512 MiB 64
// waves 21.4 ms; the builder's fixed memory 587 / 738 / 1040 MB (bench --bs-wave-mb).
constexpr int64_t kDefaultBsWaveBytes = int64_t(256) << 20;

size_t up(size_t x) { return (x + kAlign - 1) & ~(kAlign - 1); }
int64_t round4(int64_t x) { return (x + 3) & ~int64_t(3); }
int64_t round_row(int64_t x) { return (x + kBsRowPad - 1) / kBsRowPad * kBsRowPad; }  // BS scratch row length

// A device buffer that only grows (x1.5 at least), for sizes known only at build time.
struct GrowBuf {
  void* p = nullptr;
  size_t bytes = 0;
  void ensure(size_t need) {
    if (need <= bytes) return;
    const size_t nb = up(std::max(need, bytes + bytes / 2));
    dev_free(p);  // cudaFree synchronises the device: no kernel still reads the old buffer
    p = nullptr;
    bytes = 0;
    p = dev_malloc(nb);
    bytes = nb;
  }
  ~GrowBuf() { dev_free(p); }
};

// Sizes of everything the constructor allocates for a shape.
struct FixedLayout {
  int64_t max_qblk = 0, max_kb = 0, max_rows = 0;
  int64_t vs_stride = 0;        // floats per head row of vscore/sscore
  int64_t scratch_floats = 0;   // BS score scratch (one wave)
  size_t vs_bytes = 0, pk_bytes = 0, ksplit_bytes = 0, qsplit_bytes = 0, scratch_bytes = 0, gmax_bytes = 0;
  size_t kmax_bytes = 0, phase_bytes = 0;
  size_t part_bytes = 0, rowstat_bytes = 0, counts_bytes = 0, ptr_bytes = 0, gap_bytes = 0;
  size_t table_bytes = 0;       // heads + batches + bs_heads + cand_off (device mirror of staging)
  size_t heads_off = 0, batches_off = 0, bs_heads_off = 0, cand_off_off = 0;
  size_t cub_bytes = 0;
  size_t total = 0;
};

size_t cub_scan_bytes(int64_t items) {
  size_t bytes = 0;
  const cudaError_t e =
      cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                    items, cudaStream_t(nullptr));
  if (e != cudaSuccess) {  // no device to ask (memory plans on a CPU machine): a safe bound
    (void)cudaGetLastError();
    return size_t(items / 64 + 1024) * 16;
  }
  return bytes;
}

FixedLayout fixed_layout(const MinferenceBuilderShape& s) {
  FixedLayout l;
  l.max_qblk = (s.max_q + kBlk - 1) / kBlk;
  l.max_kb = (s.max_kv + kBlk - 1) / kBlk;
  l.max_rows = int64_t(s.n_head) * l.max_qblk;
  l.vs_stride = round4(s.max_kv);
  l.vs_bytes = up(size_t(l.vs_stride) * s.n_head * 4) * 2;
  l.pk_bytes = up(size_t(s.n_kv_head) * l.max_kb * s.head_dim * 4);      // fp32 pooled keys
  l.ksplit_bytes = up(size_t(s.n_kv_head) * l.max_kb * s.head_dim * 2);  // each of k hi, k lo (fp16)
  l.qsplit_bytes = up(size_t(s.n_head) * l.max_qblk * s.head_dim * 2);   // each of q hi, q lo (fp16)
  const int64_t wave = (s.bs_wave_bytes > 0 ? s.bs_wave_bytes : kDefaultBsWaveBytes) / 4;
  const int64_t all = int64_t(s.n_head) * l.max_qblk * round_row(l.max_kb);  // every row of every head
  l.scratch_floats = round_row(std::max(std::min(wave, all), round_row(l.max_kb)));  // at least one whole row
  l.scratch_bytes = up(size_t(l.scratch_floats) * 4);
  l.gmax_bytes = up(size_t(l.scratch_floats / kBsGroup) * 4);
  l.kmax_bytes = up(size_t(s.n_kv_head) * 4);
  l.phase_bytes = std::max(l.vs_bytes, l.pk_bytes + 2 * l.ksplit_bytes + 2 * l.qsplit_bytes + l.scratch_bytes +
                                           l.gmax_bytes + l.kmax_bytes);
  l.part_bytes = up(size_t(kVsMaxChunks) * s.n_head * kBlk * sizeof(float2));
  l.rowstat_bytes = up(size_t(s.n_head) * kBlk * sizeof(float2));
  l.counts_bytes = up(size_t(l.max_rows + 1) * 8) * 2;
  l.ptr_bytes = up(size_t(l.max_rows + 1) * 8) * 2;
  l.gap_bytes = up(size_t(s.n_head) * 2 * 4);
  l.heads_off = 0;
  l.batches_off = up(l.heads_off + size_t(s.n_head) * sizeof(HeadInfo));
  l.bs_heads_off = up(l.batches_off + size_t(s.n_head) * sizeof(VsBatch));
  l.cand_off_off = up(l.bs_heads_off + size_t(s.n_head) * 4);
  l.table_bytes = up(l.cand_off_off + size_t(l.max_qblk + 1) * 8);
  l.cub_bytes = up(cub_scan_bytes(l.max_rows + 1));
  l.total = l.phase_bytes + l.part_bytes + l.rowstat_bytes + l.counts_bytes + l.ptr_bytes + l.gap_bytes +
            l.table_bytes + l.cub_bytes;
  return l;
}

void check_shape(const MinferenceBuilderShape& s) {
  LC_REQUIRE(s.n_head > 0 && s.n_kv_head > 0 && s.n_head % s.n_kv_head == 0,
             "minference index: n_head %d must be a positive multiple of n_kv_head %d", s.n_head, s.n_kv_head);
  LC_REQUIRE(s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256,
             "minference index: head_dim %d unsupported (the GPU builders support 64, 128 and 256)", s.head_dim);
  LC_REQUIRE(s.max_q > 0 && s.max_kv > 0 && s.max_kv <= 0x7fffffff,
             "minference index: bad builder shape max_q=%lld max_kv=%lld", (long long)s.max_q, (long long)s.max_kv);
}

}  // namespace

struct MinferenceIndexBuilder::Impl {
  MinferenceBuilderShape shape;
  FixedLayout L;
  int num_sms = 0;
  // fixed device memory
  uint8_t* phase = nullptr;
  float2* part = nullptr;
  float2* rowstat = nullptr;
  int64_t *rcount = nullptr, *ccount = nullptr, *range_ptr = nullptr, *col_ptr = nullptr;
  int32_t* gap_count = nullptr;
  uint8_t* table = nullptr;  // device mirror of the pinned staging area
  void* cub_tmp = nullptr;
  size_t cub_tmp_bytes = 0;
  std::vector<void*> fixed;  // everything above, for the destructor
  uint8_t* stage = nullptr;  // pinned host: table staging + 2 totals
  int64_t* totals = nullptr;
  // grown on demand
  GrowBuf lines, bs_sel, ranges, cols, ws;
  // last build
  Geom g;
  std::vector<HeadInfo> heads;
  cudaStream_t stream = nullptr;
  DeviceSparseIndex index;
  int n_bs = 0;
  bool built = false;
  bool profiling = false;
  // Vertical-slash lines of the last estimate (estimate_vs() or a full build()): the key count
  // they were selected from (budget clamps, score rows) and every head's table entry, which a
  // build() with reuse_vs_lines must reproduce. 0 = none yet.
  int64_t vs_keys = 0;
  std::vector<HeadInfo> vs_heads;
  cudaEvent_t ev[4] = {nullptr, nullptr, nullptr, nullptr};
  // Profiling of the BS phase: events after pooling, then after each wave's score and select
  // kernels (pool_ms = ev[1] -> wev[0], score/select summed over the waves).
  std::vector<cudaEvent_t> wev;
  size_t n_wev = 0;
  int n_waves = 0;
  void record(cudaStream_t s) {
    if (n_wev == wev.size()) {
      cudaEvent_t e = nullptr;
      LC_CUDA_CHECK(cudaEventCreate(&e), "minference index: profiling event");
      wev.push_back(e);
    }
    LC_CUDA_CHECK(cudaEventRecord(wev[n_wev++], s), "minference index: profiling event");
  }

  ~Impl() {
    for (void* p : fixed) dev_free(p);
    dev_free(cub_tmp);
    if (stage) cudaFreeHost(stage);
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : wev) cudaEventDestroy(e);
  }
};

size_t MinferenceIndexBuilder::device_bytes(const MinferenceBuilderShape& shape) {
  check_shape(shape);
  return fixed_layout(shape).total;
}

MinferenceIndexBuilder::MinferenceIndexBuilder(const MinferenceBuilderShape& shape) : impl_(new Impl) {
  try {
    check_shape(shape);
    require_hopper();
    Impl& m = *impl_;
    m.shape = shape;
    m.L = fixed_layout(shape);
    m.num_sms = device_info(0).num_sms;
    auto take = [&](size_t bytes) {
      void* p = dev_malloc(std::max<size_t>(bytes, kAlign));
      m.fixed.push_back(p);
      return static_cast<uint8_t*>(p);
    };
    m.phase = take(m.L.phase_bytes);
    m.part = reinterpret_cast<float2*>(take(m.L.part_bytes));
    m.rowstat = reinterpret_cast<float2*>(take(m.L.rowstat_bytes));
    uint8_t* counts = take(m.L.counts_bytes);
    m.rcount = reinterpret_cast<int64_t*>(counts);
    m.ccount = reinterpret_cast<int64_t*>(counts + m.L.counts_bytes / 2);
    uint8_t* ptrs = take(m.L.ptr_bytes);
    m.range_ptr = reinterpret_cast<int64_t*>(ptrs);
    m.col_ptr = reinterpret_cast<int64_t*>(ptrs + m.L.ptr_bytes / 2);
    m.gap_count = reinterpret_cast<int32_t*>(take(m.L.gap_bytes));
    m.table = take(m.L.table_bytes);
    m.cub_tmp_bytes = m.L.cub_bytes;
    m.cub_tmp = dev_malloc(std::max<size_t>(m.cub_tmp_bytes, kAlign));
    LC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&m.stage), m.L.table_bytes + 64),
                  "minference index: %zu bytes of pinned staging", m.L.table_bytes + 64);
    m.totals = reinterpret_cast<int64_t*>(m.stage + m.L.table_bytes);
  } catch (...) {
    delete impl_;
    impl_ = nullptr;
    throw;
  }
}

MinferenceIndexBuilder::~MinferenceIndexBuilder() { delete impl_; }

void* MinferenceIndexBuilder::attention_workspace() const { return impl_->ws.p; }
size_t MinferenceIndexBuilder::attention_workspace_bytes() const { return impl_->ws.bytes; }

void MinferenceIndexBuilder::set_profiling(bool on) {
  Impl& m = *impl_;
  if (on && !m.ev[0])
    for (cudaEvent_t& e : m.ev) LC_CUDA_CHECK(cudaEventCreate(&e), "minference index: profiling event");
  m.profiling = on;
}

GpuIndexProfile MinferenceIndexBuilder::last_profile() const {
  const Impl& m = *impl_;
  GpuIndexProfile p;
  if (!m.profiling || !m.built) return p;
  LC_CUDA_CHECK(cudaEventSynchronize(m.ev[3]), "minference index: profile");
  LC_CUDA_CHECK(cudaEventElapsedTime(&p.vs_ms, m.ev[0], m.ev[1]), "minference index: profile");
  LC_CUDA_CHECK(cudaEventElapsedTime(&p.bs_ms, m.ev[1], m.ev[2]), "minference index: profile");
  LC_CUDA_CHECK(cudaEventElapsedTime(&p.csr_ms, m.ev[2], m.ev[3]), "minference index: profile");
  LC_CUDA_CHECK(cudaEventElapsedTime(&p.total_ms, m.ev[0], m.ev[3]), "minference index: profile");
  if (m.n_waves > 0 && m.n_wev == size_t(1 + 2 * m.n_waves)) {
    LC_CUDA_CHECK(cudaEventElapsedTime(&p.bs_pool_ms, m.ev[1], m.wev[0]), "minference index: profile");
    for (int w = 0; w < m.n_waves; ++w) {
      float a = 0.f, b = 0.f;
      LC_CUDA_CHECK(cudaEventElapsedTime(&a, m.wev[size_t(2 * w)], m.wev[size_t(2 * w + 1)]), "minference index: profile");
      LC_CUDA_CHECK(cudaEventElapsedTime(&b, m.wev[size_t(2 * w + 1)], m.wev[size_t(2 * w + 2)]), "minference index: profile");
      p.bs_score_ms += a;
      p.bs_select_ms += b;
    }
    p.bs_waves = m.n_waves;
  }
  return p;
}

DeviceSparseIndex MinferenceIndexBuilder::build(const MinferenceIndexParams& p, Stream stream) {
  return run(p, stream, p.reuse_vs_lines ? Mode::ReuseVs : Mode::Full);
}

void MinferenceIndexBuilder::estimate_vs(const MinferenceIndexParams& p, Stream stream) {
  LC_REQUIRE(!p.reuse_vs_lines, "minference index: estimate_vs() makes lines, it cannot reuse them");
  run(p, stream, Mode::EstimateVs);
}

DeviceSparseIndex MinferenceIndexBuilder::run(const MinferenceIndexParams& p, Stream stream, Mode mode) {
  Impl& m = *impl_;
  const MinferenceBuilderShape& sh = m.shape;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  m.built = false;
  m.n_wev = 0;
  m.n_waves = 0;
  // ---- validation --------------------------------------------------------------------------
  LC_REQUIRE(p.q && p.k, "minference index: q and k are required");
  LC_REQUIRE(reinterpret_cast<uintptr_t>(p.k) % 16 == 0 && reinterpret_cast<uintptr_t>(p.q) % 4 == 0,
             "minference index: k must be 16-byte and q 4-byte aligned");
  LC_REQUIRE(int64_t(p.heads.size()) == sh.n_head, "minference index: %zu head patterns for %d query heads",
             p.heads.size(), sh.n_head);
  LC_REQUIRE(p.n_q >= 1 && p.n_q <= sh.max_q, "minference index: n_q %lld outside [1, %lld] (builder's max_q)",
             (long long)p.n_q, (long long)sh.max_q);
  LC_REQUIRE(p.q_pos0 >= 0 && p.q_pos0 + p.n_q <= p.n_kv,
             "minference index: queries reach position %lld but only %lld keys are given (q_pos0 %lld, n_q %lld)",
             (long long)(p.q_pos0 + p.n_q - 1), (long long)p.n_kv, (long long)p.q_pos0, (long long)p.n_q);
  LC_REQUIRE(p.n_kv <= sh.max_kv, "minference index: n_kv %lld exceeds the builder's max_kv %lld",
             (long long)p.n_kv, (long long)sh.max_kv);

  Geom& g = m.g;
  g = Geom{};
  g.n_q = p.n_q;
  g.q_pos0 = p.q_pos0;
  g.n_keys = p.q_pos0 + p.n_q;
  g.n_kv = p.n_kv;
  g.n_qblk = (p.n_q + kBlk - 1) / kBlk;
  g.nkb = (g.n_keys + kBlk - 1) / kBlk;
  g.n_head = sh.n_head;
  g.n_kv_head = sh.n_kv_head;
  g.group = sh.n_head / sh.n_kv_head;
  g.head_dim = sh.head_dim;
  g.R = int(std::min<int64_t>(kBlk, p.n_q));
  g.rows_last = int(p.n_q - (g.n_qblk - 1) * kBlk);
  g.scale = p.scale > 0.f ? p.scale : 1.f / std::sqrt(float(sh.head_dim));

  // ---- head table ----------------------------------------------------------------------------
  LC_REQUIRE(mode != Mode::ReuseVs || m.vs_keys > 0, "minference index: reuse_vs_lines before any estimate_vs()");
  LC_REQUIRE(mode != Mode::ReuseVs || p.n_kv <= m.vs_keys,
             "minference index: reuse_vs_lines: the chunk sees %lld keys, the lines were selected from %lld",
             (long long)p.n_kv, (long long)m.vs_keys);
  // VS budgets are clamped to the keys the lines are selected from.
  const int64_t vs_keys = mode == Mode::ReuseVs ? m.vs_keys : g.n_keys;
  const FixedLayout& L = m.L;
  HeadInfo* h_heads = reinterpret_cast<HeadInfo*>(m.stage + L.heads_off);
  VsBatch* h_batches = reinterpret_cast<VsBatch*>(m.stage + L.batches_off);
  int32_t* h_bs_heads = reinterpret_cast<int32_t*>(m.stage + L.bs_heads_off);
  int64_t* h_cand_off = reinterpret_cast<int64_t*>(m.stage + L.cand_off_off);
  m.heads.assign(size_t(sh.n_head), HeadInfo{});
  int64_t lines_total = 0, sel_total = 0;
  int n_vs = 0, n_bs = 0;
  uint64_t kv_mask = 0;
  for (int h = 0; h < sh.n_head; ++h) {
    const GpuHeadPattern& hp = p.heads[size_t(h)];
    HeadInfo& hi = m.heads[size_t(h)];
    switch (hp.kind) {
      case GpuPatternKind::VerticalSlash:
        LC_REQUIRE(hp.vertical >= 0 && hp.slash >= 0, "minference index: head %d: negative vertical/slash budget (%lld, %lld)",
                   h, (long long)hp.vertical, (long long)hp.slash);
        hi.kind = kKindVS;
        hi.p0 = std::min(vs_keys, std::max(hp.vertical, kMinVertical));
        hi.p1 = std::min(vs_keys, std::max(hp.slash, kMinSlash));
        hi.off = lines_total;
        lines_total += hi.p0 + 3 * hi.p1;
        if (mode == Mode::ReuseVs) {
          const HeadInfo& e = m.vs_heads[size_t(h)];
          LC_REQUIRE(e.kind == kKindVS && e.p0 == hi.p0 && e.p1 == hi.p1 && e.off == hi.off,
                     "minference index: reuse_vs_lines: head %d's vertical-slash pattern differs from the one "
                     "estimate_vs() selected lines for", h);
        }
        ++n_vs;
        break;
      case GpuPatternKind::BlockSparse:
        LC_REQUIRE(hp.vertical >= 0, "minference index: head %d: negative block budget %lld", h, (long long)hp.vertical);
        hi.kind = kKindBS;
        hi.p0 = hp.vertical;
        hi.stride = std::min(g.nkb, std::max<int64_t>(hp.vertical, 2));  // >= every block's kk
        hi.off = sel_total;
        sel_total += g.n_qblk * hi.stride;
        hi.slot = n_bs;
        h_bs_heads[n_bs++] = h;
        kv_mask |= uint64_t(1) << ((h / g.group) & 63);
        break;
      case GpuPatternKind::AShape:
        LC_REQUIRE(hp.vertical >= 0 && hp.slash >= 0, "minference index: head %d: a_shape sink %lld and window %lld must be >= 0",
                   h, (long long)hp.vertical, (long long)hp.slash);
        hi.kind = kKindAS;
        hi.p0 = hp.vertical;
        hi.p1 = hp.slash;
        break;
      default:
        LC_REQUIRE(false, "minference index: head %d: unknown pattern kind %d", h, int(hp.kind));
    }
    h_heads[h] = hi;
  }
  int n_batches = 0;
  for (int hk = 0; hk < sh.n_kv_head; ++hk) {
    VsBatch bt;
    bt.hk = hk;
    for (int h = hk * g.group; h < (hk + 1) * g.group; ++h) {
      if (m.heads[size_t(h)].kind != kKindVS) continue;
      bt.h[bt.nh++] = h;
      if (bt.nh == kVsHeadsPerCta) h_batches[n_batches++] = bt, bt.nh = 0;
    }
    if (bt.nh > 0) h_batches[n_batches++] = bt;
  }
  int64_t span_head = 0;
  if (n_bs > 0) {
    h_cand_off[0] = 0;
    for (int64_t b = 0; b < g.n_qblk; ++b) h_cand_off[b + 1] = h_cand_off[b] + round_row(bs_n_cand(g, b));
    span_head = h_cand_off[g.n_qblk];
  }
  const size_t table_used = n_bs > 0 ? L.cand_off_off + size_t(g.n_qblk + 1) * 8 : L.cand_off_off;
  LC_CUDA_CHECK(cudaMemcpyAsync(m.table, m.stage, table_used, cudaMemcpyHostToDevice, s),
                "minference index: head table upload");
  const HeadInfo* d_heads = reinterpret_cast<const HeadInfo*>(m.table + L.heads_off);
  const VsBatch* d_batches = reinterpret_cast<const VsBatch*>(m.table + L.batches_off);
  const int32_t* d_bs_heads = reinterpret_cast<const int32_t*>(m.table + L.bs_heads_off);
  const int64_t* d_cand_off = reinterpret_cast<const int64_t*>(m.table + L.cand_off_off);

  m.lines.ensure(size_t(std::max<int64_t>(lines_total, 1)) * 4);
  m.bs_sel.ensure(size_t(std::max<int64_t>(sel_total, 1)) * 4);
  int32_t* lines = static_cast<int32_t*>(m.lines.p);
  int32_t* bs_sel = static_cast<int32_t*>(m.bs_sel.p);
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);
  const auto* k = static_cast<const __nv_bfloat16*>(p.k);

  if (m.profiling) LC_CUDA_CHECK(cudaEventRecord(m.ev[0], s), "minference index: profiling event");
  // ---- vertical-slash --------------------------------------------------------------------------
  if (n_vs > 0) {
    VsEstimateArgs a;
    a.q = q;
    a.k = k;
    a.heads = d_heads;
    a.batches = d_batches;
    a.n_batches = n_batches;
    a.part = m.part;
    a.rowstat = m.rowstat;
    a.vscore = reinterpret_cast<float*>(m.phase);
    a.sscore = reinterpret_cast<float*>(m.phase + L.vs_bytes / 2);
    a.stride = L.vs_stride;
    a.g = g;
    if (mode == Mode::ReuseVs) {
      vs_gaps(d_heads, lines, m.gap_count, g, s);  // the cut lists depend on this chunk's last block
    } else {
      vs_chunking(g.n_keys, n_batches, m.num_sms, a.chunk_keys, a.n_chunks);
      vs_estimate(a, s);
      vs_select(d_heads, a.vscore, a.sscore, a.stride, lines, m.gap_count, g, s);
    }
  }
  if (mode != Mode::ReuseVs) {
    m.vs_keys = g.n_keys;
    m.vs_heads = m.heads;
  }
  if (mode == Mode::EstimateVs) {
    m.stream = s;
    return DeviceSparseIndex{};
  }
  if (m.profiling) LC_CUDA_CHECK(cudaEventRecord(m.ev[1], s), "minference index: profiling event");
  // ---- block-sparse ---------------------------------------------------------------------------
  if (n_bs > 0) {
    // Phase region, BS layout: pk | khi | klo | qhi | qlo | scratch | gmax | kmax.
    uint8_t* at = m.phase;
    auto take = [&](size_t bytes) {
      uint8_t* p0 = at;
      at += bytes;
      return p0;
    };
    BsPooled po;
    po.pk = reinterpret_cast<float*>(take(L.pk_bytes));
    po.khi = reinterpret_cast<__half*>(take(L.ksplit_bytes));
    po.klo = reinterpret_cast<__half*>(take(L.ksplit_bytes));
    po.qhi = reinterpret_cast<__half*>(take(L.qsplit_bytes));
    po.qlo = reinterpret_cast<__half*>(take(L.qsplit_bytes));
    float* scratch = reinterpret_cast<float*>(take(L.scratch_bytes));
    float* gmax = reinterpret_cast<float*>(take(L.gmax_bytes));
    po.kmax = reinterpret_cast<int32_t*>(take(L.kmax_bytes));
    bs_pool(q, k, d_bs_heads, n_bs, kv_mask, po, g, s);
    if (m.profiling) m.record(s);  // after pooling
    BsScoreArgs sa;
    sa.khi = po.khi;
    sa.klo = po.klo;
    sa.qhi = po.qhi;
    sa.qlo = po.qlo;
    sa.bs_heads = d_bs_heads;
    sa.cand_off = d_cand_off;
    sa.scratch = scratch;
    sa.gmax = gmax;
    sa.g = g;
    BsSelectArgs ta;
    ta.heads = d_heads;
    ta.bs_heads = d_bs_heads;
    ta.cand_off = d_cand_off;
    ta.scratch = scratch;
    ta.gmax = gmax;
    ta.sel = bs_sel;
    ta.g = g;
    ta.rows_in_global = sh.bs_rows_in_global;
    auto wave = [&](int s0, int s1, int64_t b0, int64_t b1) {
      sa.s0 = ta.s0 = s0;
      sa.s1 = ta.s1 = s1;
      sa.b0 = ta.b0 = b0;
      sa.b1 = ta.b1 = b1;
      sa.span = ta.span = h_cand_off[b1] - h_cand_off[b0];
      bs_scores_wave(sa, s);
      if (m.profiling) m.record(s);  // score | select
      bs_select_wave(ta, s);
      if (m.profiling) m.record(s);
      ++m.n_waves;
    };
    const int64_t cap = L.scratch_floats;
    if (span_head * n_bs <= cap) {
      wave(0, n_bs, 0, g.n_qblk);
    } else if (span_head <= cap) {
      const int per = int(cap / span_head);
      for (int s0 = 0; s0 < n_bs; s0 += per) wave(s0, std::min(n_bs, s0 + per), 0, g.n_qblk);
    } else {
      for (int slot = 0; slot < n_bs; ++slot)
        for (int64_t b0 = 0; b0 < g.n_qblk;) {
          int64_t b1 = b0 + 1;
          while (b1 < g.n_qblk && h_cand_off[b1 + 1] - h_cand_off[b0] <= cap) ++b1;
          wave(slot, slot + 1, b0, b1);
          b0 = b1;
        }
    }
  }
  if (m.profiling) LC_CUDA_CHECK(cudaEventRecord(m.ev[2], s), "minference index: profiling event");
  // ---- CSR ------------------------------------------------------------------------------------
  CsrArgs ca;
  ca.heads = d_heads;
  ca.lines = lines;
  ca.gap_count = m.gap_count;
  ca.bs_sel = bs_sel;
  ca.rcount = m.rcount;
  ca.ccount = m.ccount;
  ca.range_ptr = m.range_ptr;
  ca.col_ptr = m.col_ptr;
  ca.g = g;
  csr_count(ca, s);
  const int64_t n_rows = int64_t(sh.n_head) * g.n_qblk;
  size_t need = 0;
  LC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, need, m.rcount, m.range_ptr, n_rows + 1, s),
                "minference index: scan size");
  if (need > m.cub_tmp_bytes) {
    dev_free(m.cub_tmp);
    m.cub_tmp = nullptr;
    m.cub_tmp = dev_malloc(need);
    m.cub_tmp_bytes = need;
  }
  size_t tb = m.cub_tmp_bytes;
  LC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(m.cub_tmp, tb, m.rcount, m.range_ptr, n_rows + 1, s),
                "minference index: range scan rows=%lld", (long long)n_rows);
  tb = m.cub_tmp_bytes;
  LC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(m.cub_tmp, tb, m.ccount, m.col_ptr, n_rows + 1, s),
                "minference index: column scan rows=%lld", (long long)n_rows);
  LC_CUDA_CHECK(cudaMemcpyAsync(&m.totals[0], m.range_ptr + n_rows, 8, cudaMemcpyDeviceToHost, s),
                "minference index: totals");
  LC_CUDA_CHECK(cudaMemcpyAsync(&m.totals[1], m.col_ptr + n_rows, 8, cudaMemcpyDeviceToHost, s),
                "minference index: totals");
  LC_CUDA_CHECK(cudaStreamSynchronize(s), "minference index: build (n_q=%lld n_kv=%lld q_pos0=%lld)",
                (long long)p.n_q, (long long)p.n_kv, (long long)p.q_pos0);
  const int64_t n_ranges = m.totals[0], n_cols = m.totals[1];
  m.ranges.ensure(size_t(std::max<int64_t>(2 * n_ranges, 1)) * 4);
  m.cols.ensure(size_t(std::max<int64_t>(n_cols, 1)) * 4);
  DeviceSparseIndex& idx = m.index;
  idx.n_index_head = sh.n_head;
  idx.n_qblk = g.n_qblk;
  idx.range_ptr = m.range_ptr;
  idx.ranges = static_cast<const int32_t*>(m.ranges.p);
  idx.col_ptr = m.col_ptr;
  idx.cols = static_cast<const int32_t*>(m.cols.p);
  idx.n_ranges = n_ranges;
  idx.n_cols = n_cols;
  m.ws.ensure(sparse_attention_workspace_bytes(idx));
  ca.ranges = static_cast<int32_t*>(m.ranges.p);
  ca.cols = static_cast<int32_t*>(m.cols.p);
  csr_fill(ca, s);
  if (m.profiling) LC_CUDA_CHECK(cudaEventRecord(m.ev[3], s), "minference index: profiling event");
  m.stream = s;
  m.n_bs = n_bs;
  m.built = true;
  return idx;
}

GpuHeadSelection MinferenceIndexBuilder::selection(int h, bool with_scores) const {
  const Impl& m = *impl_;
  LC_REQUIRE(m.built, "minference index: selection() before any build()");
  LC_REQUIRE(h >= 0 && h < m.shape.n_head, "minference index: head %d outside [0, %d)", h, m.shape.n_head);
  LC_CUDA_CHECK(cudaStreamSynchronize(m.stream), "minference index: selection");
  const HeadInfo& hi = m.heads[size_t(h)];
  GpuHeadSelection out;
  out.kind = GpuPatternKind(hi.kind);
  const auto* lines = static_cast<const int32_t*>(m.lines.p);
  if (hi.kind == kKindVS) {
    out.vertical.resize(size_t(hi.p0));
    out.slash.resize(size_t(hi.p1));
    copy_d2h(out.vertical.data(), lines + hi.off, size_t(hi.p0) * 4);
    copy_d2h(out.slash.data(), lines + hi.off + hi.p0, size_t(hi.p1) * 4);
    if (with_scores) {
      LC_REQUIRE(m.n_bs == 0, "minference index: VS scores are gone once block-sparse heads reused their memory");
      out.vertical_score.resize(size_t(m.vs_keys));
      out.slash_score.resize(size_t(m.vs_keys));
      const auto* vs = reinterpret_cast<const float*>(m.phase) + int64_t(h) * m.L.vs_stride;
      const auto* ss = reinterpret_cast<const float*>(m.phase + m.L.vs_bytes / 2) + int64_t(h) * m.L.vs_stride;
      copy_d2h(out.vertical_score.data(), vs, out.vertical_score.size() * 4);
      copy_d2h(out.slash_score.data(), ss, out.slash_score.size() * 4);
    }
  } else if (hi.kind == kKindBS) {
    std::vector<int32_t> all(size_t(m.g.n_qblk * hi.stride));
    copy_d2h(all.data(), static_cast<const int32_t*>(m.bs_sel.p) + hi.off, all.size() * 4);
    out.block_ptr.push_back(0);
    for (int64_t b = 0; b < m.g.n_qblk; ++b) {
      const int64_t kk = bs_kk(m.g, b, hi.p0);
      out.blocks.insert(out.blocks.end(), all.begin() + b * hi.stride, all.begin() + b * hi.stride + kk);
      out.block_ptr.push_back(int64_t(out.blocks.size()));
    }
  }
  return out;
}

}  // namespace longctx::cuda
