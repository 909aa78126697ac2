// infinitehip_gpu.cpp: InfiniteHiP's GPU builder (prefill and decode; rope=on through attend()).
// Per sparse prefill step of a layer: stage i (ihip_stage(hp, layer, i)) runs
// cuda::ihip_prune_stage_prefill over every 64-query block of the chunk (stage 0 from the block's
// candidate range, stage i from stage i-1's lists), then cuda::ihip_prefill_index turns the last
// stage's lists into the sparse index (sinks, one range per l_c-run, pads, window): the key sets of
// InfiniteHipMethod::build_index with rope=off (tests/cuda/test_ihip_gpu.cpp checks the stages and
// the index against the CPU reference).
// Memory, for chunks of C queries (B = ceil(C / 64) blocks) against `capacity` keys: per stage
// B * cap_i survivors (cap_i = the stage's largest k over the layers), the chunk scores
// B * n_kv_head * max_chunks (fp32), B * (2 + cap_last / l_c_last) ranges and the sparse kernel's
// workspace for them.
// Per sparse decode step of a layer (one sequence): cuda::ihip_decode_plan decides on the device
// which stages refresh (InfiniteHipMethod::decode_set's rule: kernels/cuda/ihip_decode_cache.h),
// then every stage runs cuda::ihip_prune_stage_decode into a scratch list (a stage that does not
// refresh gets no candidates and returns at once) and cuda::ihip_decode_commit copies a refreshed
// one into the layer's cache; cuda::ihip_decode_index writes the index from the last stage's cache
// and the layer's window start. The same kernels run at every step: one captured CUDA graph
// serves every step type. Decode memory: per layer every stage's cache (cap_i entries) and its
// refresh positions; shared: the scratch lists, the chunk scores of the largest stage at
// `capacity` keys, one sequence's index and the sparse decode workspace.
// rope=on (attend): the same stages on the un-rotated cache (decode: bf16 or the fp8 cache's e4m3,
// dequantised by the scorers and the gather) with the layer's pruning RoPE table
// (ihip_rope_table's values, one per RoPE frequency table, built at its first step); a prefill
// block's key set is assembled on the host from the last stage's list (ihip_key_set) and a decode
// step's on the device (cuda::ihip_decode_keys: graph-safe), then IhipCompactAttention attends it
// at StreamingLLM positions. Dense steps (dense layers, short contexts) attend every key at its own
// position through the same gather (what the CPU's select_keys + attend_compacted_ref do).
// rank=local: every stage's kernels get an offsets workspace (prefill [n_blk, n_head * 64], decode
// [n_head]); the stage entry points run the offsets kernel first, and the prefill scores on the
// scorer the paper's rule would take (tensor cores where a KV head's block queries fit one tile:
// kernels/cuda/ihip_prune.h).
#include "methods/infinitehip/infinitehip_gpu.h"

#include <fmt/format.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <vector>

#include "kernels/cuda/ihip_decode_cache.h"
#include "kernels/cuda/ihip_prune.h"
#include "kernels/cuda/sparse_decode.h"
#include "methods/gpu_carve.h"
#include "methods/infinitehip/infinitehip_attend_gpu.h"
#include "util/error.h"

namespace longctx {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The pruning stages' RoPE (ihip_prune.h's IhipRopeMode as an int, the layer's cos/sin table).
struct RopeArgs {
  int mode = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t n_pos = 0;
};

struct Layout {
  int64_t n_blk = 0;
  std::vector<int64_t> cap;         // [N] survivors per block of stage i (its largest k)
  std::vector<size_t> out, out_len; // [N] offsets
  int64_t max_chunks = 0;           // the largest stage's chunk bound (sizes the scores)
  size_t scores = 0, range_ptr = 0, ranges = 0, col_ptr = 0, workspace = 0, workspace_bytes = 0;
  int64_t ranges_per_blk = 0;
  // Decode (one sequence): per layer caches [n_layer][cap_i] and state, shared scratch.
  std::vector<size_t> cache;        // [N] offsets of [n_layer, cap_i]
  std::vector<size_t> scratch;      // [N] offsets of [cap_i]
  std::vector<int64_t> dec_chunks;  // [N] each stage's chunk bound at decode
  size_t cache_len = 0, refresh_pos = 0, win_begin = 0;  // [n_layer, N], [n_layer, N], [n_layer]
  size_t scratch_len = 0, refreshes = 0, in_len = 0, stage0_len = 0, counts = 0;  // [N], [N], [N], [1], [N + 1]
  size_t dec_scores = 0, d_range_ptr = 0, d_ranges = 0, d_col_ptr = 0, d_workspace = 0, d_workspace_bytes = 0;
  int64_t dec_ranges = 0;   // ranges of the decode index (one sequence)
  int64_t max_keys = 0;     // most keys a decode row attends
  // rope=on: per-block key lists of a prefill chunk [n_blk, pre_keys_per_blk], the decode key list
  // [max_keys], its length and the query's position, the one-page view's block table (0), and a
  // decode length for a step that has none on the device.
  size_t pre_keys = 0, dec_keys = 0, n_keys = 0, q_pos = 0, zero = 0, host_len = 0;
  int64_t pre_keys_per_blk = 0;
  // rank=local: the stages' offsets, prefill [n_blk, n_head * 64] and decode [n_head].
  size_t pre_offset = 0, dec_offset = 0;
  size_t total = 0;
};

class IhipGpu final : public GpuMethod {
 public:
  IhipGpu(IhipParams hp, MethodContext model) : hp_(hp), model_(std::move(model)), method_(std::move(hp)) {}
  ~IhipGpu() override { release(); }

  // rope=on adds the compacted attention's buffers and one RoPE table (a model whose layers use
  // several RoPE bases gets one table per base, allocated at its first step).
  size_t device_bytes(const GpuShape& shape) const override {
    size_t b = layout(shape).total;
    if (hp_.rope)
      b += IhipCompactAttention::bytes(shape.model, shape.chunk, shape.capacity) +
           2 * size_t(ihip_rope_positions(hp_, shape.capacity)) * size_t(shape.model.head_dim / 2) * 4;
    return b;
  }
  void allocate(const GpuShape& shape, cuda::Stream s) override {
    release();
    l_ = layout(shape);
    capacity_ = shape.capacity;
    n_pos_ = ihip_rope_positions(hp_, shape.capacity);
    buf_ = static_cast<char*>(cuda::dev_malloc(l_.total));
    cuda::memset_async(buf_ + l_.zero, 0, 4, s);
    if (hp_.rope) att_.allocate(shape.model, shape.chunk, shape.capacity, s);
    cuda::memset_async(buf_ + l_.cache_len, 0, size_t(model_.n_layer * hp_.n_stage()) * 4, s);
    start_sequence(s);
    cuda::sparse_decode_workspace_init(buf_ + l_.d_workspace, l_.d_workspace_bytes, s);
  }
  // The decode caches belong to one sequence: forgotten when the next one starts.
  bool keeps_sequence_state() const override { return true; }
  void start_sequence(cuda::Stream s) override {
    if (!buf_) return;
    cuda::memset_async(buf_ + l_.refresh_pos, 0xff, size_t(model_.n_layer * hp_.n_stage()) * 4, s);  // -1: none
    cuda::memset_async(buf_ + l_.counts, 0, size_t(hp_.n_stage() + 1) * 4, s);
  }
  bool decodes() const override { return true; }
  // The e4m3 cache at decode: rope=off through the step's KvView (the pruning stages and
  // cuda::sparse_decode); rope=on through GpuAttendStep::kv_fp8 (the stages' one-page view and
  // IhipCompactAttention's gather dequantise it).
  bool decode_reads_fp8() const override { return true; }
  GpuDecodeIndex build_decode(const GpuDecodeStep& st, cuda::Stream s) override;
  IhipGpuDecodeCounts decode_counts(cuda::Stream s) const {
    const int N = hp_.n_stage();
    std::vector<int32_t> c(size_t(N + 1));
    if (buf_) cuda::copy_d2h(c.data(), buf_ + l_.counts, c.size() * 4, s);
    IhipGpuDecodeCounts out;
    out.refreshes.assign(c.begin(), c.begin() + N);
    out.cached_steps = c[size_t(N)];
    return out;
  }
  void release() override {
    cuda::dev_free(buf_);
    buf_ = nullptr;
    att_.release();
    for (auto& [f, t] : tables_) cuda::dev_free(t.cos), cuda::dev_free(t.sin);
    tables_.clear();
  }
  bool attends() const override { return hp_.rope; }
  void attend(const GpuAttendStep& st, cuda::Stream s) override {
    if (!buf_) fail("internal: infinitehip attend before allocate()");
    if (st.n_q <= 0 || st.n_kv < st.n_q || st.n_kv > capacity_ || st.layer < 0 || st.layer >= model_.n_layer)
      fail("internal: infinitehip attend of {} rows over {} keys, layer {} (capacity {})", st.n_q, st.n_kv, st.layer,
           capacity_);
    const bool decode = st.phase == Phase::decode && st.n_q == 1;
    if (st.kv_fp8 && !decode)
      fail("internal: infinitehip got e4m3 rows for a {}-row prefill step (staged bf16 expected)", st.n_q);
    if (decode)
      attend_decode(st, s);
    else
      attend_prefill(st, s);
  }

  GpuIndex build_prefill(const GpuPrefillStep& st, cuda::Stream s) override {
    if (hp_.rope) fail("internal: infinitehip with rope=on attends through attend(), not a sparse index");
    prefill_stages(st, RopeArgs{}, s);
    const int N = hp_.n_stage();
    const int64_t n_blk = ceil_div(st.n_q, cuda::kSparseQBlock);
    cuda::IhipPrefillIndexParams ip;
    ip.sel = at<int32_t>(l_.out[size_t(N - 1)]);
    ip.sel_len = at<int32_t>(l_.out_len[size_t(N - 1)]);
    ip.sel_cap = l_.cap[size_t(N - 1)];
    ip.l_c = hp_.stages.back().l_c;
    ip.n_q = st.n_q;
    ip.q_pos0 = st.q_pos0;
    ip.n_sink = hp_.n_sink;
    ip.n_stream = hp_.n_stream;
    ip.range_ptr = at<int64_t>(l_.range_ptr);
    ip.ranges = at<int32_t>(l_.ranges);
    ip.col_ptr = at<int64_t>(l_.col_ptr);
    cuda::ihip_prefill_index(ip, s);
    GpuIndex g;
    g.index.n_index_head = 1;
    g.index.n_qblk = n_blk;
    g.index.range_ptr = ip.range_ptr;
    g.index.ranges = ip.ranges;
    g.index.col_ptr = ip.col_ptr;
    g.index.cols = nullptr;
    g.index.n_ranges = n_blk * ip.ranges_per_blk();
    g.index.n_cols = 0;
    g.workspace = buf_ + l_.workspace;
    g.workspace_bytes = l_.workspace_bytes;
    return g;
  }

 private:
  // The pruning stages of a prefill chunk: the last stage's lists per 64-query block in out[N-1].
  void prefill_stages(const GpuPrefillStep& st, const RopeArgs& r, cuda::Stream s) {
    if (!buf_) fail("internal: infinitehip prefill with no buffers");
    const int64_t n_blk = ceil_div(st.n_q, cuda::kSparseQBlock);
    if (n_blk > l_.n_blk || st.n_kv > capacity_)
      fail("internal: infinitehip prefill of {} queries / {} keys in buffers for {} blocks / {} keys", st.n_q, st.n_kv,
           l_.n_blk, capacity_);
    cuda::IhipPrefillGpuParams p;
    p.q = st.q;
    p.k = st.k;
    p.n_q = st.n_q;
    p.n_kv = st.n_kv;
    p.q_pos0 = st.q_pos0;
    p.n_head = model_.n_head;
    p.n_kv_head = model_.n_kv_head;
    p.head_dim = model_.head_dim;
    p.rope_mode = r.mode;  // 0 (rope=off): the cache's rotated keys; else un-rotated q and k
    p.rope_cos = r.cos;
    p.rope_sin = r.sin;
    p.rope_n_pos = r.n_pos;
    p.n_sink = hp_.n_sink;
    p.n_stream = hp_.n_stream;
    p.offset = local() ? at<float>(l_.pre_offset) : nullptr;  // rank=local
    const int N = hp_.n_stage();
    // Stage 0's candidates of the chunk's last block bound every block's.
    const int64_t q_last = st.q_pos0 + st.n_q - 1;
    int64_t n_cand = ihip_candidate_end(hp_, q_last) - hp_.n_sink;
    for (int i = 0; i < N; ++i) {
      const IhipStage stage = ihip_stage(hp_, st.layer, i);
      cuda::IhipPrefillStage ps;
      ps.l_c = stage.l_c;
      ps.k = stage.k;
      ps.in = i ? at<int32_t>(l_.out[size_t(i - 1)]) : nullptr;
      ps.in_len = i ? at<int32_t>(l_.out_len[size_t(i - 1)]) : nullptr;
      ps.in_cap = i ? l_.cap[size_t(i - 1)] : 0;
      ps.out = at<int32_t>(l_.out[size_t(i)]);
      ps.out_len = at<int32_t>(l_.out_len[size_t(i)]);
      ps.out_cap = l_.cap[size_t(i)];
      ps.scores = at<float>(l_.scores);
      ps.max_chunks = std::max<int64_t>(1, ceil_div(n_cand, stage.l_c));
      cuda::ihip_prune_stage_prefill(p, ps, s);
      n_cand = std::min(n_cand, stage.k);
    }
  }

  template <class T>
  T* at(size_t off) const { return reinterpret_cast<T*>(buf_ + off); }
  bool local() const { return hp_.rank == IhipRank::local; }
  // Layer state [n_layer, N] at offset off, and the layer's cache of stage i.
  int32_t* layer_state(size_t off, int layer) const { return at<int32_t>(off) + int64_t(layer) * hp_.n_stage(); }
  int32_t* cache(int layer, int i) const { return at<int32_t>(l_.cache[size_t(i)]) + int64_t(layer) * l_.cap[size_t(i)]; }
  // Every stage of a decode step (plan, stages, commits): the layer's caches follow the step.
  void decode_stages(int layer, const KvView& kv, const void* q, const RopeArgs& r, cuda::Stream s);
  // rope=on (attend): the layer's RoPE table for the pruning stages, and the two phases.
  RopeArgs rope_args(int layer, const float* inv_freq, cuda::Stream s);
  void attend_prefill(const GpuAttendStep& st, cuda::Stream s);
  void attend_decode(const GpuAttendStep& st, cuda::Stream s);

  Layout layout(const GpuShape& shape) const {
    Layout l;
    Carve c;
    const int N = hp_.n_stage();
    l.n_blk = std::max<int64_t>(1, ceil_div(shape.chunk, cuda::kSparseQBlock));
    int64_t n_cand = std::max<int64_t>(1, shape.capacity - hp_.n_sink);  // stage-0 candidates, at most
    for (int i = 0; i < N; ++i) {
      int64_t cap = hp_.stages[size_t(i)].k;
      for (int layer = 0; layer < shape.model.n_layer; ++layer) cap = std::max(cap, ihip_stage(hp_, layer, i).k);
      l.cap.push_back(cap);
      l.max_chunks = std::max(l.max_chunks, ceil_div(n_cand, hp_.stages[size_t(i)].l_c));
      l.out.push_back(c.take(size_t(l.n_blk * cap) * 4));
      l.out_len.push_back(c.take(size_t(l.n_blk) * 4));
      n_cand = std::min(n_cand, cap);
    }
    l.scores = c.take(size_t(l.n_blk * shape.model.n_kv_head * l.max_chunks) * 4);
    l.ranges_per_blk = 2 + l.cap.back() / hp_.stages.back().l_c;
    l.range_ptr = c.take(size_t(l.n_blk + 1) * 8);
    l.ranges = c.take(size_t(l.n_blk * l.ranges_per_blk) * 8);
    l.col_ptr = c.take(size_t(l.n_blk + 1) * 8);
    cuda::DeviceSparseIndex worst;
    worst.n_index_head = 1;
    worst.n_qblk = l.n_blk;
    worst.n_ranges = l.n_blk * l.ranges_per_blk;
    l.workspace_bytes = cuda::sparse_attention_workspace_bytes(worst);
    l.workspace = c.take(l.workspace_bytes);
    decode_layout(shape, c, l);
    l.total = c.off;
    return l;
  }

  void decode_layout(const GpuShape& shape, Carve& c, Layout& l) const {
    const int N = hp_.n_stage();
    const int64_t L = shape.model.n_layer;
    int64_t max_last_k = 0, most_chunks = 1;
    for (int layer = 0; layer < L; ++layer) max_last_k = std::max(max_last_k, hp_.last_k(layer));
    for (int i = 0; i < N; ++i) {
      // Stage 0's candidates are fewer than the capacity; stage i's are stage i-1's survivors.
      const int64_t n_cand = i ? l.cap[size_t(i - 1)] : std::max<int64_t>(1, shape.capacity - hp_.n_sink);
      l.dec_chunks.push_back(std::max<int64_t>(1, ceil_div(n_cand, hp_.stages[size_t(i)].l_c)));
      most_chunks = std::max(most_chunks, l.dec_chunks.back());
      l.cache.push_back(c.take(size_t(L * l.cap[size_t(i)]) * 4));
      l.scratch.push_back(c.take(size_t(l.cap[size_t(i)]) * 4));
    }
    l.cache_len = c.take(size_t(L * N) * 4);
    l.refresh_pos = c.take(size_t(L * N) * 4);
    l.win_begin = c.take(size_t(L) * 4);
    l.scratch_len = c.take(size_t(N) * 4);
    l.refreshes = c.take(size_t(N) * 4);
    l.in_len = c.take(size_t(N) * 4);
    l.stage0_len = c.take(4);
    l.counts = c.take(size_t(N + 1) * 4);
    l.dec_scores = c.take(size_t(most_chunks) * 4);
    l.dec_ranges = 2 + l.cap.back() / hp_.stages.back().l_c;  // IhipIndexGpuParams::ranges_per_seq
    l.d_range_ptr = c.take(2 * 4);
    l.d_col_ptr = c.take(2 * 4);
    l.d_ranges = c.take(size_t(l.dec_ranges) * 8);
    // Sinks, the last stage's survivors and a window grown by up to refresh[0] - 1 keys.
    l.max_keys = std::min<int64_t>(hp_.n_sink + max_last_k + hp_.n_stream + hp_.refresh[0],
                                   std::max<int64_t>(shape.capacity, 1));
    cuda::SparseDecodeBounds b;
    b.n_seq = 1;
    b.n_head = shape.model.n_head;
    b.n_index_head = 1;
    b.head_dim = shape.model.head_dim;
    b.max_keys_per_row = l.max_keys;
    b.range_capacity = l.dec_ranges;
    b.col_capacity = 0;
    l.d_workspace_bytes = cuda::sparse_decode_workspace_bytes(b);
    l.d_workspace = c.take(l.d_workspace_bytes);
    // A prefill block's key set: sinks, the last stage's survivors, the n_stream window.
    l.pre_keys_per_blk = hp_.n_sink + l.cap.back() + hp_.n_stream;
    l.pre_keys = c.take(size_t(l.n_blk * l.pre_keys_per_blk) * 4);
    l.dec_keys = c.take(size_t(l.max_keys) * 4);
    l.n_keys = c.take(4);
    l.q_pos = c.take(4);
    l.zero = c.take(4);
    l.host_len = c.take(4);
    if (hp_.rank == IhipRank::local) {
      l.pre_offset = c.take(size_t(l.n_blk * shape.model.n_head * cuda::kSparseQBlock) * 4);
      l.dec_offset = c.take(size_t(shape.model.n_head) * 4);
    }
  }

  struct DevTable {
    float* cos = nullptr;  // [n_pos_, head_dim / 2]
    float* sin = nullptr;
  };

  IhipParams hp_;
  MethodContext model_;
  InfiniteHipMethod method_;  // its route(): the CPU's, step for step
  Layout l_;
  int64_t capacity_ = 0, n_pos_ = 0;
  char* buf_ = nullptr;
  IhipCompactAttention att_;                 // rope=on
  std::map<const float*, DevTable> tables_;  // rope=on: device inv_freq -> its pruning table
  std::vector<int32_t> host_keys_;           // rope=on prefill: the blocks' key sets uploaded last
};

void IhipGpu::decode_stages(int layer, const KvView& kv, const void* q, const RopeArgs& r, cuda::Stream s) {
  if (!buf_) fail("internal: infinitehip decode with no buffers");
  if (!q) fail("internal: infinitehip decode needs the step's queries (GpuDecodeStep::q)");
  if (kv.n_seq != 1) fail("internal: infinitehip decode of {} sequences (its caches hold one)", kv.n_seq);
  if (layer < 0 || layer >= model_.n_layer) fail("internal: infinitehip decode of layer {}", layer);
  const int N = hp_.n_stage();

  cuda::IhipDecodePlanParams pp;
  pp.seq_len = kv.seq_lens;
  pp.n_stage = N;
  for (int i = 0; i < N; ++i) pp.refresh[i] = hp_.refresh[size_t(i)];
  pp.n_sink = hp_.n_sink;
  pp.n_stream = hp_.n_stream;
  pp.min_k = ihip_min_k(hp_, layer);
  pp.refresh_pos = layer_state(l_.refresh_pos, layer);
  pp.win_begin = at<int32_t>(l_.win_begin) + layer;
  pp.cache_len = layer_state(l_.cache_len, layer);
  pp.refreshes = at<int32_t>(l_.refreshes);
  pp.stage0_len = at<int32_t>(l_.stage0_len);
  pp.in_len = at<int32_t>(l_.in_len);
  pp.counts = at<int32_t>(l_.counts);
  cuda::ihip_decode_plan(pp, s);

  KvView kv0 = kv;  // stage 0 reads its candidate range from this length: 0 when it does not refresh
  kv0.seq_lens = pp.stage0_len;
  for (int i = 0; i < N; ++i) {
    const IhipStage stage = ihip_stage(hp_, layer, i);
    cuda::IhipStageGpuParams p;
    p.l_c = stage.l_c;
    p.k = stage.k;
    p.rope_mode = r.mode;  // 0 (rope=off): the cache's rotated keys and the step's rotated query
    p.rope_cos = r.cos;
    p.rope_sin = r.sin;
    p.rope_n_pos = r.n_pos;
    p.n_sink = hp_.n_sink;
    p.n_stream = hp_.n_stream;
    p.q = q;
    p.kv = i ? kv : kv0;
    p.n_head = model_.n_head;
    p.in = i ? cache(layer, i - 1) : nullptr;
    p.in_len = i ? pp.in_len + i : nullptr;
    p.in_cap = i ? l_.cap[size_t(i - 1)] : 0;
    p.out = at<int32_t>(l_.scratch[size_t(i)]);
    p.out_len = at<int32_t>(l_.scratch_len) + i;
    p.out_cap = l_.cap[size_t(i)];
    p.scores = at<float>(l_.dec_scores);
    p.max_chunks = l_.dec_chunks[size_t(i)];
    p.offset = local() ? at<float>(l_.dec_offset) : nullptr;
    cuda::ihip_prune_stage_decode(p, s);
    cuda::IhipDecodeCommitParams cp;
    cp.stage = i;
    cp.n_stage = N;
    cp.refreshes = pp.refreshes;
    cp.out = p.out;
    cp.out_len = p.out_len;
    cp.cache = cache(layer, i);
    cp.cache_len = layer_state(l_.cache_len, layer);
    cp.cap = l_.cap[size_t(i)];
    cp.in_len = pp.in_len;
    cuda::ihip_decode_commit(cp, s);
  }
}

GpuDecodeIndex IhipGpu::build_decode(const GpuDecodeStep& st, cuda::Stream s) {
  decode_stages(st.layer, st.kv, st.q, RopeArgs{}, s);
  const int N = hp_.n_stage(), layer = st.layer;
  cuda::IhipIndexGpuParams ip;
  ip.sel = cache(layer, N - 1);
  ip.sel_len = layer_state(l_.cache_len, layer) + (N - 1);
  ip.sel_cap = l_.cap[size_t(N - 1)];
  ip.l_c = hp_.stages.back().l_c;
  ip.n_sink = hp_.n_sink;
  ip.win_begin = at<int32_t>(l_.win_begin) + layer;
  ip.n_seq = 1;
  ip.range_ptr = at<int32_t>(l_.d_range_ptr);
  ip.ranges = at<int32_t>(l_.d_ranges);
  ip.col_ptr = at<int32_t>(l_.d_col_ptr);
  cuda::ihip_decode_index(ip, s);
  GpuDecodeIndex g;
  g.index.n_seq = 1;
  g.index.n_index_head = 1;
  g.index.range_ptr = ip.range_ptr;
  g.index.ranges = ip.ranges;
  g.index.col_ptr = ip.col_ptr;
  g.index.cols = nullptr;
  g.index.range_capacity = l_.dec_ranges;
  g.index.col_capacity = 0;
  g.index.on_device = true;
  g.max_keys_per_row = l_.max_keys;
  g.workspace = buf_ + l_.d_workspace;
  g.workspace_bytes = l_.d_workspace_bytes;
  return g;
}


RopeArgs IhipGpu::rope_args(int layer, const float* inv_freq, cuda::Stream s) {
  RopeArgs r;
  r.mode = int(hp_.rope_mode(layer));
  if (r.mode == 0) return r;
  auto it = tables_.find(inv_freq);
  if (it == tables_.end()) {  // first step of this frequency table: built on the host (ihip_rope_table)
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(s), &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone)
      fail("internal: infinitehip builds its RoPE table during a CUDA graph capture (run one step eagerly first)");
    const int half = model_.head_dim / 2;
    std::vector<float> f(static_cast<size_t>(half));
    cuda::copy_d2h(f.data(), inv_freq, f.size() * 4, s);
    cuda::stream_sync(s);
    const IhipRopeTable t = ihip_rope_table(f.data(), model_.head_dim, n_pos_);
    DevTable d;
    d.cos = static_cast<float*>(cuda::dev_malloc(t.cos.size() * 4));
    d.sin = static_cast<float*>(cuda::dev_malloc(t.sin.size() * 4));
    cuda::copy_h2d(d.cos, t.cos.data(), t.cos.size() * 4, s);
    cuda::copy_h2d(d.sin, t.sin.data(), t.sin.size() * 4, s);
    cuda::stream_sync(s);  // t leaves scope
    it = tables_.emplace(inv_freq, d).first;
  }
  r.cos = it->second.cos;
  r.sin = it->second.sin;
  r.n_pos = n_pos_;
  return r;
}

// A prefill chunk (rows n_kv - n_q .. n_kv - 1): a dense step attends every key at its own
// position; a sparse one prunes (the pruning RoPE of the layer), then each 64-row block attends
// its key set at 0..L-1 (select_keys + attend_compacted_ref on the CPU). The blocks' key sets are
// assembled on the host from the last stage's lists (one sync per layer and chunk: the only one;
// the blocks' lanes fork and join on the device).
void IhipGpu::attend_prefill(const GpuAttendStep& st, cuda::Stream s) {
  const int layer = st.layer;
  const int64_t T = st.n_q, q_pos0 = st.n_kv - T;
  const RopeArgs r = rope_args(layer, st.inv_freq, s);  // also before a dense step: decode captures need it
  IhipCompactRows rows{.q = st.q, .o = st.o, .n_rows = T, .keys = att_.iota(), .n_keys = st.n_kv, .k = st.k, .v = st.v,
                       .inv_freq = st.inv_freq, .rope_factor = st.rope_factor, .scale = st.scale};
  const AttnStep step{.layer = layer, .phase = st.phase, .n_q = T, .q_pos0 = q_pos0, .n_kv = st.n_kv};
  if (method_.route(step) == Route::dense) {
    att_.attend_rows(rows, s);
    return;
  }
  prefill_stages({.layer = layer, .q = st.q, .k = st.k, .n_q = T, .q_pos0 = q_pos0, .n_kv = st.n_kv}, r, s);
  const int N = hp_.n_stage();
  const int64_t n_blk = ceil_div(T, cuda::kSparseQBlock), cap = l_.cap[size_t(N - 1)], per = l_.pre_keys_per_blk;
  std::vector<int32_t> lens(static_cast<size_t>(n_blk)), sel(static_cast<size_t>(n_blk * cap));
  cuda::copy_d2h(lens.data(), at<int32_t>(l_.out_len[size_t(N - 1)]), lens.size() * 4, s);
  cuda::copy_d2h(sel.data(), at<int32_t>(l_.out[size_t(N - 1)]), sel.size() * 4, s);
  cuda::stream_sync(s);
  // A member, rewritten only after this sync (which follows the last step's upload from it on s):
  // the upload below may read it after this call returns.
  std::vector<int32_t>& keys = host_keys_;
  keys.assign(static_cast<size_t>(n_blk * per), 0);
  std::vector<int64_t> n_keys(static_cast<size_t>(n_blk));
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t row0 = b * cuda::kSparseQBlock, n = std::min<int64_t>(cuda::kSparseQBlock, T - row0);
    const int32_t* first = sel.data() + b * cap;
    const std::vector<int32_t> set =
        ihip_key_set(hp_, q_pos0 + row0 + n - 1, std::vector<int32_t>(first, first + lens[size_t(b)])).keys();
    if (int64_t(set.size()) > per) fail("internal: infinitehip block key set of {} keys over {}", set.size(), per);
    std::copy(set.begin(), set.end(), keys.begin() + b * per);
    n_keys[size_t(b)] = int64_t(set.size());
  }
  int32_t* d_keys = at<int32_t>(l_.pre_keys);
  cuda::copy_h2d(d_keys, keys.data(), keys.size() * 4, s);
  std::vector<IhipCompactBlock> blocks(static_cast<size_t>(n_blk));
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t row0 = b * cuda::kSparseQBlock;
    blocks[size_t(b)] = {.row0 = row0, .n_rows = std::min<int64_t>(cuda::kSparseQBlock, T - row0),
                         .keys = d_keys + b * per, .n_keys = n_keys[size_t(b)]};
  }
  const int64_t max_keys = *std::max_element(n_keys.begin(), n_keys.end());  // <= per, <= n_kv
  // Stream-ordered (events, no host wait): the next step's work on s, e.g. its key sets into
  // l_.pre_keys, runs after these blocks.
  att_.attend_blocks(rows, blocks.data(), n_blk, max_keys, s);
}

// A decode step, graph-safe: the route is taken at the step's bound (a replay sees lengths up to
// it; a step the CPU routes dense at its real length gets every key from the stages, see
// ihip_decode_cache.h), the stages with the layer's pruning RoPE, the key list and its length on
// the device, then the compacted decode attention over it.
void IhipGpu::attend_decode(const GpuAttendStep& st, cuda::Stream s) {
  const int layer = st.layer, N = hp_.n_stage();
  const int64_t bound = std::min(std::max(st.n_kv_bound, st.n_kv), capacity_);
  const int32_t* len_dev = st.n_kv_dev;
  if (!len_dev) {  // an eager single-token step: its length to the device
    const int32_t n = int32_t(st.n_kv);
    cuda::copy_h2d(at<int32_t>(l_.host_len), &n, 4, s);
    cuda::stream_sync(s);
    len_dev = at<int32_t>(l_.host_len);
  }
  cuda::IhipDecodeKeysParams kp;
  kp.seq_len = len_dev;
  kp.n_keys = at<int32_t>(l_.n_keys);
  kp.q_pos = at<int32_t>(l_.q_pos);
  IhipCompactDecode d{.q = st.q, .o = st.o, .keys = att_.iota(), .bound = bound, .n_keys_dev = kp.n_keys,
                      .q_pos_dev = kp.q_pos, .k = st.k, .v = st.v, .inv_freq = st.inv_freq,
                      .rope_factor = st.rope_factor, .scale = st.scale, .kv_fp8 = st.kv_fp8,
                      .k_scale = st.k_scale, .v_scale = st.v_scale};
  const AttnStep step{.layer = layer, .phase = Phase::decode, .n_q = 1, .q_pos0 = bound - 1, .n_kv = bound};
  if (method_.route(step) == Route::sparse) {
    KvView kv;
    kv.k_pool = st.k;
    kv.v_pool = st.v;
    kv.elem = st.kv_fp8 ? KvElem::fp8_e4m3 : KvElem::bf16;
    kv.k_scale = st.kv_fp8 ? st.k_scale : 1.f;
    kv.v_scale = st.kv_fp8 ? st.v_scale : 1.f;
    kv.block_table = at<int32_t>(l_.zero);
    kv.seq_lens = len_dev;
    kv.n_seq = 1;
    kv.max_pages_per_seq = 1;
    kv.page_size = int(capacity_);
    kv.n_pages = 1;
    kv.n_kv_head = model_.n_kv_head;
    kv.head_dim = model_.head_dim;
    kv.on_device = true;
    decode_stages(layer, kv, st.q, rope_args(layer, st.inv_freq, s), s);
    kp.sel = cache(layer, N - 1);
    kp.sel_len = layer_state(l_.cache_len, layer) + (N - 1);
    kp.win_begin = at<int32_t>(l_.win_begin) + layer;
    kp.n_sink = hp_.n_sink;
    kp.keys = at<int32_t>(l_.dec_keys);
    kp.cap = l_.max_keys;
    d.keys = kp.keys;
    d.bound = l_.max_keys;
  }
  cuda::ihip_decode_keys(kp, s);
  att_.attend_decode(d, s);
}
}  // namespace

IhipGpuDecodeCounts infinitehip_gpu_decode_counts(const GpuMethod& g, cuda::Stream s) {
  const auto* m = dynamic_cast<const IhipGpu*>(&g);
  if (!m) fail("internal: not InfiniteHiP's GPU method");
  return m->decode_counts(s);
}

std::string infinitehip_gpu_problem(const InfiniteHipMethod& m, const MethodContext& model) {
  const IhipParams& hp = m.params();
  if (hp.n_stage() > cuda::kIhipMaxStages)
    return fmt::format("infinitehip on the GPU runs at most {} stages (got {})", cuda::kIhipMaxStages, hp.n_stage());
  if ((model.head_dim != 64 && model.head_dim != 128 && model.head_dim != 256) || model.n_head % model.n_kv_head != 0)
    return fmt::format("infinitehip on the GPU needs head_dim 64, 128 or 256 (and GQA groups), but {} has head_dim {} "
                       "({} / {} heads)",
                       model.model_name, model.head_dim, model.n_head, model.n_kv_head);
  return "";
}

std::unique_ptr<GpuMethod> make_infinitehip_gpu(const InfiniteHipMethod& m, const MethodContext& model) {
  if (const std::string why = infinitehip_gpu_problem(m, model); !why.empty()) fail("{}", why);
  return std::make_unique<IhipGpu>(m.params(), model);
}

}  // namespace longctx
