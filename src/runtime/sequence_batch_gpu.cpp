// sequence_batch_gpu.cpp: the GPU's step-level batch (make_gpu_batch, sequence_batch.h):
// continuous batching over GpuTransformer's paged KV pool, on the step loop the CPU batch shares
// (SteppingBatch, stepping_batch.h).
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
#include <memory>
#include <vector>

#include "gpu/gpu_transformer.h"
#include "kv/kv_spec.h"
#include "runtime/sequence_batch.h"
#include "runtime/sequence_batch_base.h"
#include "runtime/sequence_run.h"
#include "runtime/stepping_batch.h"
#include "util/error.h"

namespace longctx {

namespace {

// The fixed cost of one prefill piece in prompt tokens (every layer's launches and the logits
// copy), counted against a step's prefill budget so that many short prompts do not stretch one
// step far past one chunk.
constexpr int64_t kPieceOverheadTokens = 64;

class GpuBatch final : public SteppingBatch<gpu::GpuSequence> {
 public:
  GpuBatch(const GpuBatchModel& m, const BatchOptions& o)
      : SteppingBatch(m.max_context, o, m.tok, m.cfg.vocab_size, kPieceOverheadTokens), m_(m) {
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
    return open_slot(r, [&](int64_t reserved) { return m_.model.new_sequence(reserved, int64_t(r.prompt.size())); });
  }

 private:
  // Rows of one batched step at most (GpuTransformer plans its step buffers for up to its logit rows).
  static constexpr int kMaxStepRows = 64;

  static int64_t pages(int64_t tokens, const gpu::GpuTransformer::PoolUse& u) {
    return kv::pages_for_tokens(std::max<int64_t>(tokens, 1), u.page_tokens);
  }
  // Pages the open sequences may still take from the free list: promised (prompt + max_tokens, in
  // whole pages) less held (a sequence holds its prompt's run, then one page per page_tokens
  // decoded tokens past it).
  int64_t outstanding(const gpu::GpuTransformer::PoolUse& u) const {
    int64_t n = 0;
    for (const auto& s : open_)
      n += pages(s->reserved, u) - std::max(pages(int64_t(s->prompt.size()), u), pages(s->seq->size(), u));
    return n;
  }

  std::string check_attn(const SequenceRequest& r) const override {
    if (r.attn.empty() || r.attn == m_.attn) return {};
    return fmt::format("attention method '{}' per request: on the GPU every request runs the server's method ('{}', "
                       "--attn)", r.attn, m_.attn);
  }

  // Pages are taken from the free list as sequences grow.
  void decode_rows(const std::vector<gpu::GpuSequence*>& seqs, const std::vector<int32_t>& ids) override {
    m_.model.decode_batch(seqs, ids, logits_);
  }

  // Slot s's next chunk, or its whole prompt when the model prefills layer-major (fp8 cache,
  // MInference's per-prompt estimate: gpu_transformer.h asks for one forward per prompt).
  int64_t prefill_piece(Slot& s) override {
    const int64_t n = int64_t(s.prompt.size()), c0 = s.prefilled;
    const int64_t c1 = m_.model.layer_major() ? n : std::min(n, c0 + chunk_);
    const Attached<gpu::GpuTransformer, gpu::GpuSequence> on(m_.model, s.seq.get());
    m_.model.forward(std::span<const int32_t>(s.prompt).subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? 1 : 0,
                     &logits_);
    return c1;
  }

  int64_t seq_tokens(const gpu::GpuSequence& seq) const override { return seq.size(); }

  GpuBatchModel m_;
};

}  // namespace

std::unique_ptr<SequenceBatch> make_gpu_batch(const GpuBatchModel& m, const BatchOptions& o) {
  return std::make_unique<GpuBatch>(m, o);
}

}  // namespace longctx
#endif  // LONGCTX_WITH_GPU
