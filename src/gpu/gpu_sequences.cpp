// gpu_sequences.cpp: the several-sequences half of GpuTransformer (declared in
// gpu_transformer.h, "Several sequences"): the shared KV pool and its sequences (reserve,
// reserve_pool, new_sequence whole or growing, attach, pages taken and given back), and the
// batched decode step (decode_batch: one step of n sequences, a CUDA graph per row count).
// Tested by tests/gpu/test_gpu_batch.cpp and test_gpu_batch_serve.cpp; timed by bench/bench_gpu_batch.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "gpu/gpu_ops.h"
#include "gpu/gpu_transformer.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sparse_decode.h"
#include "kv/cuda/device_kv_cache.h"
#include "util/error.h"

namespace longctx::gpu {

namespace {

constexpr size_t kBf16 = 2;

// The batched step's device buffer (batch_buf_) for `rows` rows: ids, positions, K and V rows.
struct BatchLayout {
  size_t ids = 0, pos = 0, k = 0, v = 0, total = 0;
};
BatchLayout batch_layout(const ModelConfig& c, int64_t rows) {
  const size_t kv_row = size_t(c.n_kv_head) * size_t(c.head_dim) * kBf16;
  BatchLayout b;
  b.pos = align_up(size_t(rows) * sizeof(int32_t));
  b.k = b.pos + align_up(size_t(rows) * sizeof(int32_t));
  b.v = b.k + align_up(size_t(rows) * kv_row);
  b.total = b.v + align_up(size_t(rows) * kv_row);
  return b;
}

// The plan of a pool for growing sequences: pool_tokens in all (whole pages), one sequence up to
// max_capacity, step_rows rows a step (at most the arena's logit rows).
SequencesPlan growing_plan(int64_t pool_tokens, int64_t max_capacity, int step_rows, int64_t logit_rows) {
  SequencesPlan p;
  p.pool_tokens = kv::pages_for_tokens(std::max<int64_t>(pool_tokens, 1), kKvPageTokens) * kKvPageTokens;
  p.max_capacity = kv::pages_for_tokens(std::max<int64_t>(max_capacity, 1), kKvPageTokens) * kKvPageTokens;
  p.step_rows = int(std::clamp<int64_t>(step_rows, 1, std::max<int64_t>(logit_rows, 1)));
  p.n_seq = p.step_rows;
  p.asked = pool_tokens;
  return p;
}

}  // namespace

size_t GpuTransformer::batch_buffer_bytes() const { return batch_layout(cfg_, layout_.logit_rows).total; }

GpuSequence::~GpuSequence() {
  try {
    if (model) model->release_pages(*this);
  } catch (...) {  // a destructor must not throw
  }
}

int64_t GpuTransformer::external_sequences() const {
  return pool_ ? pool_->n_sequences() - (own_.id >= 0 ? 1 : 0) : 0;
}

size_t GpuTransformer::held_kv_bytes() const {
  return external_sequences() > 0 ? 0 : kv_bytes_ + decode_ws_bytes_ + sparse_bytes_ + stage_layout_.total;
}

void GpuTransformer::allocate_pool(const SequencesPlan& p) {
  if (external_sequences() > 0)
    fail("the GPU KV pool cannot be reallocated while {} sequences hold pages in it; free them first",
         external_sequences());
  free_kv();
  try {
    pool_ = std::make_unique<kv::DeviceKvCache>(pool_spec(cfg_, p, kv_type_));
    kv_bytes_ = size_t(pool_->sizes().total_bytes);
    stage_layout_ = stage_layout(cfg_, p.max_capacity, kv_type_, layer_major_);
    if (stage_layout_.total) stage_ = cuda::dev_malloc(stage_layout_.total);
    decode_ws_bytes_ = decode_ws_bytes(cfg_, p.max_capacity, p.step_rows);
    decode_ws_ = cuda::dev_malloc(decode_ws_bytes_);
    cuda::decode_workspace_init(decode_ws_, decode_ws_bytes_, stream_);
    pool_plan_ = p;
    if (const size_t sb = sparse_bytes(p.max_capacity, p.step_rows); sb > 0) {
      gpu_method_->allocate(method_shape(p.max_capacity, p.step_rows), stream_);
      sparse_bytes_ = sb;
    }
  } catch (...) {
    free_kv();  // all or nothing: no cache without the buffers it needs
    throw;
  }
}

bool GpuTransformer::try_take_pages(GpuSequence& s, int64_t capacity, int64_t contiguous) {
  if (!pool_ || s.id >= 0) return false;
  if (contiguous < 0 || contiguous > capacity) contiguous = capacity;
  const int64_t rows = kv::pages_for_tokens(std::max<int64_t>(contiguous, 1), kKvPageTokens) * kKvPageTokens;
  if (kv::pages_for_tokens(capacity, kKvPageTokens) * kKvPageTokens > pool_plan_.max_capacity) return false;
  const bool alone = pool_->n_sequences() == 0;  // no sequence shares the pool's fp8 scales
  const kv::SeqId id = pool_->create_sequence();
  try {
    pool_->reserve_contiguous(id, rows);
  } catch (const Error&) {
    pool_->free_sequence(id);
    return false;
  }
  s.id = id;
  s.len = 0;
  s.cap_req = capacity;
  s.rows = pool_->capacity(id);
  s.base_row = pool_->contiguous_base_row(id);
  s.broken = false;
  if (alone) {  // fp8: the next prefill sets the scales (see the header)
    k_scale_.assign(size_t(cfg_.n_layer), 0.f);
    v_scale_.assign(size_t(cfg_.n_layer), 0.f);
    invalidate_graphs();  // a captured step holds the old scales
  }
  return true;
}

void GpuTransformer::release_pages(GpuSequence& s) {
  if (s.id < 0 || !pool_) {
    s.id = -1;
    return;
  }
  if (pool_->batch_row(s.id) >= 0) pool_->set_batch(std::span<const kv::SeqId>{});
  pool_->free_sequence(s.id);
  s.id = -1;
  s.len = 0;
  s.cap_req = 0;
  if (seq_ == &s) seq_ = &own_;
}

std::string GpuTransformer::sequences_fit_problem(std::span<const int64_t> capacities) const {
  return plan_fit_problem(plan_sequences(capacities, layout_.logit_rows));
}

std::string GpuTransformer::plan_fit_problem(const SequencesPlan& p) const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cannot query free GPU memory (cudaMemGetInfo failed)";
  }
  return gpu::sequences_fit_problem(cfg_, p, free_b + held_kv_bytes(), w_.bytes() + layout_.total, device_name_,
                                    sparse_bytes(p.max_capacity, p.step_rows), kv_type_, layer_major_);
}

std::string GpuTransformer::pool_fit_problem(int64_t pool_tokens, int64_t max_capacity, int step_rows) const {
  return plan_fit_problem(growing_plan(pool_tokens, max_capacity, step_rows, layout_.logit_rows));
}

void GpuTransformer::reserve_pool(int64_t pool_tokens, int64_t max_capacity, int step_rows) {
  if (pool_tokens <= 0 || max_capacity <= 0 || step_rows <= 0)
    fail("reserve_pool: {} tokens, sequences up to {}, {} rows a step (all must be positive)", pool_tokens,
         max_capacity, step_rows);
  reserve_plan(growing_plan(pool_tokens, max_capacity, step_rows, layout_.logit_rows));
}

GpuTransformer::PoolUse GpuTransformer::pool_use() const {
  PoolUse u;
  if (!pool_) return u;
  u.pages = pool_->spec().n_pages;
  u.free_pages = pool_->free_pages();
  u.longest_free_run = pool_->longest_free_run();
  u.max_capacity = pool_plan_.max_capacity;
  return u;
}

void GpuTransformer::reserve_sequences(std::span<const int64_t> capacities) {
  if (capacities.empty()) fail("reserve_sequences: no sequences");
  for (int64_t c : capacities)
    if (c <= 0) fail("KV cache capacity must be positive (got {})", c);
  reserve_plan(plan_sequences(capacities, layout_.logit_rows));
}

void GpuTransformer::reserve_plan(const SequencesPlan& p) {
  if (offload_opts_.on)
    fail("--kv-offload serves one sequence at a time (its host tier holds one sequence's K/V): no pool of several");
  if (external_sequences() > 0)
    fail("reserve_sequences: {} sequences still hold pages of the GPU KV pool; free them first", external_sequences());
  if (seq_ != &own_) fail("reserve_sequences: a sequence is attached; attach(nullptr) first");
  release_pages(own_);
  const bool grows = !pool_ || p.pool_tokens > pool_plan_.pool_tokens || p.max_capacity > pool_plan_.max_capacity ||
                     p.step_rows > pool_plan_.step_rows;
  if (grows) {
    const std::string problem = plan_fit_problem(p);
    if (!problem.empty()) fail("{}", problem);
    allocate_pool(p);
  }
  note_memory();
}

std::unique_ptr<GpuSequence> GpuTransformer::new_sequence(int64_t capacity) { return new_sequence(capacity, capacity); }

std::unique_ptr<GpuSequence> GpuTransformer::new_sequence(int64_t capacity, int64_t contiguous) {
  if (capacity <= 0) fail("KV cache capacity must be positive (got {})", capacity);
  if (contiguous <= 0 || contiguous > capacity)
    fail("new_sequence: {} contiguous tokens of a sequence of {} (must be 1..{})", contiguous, capacity, capacity);
  if (offload_opts_.on) fail("--kv-offload serves the model's own sequence only (reset + forward), not new_sequence");
  auto s = std::make_unique<GpuSequence>();
  if (!try_take_pages(*s, capacity, contiguous))
    fail("new_sequence: the GPU KV pool has no run of free pages for {} tokens ({} of {} pages of {} tokens free, "
         "longest run {} pages, longest sequence {}); reserve_sequences with every sequence's capacity first",
         contiguous, pool_ ? pool_->free_pages() : 0, pool_ ? pool_->spec().n_pages : 0, kKvPageTokens,
         pool_ ? pool_->longest_free_run() : 0, pool_plan_.max_capacity);
  s->model = this;
  return s;
}

void GpuTransformer::attach(GpuSequence* s) {
  if (s && s->model != this) fail("attach: the sequence belongs to another model");
  if (s && s->id < 0) fail("attach: the sequence holds no pages (its pool was freed)");
  seq_ = s ? s : &own_;
}

KvView GpuTransformer::pool_view(int l) const {
  KvView kv = pool_->view(l);  // n_seq = the batch set by batch_step
  if (kv_type_ == KvCacheType::fp8) {  // the model's scales (the pool's own stay unset: see the header)
    kv.k_scale = k_scale_[size_t(l)];
    kv.v_scale = v_scale_[size_t(l)];
  }
  return kv;
}

void GpuTransformer::decode_batch(std::span<GpuSequence* const> seqs, std::span<const int32_t> ids,
                                  std::vector<float>& logits) {
  const int64_t n = int64_t(seqs.size()), V = cfg_.vocab_size;
  if (n == 0) return;
  if (int64_t(ids.size()) != n) fail("decode_batch: {} sequences but {} token ids", n, ids.size());
  if (!batches_decode())
    fail("decode_batch: '{}' keeps per-sequence decode state on the GPU; decode one sequence at a time", attn_spec_);
  for (int64_t i = 0; i < n; ++i) {
    const GpuSequence* s = seqs[size_t(i)];
    if (!s) fail("decode_batch: sequence {} is null", i);
    for (int64_t j = 0; j < i; ++j)
      if (seqs[size_t(j)] == s) fail("decode_batch: sequence {} is given twice (rows {} and {})", j, j, i);
    if ((s->model != this && s != &own_) || s->id < 0 || !pool_)
      fail("decode_batch: sequence {} holds no pages of this model's KV pool", i);
    if (s->broken) fail("decode_batch: sequence {} was interrupted by an earlier error", i);
    if (s->len + 1 > s->cap_req)
      fail("decode_batch: sequence {} holds {} tokens, its KV cache {}: no room for one more", i, s->len, s->cap_req);
    if (ids[size_t(i)] < 0 || ids[size_t(i)] >= V)
      fail("decode_batch: token id {} (row {}) is outside the vocabulary (size {})", ids[size_t(i)], i, V);
  }
  if (kv_type_ == KvCacheType::fp8 && k_scale_[0] <= 0.f)
    fail("decode_batch: the fp8 KV cache's scales are not set yet; prefill the sequences first");
  logits.resize(size_t(n * V));
  const int64_t rows = pool_plan_.step_rows;
  for (int64_t g0 = 0; g0 < n; g0 += rows) {
    const int64_t m = std::min(rows, n - g0);
    batch_step(seqs.subspan(size_t(g0), size_t(m)), ids.subspan(size_t(g0), size_t(m)), logits.data() + g0 * V);
  }
}

void GpuTransformer::batch_step(std::span<GpuSequence* const> seqs, std::span<const int32_t> ids, float* logits) {
  const int n = int(seqs.size());
  const BatchLayout bl = batch_layout(cfg_, layout_.logit_rows);
  std::vector<kv::SeqId> batch;
  std::vector<int32_t> host(bl.pos / sizeof(int32_t) + size_t(n), 0);  // ids at 0, positions at bl.pos
  int32_t* pos = host.data() + bl.pos / sizeof(int32_t);
  int64_t longest = 0;
  for (int i = 0; i < n; ++i) {
    GpuSequence& s = *seqs[size_t(i)];
    pool_->append(s.id, s.len + 1 - pool_->length(s.id));  // the pool's length: prefills kept only s.len
    batch.push_back(s.id);
    host[size_t(i)] = ids[size_t(i)];
    pos[i] = int32_t(s.len);
    longest = std::max(longest, s.len + 1);
  }
  for (GpuSequence* s : seqs) s->broken = true;  // until the step is done
  pool_->set_batch(batch);
  pool_->sync_tables(stream_);  // block tables and seq_lens (after the append) for this step
  cuda::copy_h2d(batch_buf_, host.data(), host.size() * sizeof(int32_t), stream_);
  // The plan's key count: the longest sequence rounded up to whole tiles, as decode_token.
  const int64_t tiles = (longest + kDecodePlanKeys - 1) / kDecodePlanKeys;
  const int64_t plan_kv = std::min(tiles * kDecodePlanKeys, pool_plan_.max_capacity);
  BatchGraph& bg = batch_graphs_[size_t(n)];
  bool replayed = false;
  if (use_graph_ && bg.warmed) {
    try {
      if (!bg.graph) bg.graph = std::make_unique<cuda::CudaGraph>();
      if (bg.tiles != tiles) {
        bg.tiles = -1;
        bg.graph->begin_capture(stream_);
        try {
          batch_kernels(n, plan_kv);
        } catch (...) {
          cudaGraph_t g = nullptr;  // end the broken capture so the stream works again
          (void)cudaStreamEndCapture(static_cast<cudaStream_t>(stream_), &g);
          if (g) (void)cudaGraphDestroy(g);
          throw;
        }
        bg.graph->end_capture(stream_);
        bg.tiles = tiles;
        ++batch_captures_;
      }
      bg.graph->launch(stream_);
      replayed = true;
    } catch (const Error& e) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "note: CUDA graph batched decode failed (%s); decoding eagerly from now on\n", e.what());
      use_graph_ = false;
    }
  }
  if (!replayed) {
    batch_kernels(n, plan_kv);
    bg.warmed = true;
  }
  copy_logits(n, logits);  // syncs the stream: the tables' host copies may change again
  for (GpuSequence* s : seqs) {
    s->len += 1;
    s->broken = false;
  }
}

void GpuTransformer::batch_kernels(int n, int64_t plan_kv) {
  int32_t* d_ids = static_cast<int32_t*>(batch_buf_);
  embed(d_ids, act(layout_.x), n);
  for (int l = 0; l < cfg_.n_layer; ++l) batch_layer(l, n, plan_kv);
  lm_head_device(act(layout_.x), n);
}

void GpuTransformer::batch_layer(int l, int n, int64_t plan_kv) {
  const BatchLayout bl = batch_layout(cfg_, layout_.logit_rows);
  char* buf = static_cast<char*>(batch_buf_);
  const int32_t* d_pos = reinterpret_cast<const int32_t*>(buf + bl.pos);  // [n] each row's position
  void* x = act(layout_.x);  // [n, E] one row per sequence
  void* q = act(layout_.q);  // [n, Q]
  void* o = act(layout_.o);  // [n, Q]
  void* k_rows = buf + bl.k;  // [n, n_kv_head*head_dim] the new keys, before they go to the pool
  void* v_rows = buf + bl.v;  // [n, n_kv_head*head_dim]
  const KvView kv = pool_view(l);  // n sequences, lengths including this step's token

  project({.l = l, .T = n, .positions = d_pos, .x = x, .q = q, .k = k_rows, .v = v_rows});
  kv::KvScatterParams sc;  // row i -> sequence i's last position (seq_lens[i] - 1), bf16 or e4m3
  sc.view = kv;
  sc.k_pool = pool_->k_pool(l);
  sc.v_pool = pool_->v_pool(l);
  sc.k_new = k_rows;
  sc.v_new = v_rows;
  sc.first_row = 0;
  sc.n_seq = n;
  sc.n_new = 1;
  kv::kv_scatter(sc, stream_);
  if (sparse_step({.layer = l, .phase = Phase::decode, .n_q = 1, .q_pos0 = plan_kv - 1, .n_kv = plan_kv})) {
    sparse_decode_attention(l, q, o, kv);
  } else {
    cuda::DecodeParams dp;  // one launch: n sequences through the block table, own lengths
    dp.q = q;
    dp.k = kv.k_pool;
    dp.v = kv.v_pool;
    dp.o = o;
    dp.n_seq = n;
    dp.n_kv = plan_kv;  // sizes the split plan; sequence i attends kv_lens[i] keys
    dp.kv_lens = kv.seq_lens;
    dp.page_table = kv.block_table;
    dp.page_size = kv.page_size;
    dp.max_pages_per_seq = kv.max_pages_per_seq;
    dp.n_head = cfg_.n_head;
    dp.n_kv_head = cfg_.n_kv_head;
    dp.head_dim = cfg_.head_dim;
    dp.scale = cfg_.score_scale();
    dp.window = window(l);
    dp.workspace = decode_ws_;
    dp.workspace_bytes = decode_ws_bytes_;
    if (kv_type_ == KvCacheType::fp8) {
      dp.kv_dtype = cuda::KvDtype::fp8_e4m3;
      dp.k_scale = kv.k_scale;
      dp.v_scale = kv.v_scale;
    }
    cuda::attention_decode(dp, stream_);
  }
  attn_out(l, o, x, n);
  mlp(l, x, n);
}

}  // namespace longctx::gpu
