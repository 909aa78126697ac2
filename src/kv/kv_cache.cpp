// kv_cache.cpp: see kv_cache.h.
#include "kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace longctx::kv {

KvCache::KvCache(const KvSpec& spec) : spec_(spec), sizes_(kv_sizes(spec)) {
  table_.assign(size_t(int64_t(spec_.max_batch) * sizes_.max_pages_per_seq), 0);
  lens_.assign(size_t(spec_.max_batch), 0);
  dirty_.assign(size_t(spec_.max_batch), DirtyRange{});
  clear();
}

void KvCache::clear() {
  for (SeqId s : batch_) seqs_.at(s).row = -1;
  batch_.clear();
  std::fill(lens_.begin(), lens_.end(), 0);
  seqs_.clear();
  free_.resize(size_t(spec_.n_pages));
  for (int64_t i = 0; i < spec_.n_pages; ++i) free_[size_t(i)] = int32_t(spec_.n_pages - 1 - i);  // back() = page 0
  const float unset = spec_.elem == KvElem::fp8_e4m3 ? 0.f : 1.f;
  k_scale_.assign(size_t(spec_.n_layer), unset);
  v_scale_.assign(size_t(spec_.n_layer), unset);
}

const KvCache::Seq& KvCache::seq(SeqId s, const char* what) const {
  const auto it = seqs_.find(s);
  if (it == seqs_.end()) fail("KV cache {}: unknown sequence {} ({} live)", what, s, seqs_.size());
  return it->second;
}

KvCache::Seq& KvCache::seq(SeqId s, const char* what) {
  return const_cast<Seq&>(static_cast<const KvCache*>(this)->seq(s, what));
}

SeqId KvCache::create_sequence() {
  const SeqId id = next_id_++;
  seqs_.emplace(id, Seq{});
  return id;
}

void KvCache::free_sequence(SeqId s) {
  Seq& q = seq(s, "free_sequence");
  if (q.row >= 0)
    fail("KV cache free_sequence: sequence {} is row {} of the current batch; set a batch without it first", s, q.row);
  for (auto it = q.pages.rbegin(); it != q.pages.rend(); ++it) free_.push_back(*it);  // first page handed out next
  seqs_.erase(s);
}

void KvCache::grow(SeqId id, Seq& q, int64_t tokens, const char* what) {
  if (pages_for_tokens(tokens, spec_.page_size) > sizes_.max_pages_per_seq)
    fail("KV cache {}: sequence {} would hold {} tokens but the block tables hold at most {} pages of {} tokens per "
         "sequence (max_seq_tokens {})",
         what, id, tokens, sizes_.max_pages_per_seq, spec_.page_size, spec_.max_seq_tokens);
  const int64_t have = int64_t(q.pages.size());
  const int64_t need = pages_for_tokens(tokens, spec_.page_size) - have;
  if (need <= 0) return;
  if (need > int64_t(free_.size()))
    fail("KV cache full: sequence {} needs {} more pages of {} tokens, {} free (pool {} pages)", id, need,
         spec_.page_size, free_.size(), spec_.n_pages);
  q.pages.reserve(size_t(have + need));
  for (int64_t i = 0; i < need; ++i) {
    q.pages.push_back(free_.back());
    free_.pop_back();
  }
  sync_row(q, have);
}

void KvCache::sync_row(const Seq& q, int64_t from_page) {
  if (q.row < 0) return;
  const size_t b = size_t(q.row);
  const int64_t n = int64_t(q.pages.size());
  int32_t* row = table_.data() + int64_t(q.row) * sizes_.max_pages_per_seq;
  std::copy(q.pages.begin() + from_page, q.pages.end(), row + from_page);
  if (from_page < n) {
    DirtyRange& d = dirty_[b];
    d = d.lo < d.hi ? DirtyRange{std::min(d.lo, from_page), std::max(d.hi, n)} : DirtyRange{from_page, n};
  }
  lens_[b] = int32_t(q.length);
}

void KvCache::reserve(SeqId s, int64_t tokens) {
  Seq& q = seq(s, "reserve");
  if (tokens < 0) fail("KV cache reserve: {} tokens for sequence {}", tokens, s);
  grow(s, q, tokens, "reserve");
}

void KvCache::reserve_contiguous(SeqId s, int64_t tokens) {
  Seq& q = seq(s, "reserve_contiguous");
  if (tokens < 0) fail("KV cache reserve_contiguous: {} tokens for sequence {}", tokens, s);
  if (!q.pages.empty())
    fail("KV cache reserve_contiguous: sequence {} already holds {} pages", s, q.pages.size());
  const int64_t need = pages_for_tokens(tokens, spec_.page_size);
  if (need > sizes_.max_pages_per_seq) return grow(s, q, tokens, "reserve_contiguous");  // the tables' error
  if (need == 0) return;
  std::vector<int32_t> sorted(free_);
  std::sort(sorted.begin(), sorted.end());
  int64_t run = 0;
  int32_t first = -1;
  for (size_t i = 0; i < sorted.size() && first < 0; ++i) {
    run = i > 0 && sorted[i] == sorted[i - 1] + 1 ? run + 1 : 1;
    if (run == need) first = sorted[i] - int32_t(need - 1);
  }
  if (first < 0)
    fail("KV cache full: sequence {} needs {} consecutive pages of {} tokens; {} pages are free (pool {} pages) but "
         "no run of {} is",
         s, need, spec_.page_size, free_.size(), spec_.n_pages, need);
  const int32_t last = first + int32_t(need);
  free_.erase(std::remove_if(free_.begin(), free_.end(), [&](int32_t p) { return p >= first && p < last; }),
              free_.end());
  for (int32_t p = first; p < last; ++p) q.pages.push_back(p);
  sync_row(q, 0);
}

int64_t KvCache::longest_free_run() const {
  std::vector<int32_t> sorted(free_);
  std::sort(sorted.begin(), sorted.end());
  int64_t run = 0, best = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    run = i > 0 && sorted[i] == sorted[i - 1] + 1 ? run + 1 : 1;
    best = std::max(best, run);
  }
  return best;
}

void KvCache::append(SeqId s, int64_t n) {
  Seq& q = seq(s, "append");
  if (n < 0) fail("KV cache append: {} tokens to sequence {}", n, s);
  int64_t len = 0;
  if (__builtin_add_overflow(q.length, n, &len)) fail("KV cache append: length of sequence {} overflows", s);
  grow(s, q, len, "append");
  q.length = len;
  if (q.row >= 0) lens_[size_t(q.row)] = int32_t(len);
}

void KvCache::truncate(SeqId s, int64_t len) {
  Seq& q = seq(s, "truncate");
  if (len < 0 || len > q.length)
    fail("KV cache truncate: length {} for sequence {} of length {} (must be 0..{})", len, s, q.length, q.length);
  const size_t keep = size_t(pages_for_tokens(len, spec_.page_size));
  while (q.pages.size() > keep) {
    free_.push_back(q.pages.back());
    q.pages.pop_back();
  }
  q.length = len;
  if (q.row >= 0) lens_[size_t(q.row)] = int32_t(len);
}

int64_t KvCache::length(SeqId s) const { return seq(s, "length").length; }

int64_t KvCache::capacity(SeqId s) const { return int64_t(seq(s, "capacity").pages.size()) * spec_.page_size; }

std::span<const int32_t> KvCache::pages(SeqId s) const { return seq(s, "pages").pages; }

int64_t KvCache::contiguous_base_row(SeqId s) const {
  const Seq& q = seq(s, "contiguous_base_row");
  if (q.pages.empty()) return -1;
  for (size_t i = 1; i < q.pages.size(); ++i)
    if (q.pages[i] != q.pages[0] + int32_t(i)) return -1;
  return int64_t(q.pages[0]) * spec_.page_size;
}

int64_t KvCache::row_of(SeqId s, int64_t t) const {
  const Seq& q = seq(s, "row_of");
  if (t < 0 || t >= int64_t(q.pages.size()) * spec_.page_size)
    fail("KV cache row_of: token {} of sequence {} is outside its capacity {}", t, s,
         int64_t(q.pages.size()) * spec_.page_size);
  return int64_t(q.pages[size_t(t / spec_.page_size)]) * spec_.page_size + t % spec_.page_size;
}

void KvCache::set_batch(std::span<const SeqId> ids) {
  if (int64_t(ids.size()) > spec_.max_batch)
    fail("KV cache set_batch: {} sequences but the batch tables hold {} (max_batch)", ids.size(), spec_.max_batch);
  for (size_t i = 0; i < ids.size(); ++i) {
    seq(ids[i], "set_batch");
    for (size_t j = 0; j < i; ++j)
      if (ids[j] == ids[i]) fail("KV cache set_batch: sequence {} is listed twice (rows {} and {})", ids[i], j, i);
  }
  for (SeqId s : batch_) seqs_.at(s).row = -1;
  const std::vector<SeqId> old = std::move(batch_);
  batch_.assign(ids.begin(), ids.end());
  for (size_t b = 0; b < batch_.size(); ++b) {
    Seq& q = seqs_.at(batch_[b]);
    q.row = int(b);
    const bool same = b < old.size() && old[b] == batch_[b];  // its row already holds its pages
    if (same)
      lens_[b] = int32_t(q.length);
    else
      sync_row(q, 0);
  }
  for (size_t b = batch_.size(); b < lens_.size(); ++b) lens_[b] = 0;
}

int KvCache::batch_row(SeqId s) const { return seq(s, "batch_row").row; }

void KvCache::check_layer(int layer, const char* what) const {
  if (layer < 0 || layer >= spec_.n_layer) fail("KV cache {}: layer {} (the cache has {})", what, layer, spec_.n_layer);
}

void KvCache::set_scales(int layer, float k_scale, float v_scale) {
  check_layer(layer, "set_scales");
  if (spec_.elem != KvElem::fp8_e4m3)
    fail("KV cache set_scales: the pool is {}; scales belong to fp8 pools", kv_elem_name(spec_.elem));
  if (!(k_scale > 0.f && std::isfinite(k_scale) && v_scale > 0.f && std::isfinite(v_scale)))
    fail("KV cache set_scales: layer {} scales {}, {} (must be positive and finite)", layer, k_scale, v_scale);
  k_scale_[size_t(layer)] = k_scale;
  v_scale_[size_t(layer)] = v_scale;
}

float KvCache::k_scale(int layer) const {
  check_layer(layer, "k_scale");
  return k_scale_[size_t(layer)];
}

float KvCache::v_scale(int layer) const {
  check_layer(layer, "v_scale");
  return v_scale_[size_t(layer)];
}

void KvCache::check_write(SeqId s, int layer, int64_t t0, int64_t n, const char* what) const {
  check_layer(layer, what);
  const Seq& q = seq(s, what);
  if (t0 < 0 || n < 0 || t0 > q.length - n)
    fail("KV cache {}: tokens [{}, {}) of sequence {} are outside its length {} (append them first)", what, t0, t0 + n,
         s, q.length);
  if (!scales_set(layer))
    fail("KV cache {}: the fp8 scales of layer {} are not set (set_scales first)", what, layer);
}

KvView KvCache::make_view(int layer, const void* k_pool, const void* v_pool, const int32_t* table,
                          const int32_t* lens, bool on_device) const {
  check_layer(layer, "view");
  KvView v;
  v.k_pool = k_pool;
  v.v_pool = v_pool;
  v.elem = spec_.elem;
  v.k_scale = k_scale_[size_t(layer)];
  v.v_scale = v_scale_[size_t(layer)];
  v.block_table = table;
  v.seq_lens = lens;
  v.n_seq = int(batch_.size());
  v.max_pages_per_seq = sizes_.max_pages_per_seq;
  v.page_size = spec_.page_size;
  v.n_pages = spec_.n_pages;
  v.n_kv_head = spec_.n_kv_head;
  v.head_dim = spec_.head_dim;
  v.on_device = on_device;
  return v;
}

}  // namespace longctx::kv
