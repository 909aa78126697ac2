// sequence_batch_gpu.cpp: the GPU's step-level batch (make_gpu_batch, sequence_batch.h):
// continuous batching over GpuTransformer's paged KV pool.
//
// What: sequences join (open) and leave (finish, close) at any step. A step runs ONE batched
// decode (GpuTransformer::decode_batch: every sequence with a pending token, at most step_rows
// rows per launch group) and then up to one chunk of prefill tokens of the newcomers, in turn
// (the CPU batch's rule), so a long prompt delays the running streams by one chunk per step, not
// by its whole prefill.
// Pages: the pool is sized once (reserve_pool: the batch's KV budget, any one sequence up to the
// context). A newcomer takes only its prompt as one contiguous run of pages (the prefill kernels
// read a sequence's keys as one block); each later page comes from the free list when its
// sequence reaches it in a decode step (the batched step reads through the block table), and a
// sequence's pages go back to the free list when it leaves, for the next newcomer.
// Admission: a request opens when (1) its pages for prompt + max_tokens, added to the pages the
// open sequences may still take, fit the free pages (so growth never finds the pool empty: no
// preemption), and (2) a run of free pages holds its prompt now. Otherwise fits_now() is false and the scheduler
// queues it (fragmentation only delays: an empty pool holds any admissible prompt); check()
// refuses what can never fit (the base's budget and context checks).
// Methods that keep per-sequence decode state on the GPU (HiP: batches_decode() false) never get
// here: Engine::start_batch gives them the serial batch (one sequence at a time, queued).
// fp8 cache: the pool's per-layer scales are set by the first prefill after the pool was empty
// and shared by every later sequence (gpu_transformer.h), so later prompts decode within fp8
// rounding of alone; bf16 has no such coupling.
// Tested by tests/gpu/test_gpu_batch_serve.cpp; timed through `longctx serve` by bench/serve_load.py.
#ifdef LONGCTX_WITH_GPU
#include <chrono>
#include <memory>
#include <vector>

#include "gpu/gpu_transformer.h"
#include "kv/kv_spec.h"
#include "runtime/sequence_batch.h"
#include "runtime/sequence_batch_base.h"
#include "runtime/sequence_run.h"
#include "util/error.h"

namespace longctx {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The fixed cost of one prefill piece in prompt tokens (every layer's launches and the logits
// copy), counted against a step's prefill budget so that many short prompts do not stretch one
// step far past one chunk.
constexpr int64_t kPieceOverheadTokens = 64;

class GpuBatch final : public BatchBase {
 public:
  GpuBatch(const GpuBatchModel& m, const BatchOptions& o) : BatchBase(m.max_context, o), m_(m) {
    chunk_ = std::min(opts_.prefill_chunk > 0 ? opts_.prefill_chunk : m_.prefill_chunk, m_.model.chunk());
    if (chunk_ <= 0) fail("prefill chunk must be positive (got {})", chunk_);
    const int64_t longest = std::min(max_ctx_, opts_.kv_tokens);  // one sequence's tokens at most
    const int rows = std::min(opts_.max_sequences, kMaxStepRows);
    if (const std::string why = m_.model.pool_fit_problem(opts_.kv_tokens, longest, rows); !why.empty())
      fail("the server's KV cache ({} tokens, --kv-tokens) does not fit the GPU: {}", opts_.kv_tokens, why);
    m_.model.reserve_pool(opts_.kv_tokens, longest, rows);
    stats_.kv_capacity = m_.model.pool_use().pages * m_.model.pool_use().page_tokens;
  }

  bool fits_now(const SequenceRequest& r) const override {
    if (!BatchBase::fits_now(r)) return false;
    const gpu::GpuTransformer::PoolUse u = m_.model.pool_use();
    return outstanding(u) + pages(reservation(r), u) <= u.free_pages &&
           pages(int64_t(r.prompt.size()), u) <= u.longest_free_run;
  }

  int64_t open(const SequenceRequest& r) override {
    admit(r);  // check() and fits_now(), or an Error
    auto s = std::make_unique<Slot>(next_id_++, r);
    try {
      s->seq = m_.model.new_sequence(s->reserved, int64_t(r.prompt.size()));
    } catch (...) {
      release(s->reserved);
      throw;
    }
    s->pages = pages(s->reserved, m_.model.pool_use());
    open_.push_back(std::move(s));
    ++stats_.prefilling;
    return open_.back()->id;
  }

  void step(const SequenceEventFn& on_event) override {
    ++stats_.steps;
    decode(on_event);
    prefill(on_event);
    sweep();
  }

  void close(int64_t id) override {
    for (auto& s : open_)
      if (s->id == id) s->closed = true;
    sweep();
  }

  BatchStats stats() const override {
    BatchStats st = stats_;
    st.kv_used = 0;
    for (const auto& s : open_) st.kv_used += s->seq->size();
    return st;
  }

 private:
  // Rows of one batched step at most (GpuTransformer plans its step buffers for up to its logit rows).
  static constexpr int kMaxStepRows = 64;

  struct Slot {
    int64_t id;
    std::vector<int32_t> prompt;
    int64_t reserved;  // prompt + max_tokens: the tokens it may reach
    int64_t pages = 0;  // pool pages promised to it (reserved, in whole pages)
    bool logprobs;
    SequenceRun run;
    std::unique_ptr<gpu::GpuSequence> seq;
    int64_t prefilled = 0;  // prompt tokens in the cache
    int32_t pending = -1;   // the last sampled token, which the next decode step appends
    bool closed = false;
    Slot(int64_t i, const SequenceRequest& r)
        : id(i), prompt(r.prompt), reserved(reservation(r)), logprobs(r.logprobs), run(r.sp, int64_t(r.prompt.size())) {}
    bool prefilling() const { return prefilled < int64_t(prompt.size()); }
  };

  static int64_t pages(int64_t tokens, const gpu::GpuTransformer::PoolUse& u) {
    return kv::pages_for_tokens(std::max<int64_t>(tokens, 1), u.page_tokens);
  }
  // Pages the open sequences may still take from the free list: promised less held (a sequence
  // holds its prompt's run, then one page per page_tokens decoded tokens past it).
  int64_t outstanding(const gpu::GpuTransformer::PoolUse& u) const {
    int64_t n = 0;
    for (const auto& s : open_)
      n += s->pages - std::max(pages(int64_t(s->prompt.size()), u), pages(s->seq->size(), u));
    return n;
  }

  std::string check_attn(const SequenceRequest& r) const override {
    if (r.attn.empty() || r.attn == m_.attn) return {};
    return fmt::format("attention method '{}' per request: on the GPU every request runs the server's method ('{}', "
                       "--attn)", r.attn, m_.attn);
  }

  void emit(Slot& s, std::span<const float> row, const SequenceEventFn& on_event) {
    const SequenceEvent e = sample_event(s.id, s.run, m_.tok, row, s.logprobs, int64_t(s.prompt.size()), &s.pending);
    if (!on_event(e) || e.finished) s.closed = true;
  }

  // One batched decode step over every sequence with a pending token (pages taken as they grow).
  void decode(const SequenceEventFn& on_event) {
    std::vector<Slot*> rows;
    std::vector<gpu::GpuSequence*> seqs;
    std::vector<int32_t> ids;
    for (auto& s : open_)
      if (!s->closed && s->pending >= 0) {
        rows.push_back(s.get());
        seqs.push_back(s->seq.get());
        ids.push_back(s->pending);
      }
    if (rows.empty()) return;
    const auto t0 = Clock::now();
    m_.model.decode_batch(seqs, ids, logits_);  // [rows, vocab]
    stats_.decode_s += seconds_since(t0);
    stats_.decode_tokens += int64_t(rows.size());
    const size_t V = size_t(m_.cfg.vocab_size);
    for (size_t r = 0; r < rows.size(); ++r) emit(*rows[r], std::span<const float>(logits_.data() + r * V, V), on_event);
  }

  // Prefill pieces of the newcomers, in turn, within one chunk of tokens per step (CpuBatch's rule).
  void prefill(const SequenceEventFn& on_event) {
    int64_t budget = chunk_ + kPieceOverheadTokens;  // one full chunk always fits
    for (size_t tries = open_.size(); tries > 0; --tries) {
      Slot* s = next_prefilling();
      if (!s) return;
      const int64_t cost = std::min(chunk_, int64_t(s->prompt.size()) - s->prefilled) + kPieceOverheadTokens;
      if (cost > budget) return;
      last_prefill_ = s->id;
      prefill_piece(*s, on_event);
      budget -= cost;
    }
  }

  Slot* next_prefilling() const {
    Slot* s = nullptr;
    for (auto& o : open_)
      if (!o->closed && o->prefilling() && (!s || (s->id <= last_prefill_ && o->id > last_prefill_))) s = o.get();
    return s;
  }

  // Slot s's next chunk, or its whole prompt when the model prefills layer-major (fp8 cache,
  // MInference's per-prompt estimate: gpu_transformer.h asks for one forward per prompt).
  void prefill_piece(Slot& s, const SequenceEventFn& on_event) {
    const int64_t n = int64_t(s.prompt.size()), c0 = s.prefilled;
    const int64_t c1 = m_.model.layer_major() ? n : std::min(n, c0 + chunk_);
    const auto t0 = Clock::now();
    {
      const Attached<gpu::GpuTransformer, gpu::GpuSequence> on(m_.model, s.seq.get());
      m_.model.forward(std::span<const int32_t>(s.prompt).subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? 1 : 0,
                       &logits_);
    }
    stats_.prefill_s += seconds_since(t0);
    stats_.prefill_tokens += c1 - c0;
    s.prefilled = c1;
    if (c1 == n) {
      --stats_.prefilling;
      emit(s, std::span<const float>(logits_.data(), size_t(m_.cfg.vocab_size)), on_event);
    }
  }

  // Frees the closed sequences: their pages go back to the pool's free list.
  void sweep() {
    std::erase_if(open_, [&](const std::unique_ptr<Slot>& s) {
      if (!s->closed) return false;
      if (s->prefilling()) --stats_.prefilling;
      release(s->reserved);
      return true;  // ~GpuSequence gives its pages back
    });
  }

  GpuBatchModel m_;
  int64_t chunk_ = 0;
  std::vector<std::unique_ptr<Slot>> open_;   // in arrival order
  std::vector<float> logits_;                 // [rows, vocab] scratch
  int64_t last_prefill_ = 0;
};

}  // namespace

std::unique_ptr<SequenceBatch> make_gpu_batch(const GpuBatchModel& m, const BatchOptions& o) {
  return std::make_unique<GpuBatch>(m, o);
}

}  // namespace longctx
#endif  // LONGCTX_WITH_GPU
