// kv_cache.h: the KV cache manager: paged K/V storage for several sequences, its page allocator
// and block tables, and the KvView (kernels/params/kv_view.h) every attention kernel reads.
//
// What: a pool of fixed-size pages, allocated once and never reallocated. A page holds
// `page_size` consecutive tokens of one sequence, in every layer, for K and for V. Sequences are
// created and freed by id; appending tokens takes pages from a free list, freeing a sequence
// gives them back. Each sequence has a block table (its page ids in order) and a length.
// Why: several sequences (batched decode, a server) share one memory budget without
// fragmentation or copies; page size 1 gives TokenSelect its token slots, larger pages give block
// methods contiguous runs; every kernel takes the same view on the CPU and the GPU.
//
// Layout (sizes in kv_spec.h):
//   pool      one block: layer l's K pool at (2l) * layer_pool_bytes, its V pool at (2l+1) *
//             layer_pool_bytes; each pool [n_pages * page_size, n_kv_head, head_dim] of `elem`.
//             Token t of a sequence whose block table is P sits in pool row
//             P[t / page_size] * page_size + t % page_size (the same row in every layer).
//   batch     the sequences one view covers, in order (set_batch). Batch tables of fixed
//             capacity: block_table int32 [max_batch, max_pages_per_seq] (row b = batch[b]'s
//             pages, reserved ones included; entries past them are unspecified, kernels read only
//             t < seq_lens[b]) and seq_lens int32 [max_batch] (0 past the batch).
//   fp8       one K and one V scale per layer (real = stored * scale), unset (0) until
//             set_scales; the engine sets them from its first prefill's max |K|, |V|
//             (fp8_scale_for_amax). bf16 / f32 pools have scales 1.
// Fresh pools hand out pages 0, 1, 2, ... in order, so one sequence reserved up front is one
// contiguous run (contiguous_base_row), which today's contiguous kernels can read directly.
//
// How (one step of an engine):
//   KvSpec spec{...}; DeviceKvCache kv(spec);              // or HostKvCache on the CPU
//   SeqId s = kv.create_sequence(); kv.reserve(s, prompt + max_new);  // fail now, not midway
//   kv.set_batch({s});
//   kv.append(s, T);                                       // length += T (pages as needed)
//   kv.sync_tables(stream);                                // device only: tables -> GPU
//   per layer: write K/V (HostKvCache::write_rows / DeviceKvCache::scatter), attend through kv.view(l)
//   kv.free_sequence(s) when done (after set_batch without it).
// Classes: KvCache (this file) is the device-independent bookkeeping (pages, sequences, batch
// tables on the host, scales); HostKvCache (host_kv_cache.h) adds host storage, DeviceKvCache
// (cuda/device_kv_cache.h, CUDA builds only) device storage and device mirrors of the batch
// tables. A host offload tier (issue 17) would be a third storage behind the same bookkeeping:
// page ids stay the unit, so a per-page location table can sit beside the block tables.
//
// Ownership: the cache owns the pool and tables; a KvView borrows them (valid as long as the
// cache lives: they are never reallocated, only their contents change).
// Thread-safety: none inside. Mutators (create/free/reserve/append/truncate/set_batch/
// set_scales, DeviceKvCache::sync_tables) must be called from one thread at a time and not while
// another thread reads the same cache. Const calls may run concurrently with each other.
// HostKvCache::write_rows of disjoint (layer, token) ranges may run concurrently (it only writes
// pool bytes) when no mutator runs. A host view's tables change under a mutator; a device view's
// tables change only when sync_tables' copies run on its stream (stream order is the contract).
// Errors: every misuse throws longctx::Error naming the sequence and the numbers (full cache,
// unknown sequence, a length past the tables' row capacity, ...); a failed call changes nothing.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/params/kv_view.h"
#include "kv/kv_spec.h"

namespace longctx::kv {

using SeqId = int64_t;  // handed out by create_sequence, never reused by the same cache

class KvCache {
 public:
  explicit KvCache(const KvSpec& spec);  // validates the spec (kv_sizes); allocates host tables only
  virtual ~KvCache() = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvSpec& spec() const { return spec_; }
  const KvSizes& sizes() const { return sizes_; }

  // --- sequences ---
  SeqId create_sequence();           // empty: length 0, no pages
  void free_sequence(SeqId s);       // its pages go back to the free list; Error if in the batch
  void reserve(SeqId s, int64_t tokens);  // claim pages for `tokens` tokens in total now (length unchanged)
  // reserve() for a sequence with no pages yet, its pages one run of consecutive ids (the lowest
  // such run), so contiguous_base_row(s) >= 0: kernels that need contiguous keys (prefill) read
  // it directly. Error when no run is long enough (free pages fragmented or too few).
  void reserve_contiguous(SeqId s, int64_t tokens);
  void append(SeqId s, int64_t n);   // length += n; reserved pages first, then the free list
  void truncate(SeqId s, int64_t len);    // length = len (<= length); pages past it are freed
  // Frees every sequence, empties the batch and unsets fp8 scales: the state of a fresh cache
  // (pages handed out in order again), without touching the pool's memory. Ids are not reused.
  void clear();
  int64_t length(SeqId s) const;
  int64_t capacity(SeqId s) const;   // tokens its pages hold (>= length)
  std::span<const int32_t> pages(SeqId s) const;  // its block table
  int64_t contiguous_base_row(SeqId s) const;  // pool row of token 0 when its pages are consecutive, else -1
  int64_t row_of(SeqId s, int64_t t) const;    // pool row of its token t (t < capacity)
  bool contains(SeqId s) const { return seqs_.count(s) != 0; }
  int64_t n_sequences() const { return int64_t(seqs_.size()); }
  int64_t free_pages() const { return int64_t(free_.size()); }
  // The longest run of consecutive free page ids, in pages: reserve_contiguous of up to that many
  // pages succeeds now (a batch admits a prompt when its run fits, see runtime/sequence_batch_gpu.cpp).
  int64_t longest_free_run() const;

  // --- batch: the sequences a view covers; row b of the view's tables is batch[b] ---
  void set_batch(std::span<const SeqId> ids);  // Error: unknown id, duplicate, more than max_batch
  void set_batch(std::initializer_list<SeqId> ids) { set_batch(std::span<const SeqId>(ids.begin(), ids.size())); }
  std::span<const SeqId> batch() const { return batch_; }
  int batch_row(SeqId s) const;                  // -1 when not in the batch
  const int32_t* batch_block_table() const { return table_.data(); }  // host [max_batch, max_pages_per_seq]
  const int32_t* batch_seq_lens() const { return lens_.data(); }       // host [max_batch]

  // --- fp8 scales (real = stored * scale), one K and one V scale per layer ---
  // fp8 pools only; scales > 0 and finite. Rows already stored keep the bytes they were quantized
  // to, so set a layer's scales before its first write (the engine: from the first prefill's
  // max |K|, |V|) and change them only after clear().
  void set_scales(int layer, float k_scale, float v_scale);
  float k_scale(int layer) const;
  float v_scale(int layer) const;
  bool scales_set(int layer) const { return k_scale(layer) > 0.f; }

 protected:
  // A view of `layer` over the given pools and tables (host or device memory).
  KvView make_view(int layer, const void* k_pool, const void* v_pool, const int32_t* table, const int32_t* lens,
                   bool on_device) const;
  // Errors unless tokens [t0, t0+n) of s are within its length, `layer` exists and fp8 scales are set.
  void check_write(SeqId s, int layer, int64_t t0, int64_t n, const char* what) const;
  void check_layer(int layer, const char* what) const;
  // Table entries [lo, hi) of each batch row changed since the last clear (lo >= hi: clean);
  // DeviceKvCache uploads them.
  struct DirtyRange {
    int64_t lo = 0, hi = 0;
  };
  std::vector<DirtyRange>& dirty_rows() { return dirty_; }

 private:
  struct Seq {
    int64_t length = 0;
    std::vector<int32_t> pages;
    int row = -1;  // batch row, -1 when not in the batch
  };
  const Seq& seq(SeqId s, const char* what) const;
  Seq& seq(SeqId s, const char* what);
  void grow(SeqId id, Seq& q, int64_t tokens, const char* what);  // pages for `tokens` tokens, all or nothing
  void sync_row(const Seq& q, int64_t from_page);                 // batch table row <- q.pages[from_page..]

  KvSpec spec_;
  KvSizes sizes_;
  std::vector<int32_t> free_;  // free pages; back() is handed out next
  std::unordered_map<SeqId, Seq> seqs_;
  SeqId next_id_ = 0;
  std::vector<SeqId> batch_;
  std::vector<int32_t> table_;  // [max_batch, max_pages_per_seq]
  std::vector<int32_t> lens_;   // [max_batch]
  std::vector<DirtyRange> dirty_;  // [max_batch]
  std::vector<float> k_scale_, v_scale_;  // [n_layer]
};

}  // namespace longctx::kv
