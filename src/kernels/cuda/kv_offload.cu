// kv_offload.cu: see kv_offload.h. The update runs one CTA of 1024 threads per (KV head, cache);
// shared memory holds the slots' sort keys (uint64 (last_use + 1) << 32 | slot, a power of two of them) and the head's
// recorded misses (int32, a power of two of them), both sorted ascending by bitonic networks.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kv_offload.h"
#include "kernels/cuda/kv_offload.cuh"

namespace longctx::cuda {

namespace {

constexpr int kThreads = 1024;

__host__ __device__ inline int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

__device__ inline uint64_t slot_key(const int32_t* last_use, int s) {
  return (uint64_t(uint32_t(last_use[s] + 1)) << 32) | uint32_t(s);
}

template <class T>
__device__ void bitonic_sort(T* a, int n) {  // ascending, n a power of two, all threads
  for (int k = 2; k <= n; k *= 2)
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const T x = a[i], y = a[ixj];
          if ((x > y) == ((i & k) == 0)) a[i] = y, a[ixj] = x;
        }
      }
      __syncthreads();
    }
}

__device__ uint64_t block_min(uint64_t v, uint64_t* red) {
  for (int off = 16; off > 0; off >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o < v ? o : v;
  }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = red[threadIdx.x];  // kThreads / 32 == 32 warps
    for (int off = 16; off > 0; off >>= 1) {
      const uint64_t o = __shfl_xor_sync(0xffffffffu, v, off);
      v = o < v ? o : v;
    }
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  v = red[0];
  __syncthreads();
  return v;
}

// Page table writes of the update: entry of `line` (a line with an entry: resident or recorded).
__device__ void set_entry(const KvOffloadCache& c, int h, int32_t line, int32_t entry) {
  if (c.n_buckets == 0) {
    c.table[int64_t(h) * c.n_lines + line] = entry;
    return;
  }
  unsigned long long* tab = offload_hash_table(c, h);
  unsigned long long w = 0;
  const int32_t b = offload_hash_find(tab, c.n_buckets, line, &w);
  if (b >= 0) tab[b] = entry == kLineAbsent ? kBucketTomb : offload_bucket_word(uint32_t(line), entry);
}

// Hash map, after a step that left it over half full: rebuilt from the head's resident lines
// (tombstones and admission marks go). All threads; the CTA owns the head's table.
__device__ void rebuild_hash(const KvOffloadCache& c, int h) {
  __shared__ int s_used;
  if (c.hash_used[h] <= c.n_buckets / 2) return;
  unsigned long long* tab = offload_hash_table(c, h);
  const int32_t* slot_line = c.slot_line + int64_t(h) * c.n_slots;
  if (threadIdx.x == 0) s_used = 0;
  for (int32_t i = threadIdx.x; i < c.n_buckets; i += kThreads) tab[i] = kBucketEmpty;
  __syncthreads();
  const uint32_t mask = uint32_t(c.n_buckets - 1);
  for (int32_t s = threadIdx.x; s < c.n_slots; s += kThreads) {
    const int32_t line = slot_line[s];
    if (line < 0) continue;
    const unsigned long long want = offload_bucket_word(uint32_t(line), s);
    for (uint32_t i = offload_hash_bucket(line, c.n_buckets);; i = (i + 1) & mask)
      if (atomicCAS(tab + i, kBucketEmpty, want) == kBucketEmpty) break;
    atomicAdd(&s_used, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) c.hash_used[h] = s_used;
}

// Grid (n_kv_head, 2): blockIdx.y picks the layer's keys cache (0) or K/V cache (1).
__global__ void __launch_bounds__(kThreads) update_kernel(const KvOffloadLayer l, const KvView kv) {
  extern __shared__ __align__(16) uint64_t keys[];  // [pow2(n_slots)], then int32 misses
  __shared__ uint64_t red[32];
  __shared__ int s_n_ins;
  const KvOffloadCache& c = blockIdx.y == 0 ? l.keys : l.kv;
  if (c.table == nullptr) return;
  const int h = blockIdx.x, tid = threadIdx.x, n_slots = c.n_slots;
  const int recorded = min(c.miss_count[h], n_slots);
  if (recorded == 0) {
    if (c.n_buckets > 0) rebuild_hash(c, h);  // admission marks alone may have filled it
    return;
  }
  const int32_t tick = *c.tick;
  int32_t* last_use = c.last_use + int64_t(h) * n_slots;
  int32_t* slot_line = c.slot_line + int64_t(h) * n_slots;
  const int P = pow2_at_least(n_slots);
  int32_t* misses = reinterpret_cast<int32_t*>(keys + P);
  // Misses, ascending.
  const int Pm = pow2_at_least(recorded);
  for (int i = tid; i < Pm; i += kThreads) misses[i] = i < recorded ? c.miss_lines[int64_t(h) * n_slots + i] : INT_MAX;
  __syncthreads();
  bitonic_sort(misses, Pm);
  // Victims: the `recorded` smallest slot keys, ascending, in keys[0 .. recorded).
  if (recorded <= kOffloadArgminMisses) {
    uint64_t prev = 0;
    bool first = true;
    for (int j = 0; j < recorded; ++j) {
      uint64_t best = ~uint64_t(0);
      for (int s = tid; s < n_slots; s += kThreads) {
        const uint64_t k = slot_key(last_use, s);
        if ((first || k > prev) && k < best) best = k;
      }
      prev = block_min(best, red);
      first = false;
      if (tid == 0) keys[j] = prev;
    }
  } else {
    for (int s = tid; s < P; s += kThreads) keys[s] = s < n_slots ? slot_key(last_use, s) : ~uint64_t(0);
    __syncthreads();
    bitonic_sort(keys, P);
  }
  if (tid == 0) s_n_ins = recorded;
  __syncthreads();
  // A slot used this step is not evicted: the insertions stop at the first such victim.
  for (int j = tid; j < recorded; j += kThreads)
    if (int32_t(keys[j] >> 32) - 1 == tick) atomicMin(&s_n_ins, j);
  __syncthreads();
  const int n_ins = s_n_ins;
  for (int j = tid; j < n_ins; j += kThreads) {
    const int32_t old = slot_line[uint32_t(keys[j])];
    if (old >= 0) set_entry(c, h, old, kLineAbsent);
  }
  __syncthreads();
  for (int j = tid; j < recorded; j += kThreads) {
    const int32_t line = misses[j];
    if (j < n_ins) {
      const int32_t v = int32_t(uint32_t(keys[j]));
      set_entry(c, h, line, v);
      slot_line[v] = line;
      last_use[v] = tick;
    } else {
      set_entry(c, h, line, kLineAbsent);
    }
  }
  // Copy the inserted lines' rows of head h from the host pools into the banks (16-byte chunks).
  const int row_bytes = kv.head_dim * kv_elem_bytes(kv.elem), chunks = row_bytes / 16;
  const int per_line = c.line_tokens * chunks;
  const int64_t capacity = int64_t(kv.max_pages_per_seq) * kv.page_size, ld = int64_t(kv.n_kv_head) * row_bytes;
  for (int item = tid; item < n_ins * per_line; item += kThreads) {
    const int j = item / per_line, rem = item - j * per_line, i = rem / chunks, ch = rem - i * chunks;
    const int64_t t = int64_t(misses[j]) * c.line_tokens + i;
    if (t >= capacity) continue;
    const int64_t row = int64_t(kv.block_table[t / kv.page_size]) * kv.page_size + t % kv.page_size;
    const int64_t src = row * ld + int64_t(h) * row_bytes + ch * 16;
    const int64_t dst = (int64_t(uint32_t(keys[j])) * c.line_tokens + i) * ld + int64_t(h) * row_bytes + ch * 16;
    *reinterpret_cast<uint4*>(static_cast<char*>(c.bank_k) + dst) =
        *reinterpret_cast<const uint4*>(static_cast<const char*>(kv.k_pool) + src);
    if (c.bank_v)
      *reinterpret_cast<uint4*>(static_cast<char*>(c.bank_v) + dst) =
          *reinterpret_cast<const uint4*>(static_cast<const char*>(kv.v_pool) + src);
  }
  __syncthreads();  // every thread has read miss_count; slot_line is final
  if (tid == 0) {
    if (n_ins) atomicAdd(c.stats + kStatInserted, (unsigned long long)n_ins);
    c.miss_count[h] = 0;
  }
  if (c.n_buckets > 0) rebuild_hash(c, h);
}

__global__ void begin_step_kernel(int32_t* tick) { ++*tick; }

// Grid (n_kv_head, 2) as the update's; threads copy the 16-byte chunks of the new row when its
// line is resident. Source: k_new/v_new [n_kv_head, row] (rows_ld 0), or, when they are null, the
// row just written to the host pools (token t's row of the view: rows_ld bytes per token).
__global__ void append_kernel(const KvOffloadLayer l, const KvView host, const void* k_new, const void* v_new,
                              int row_bytes) {
  const KvOffloadCache& c = blockIdx.y == 0 ? l.keys : l.kv;
  if (c.table == nullptr) return;
  const int h = blockIdx.x;
  const int32_t t = host.seq_lens[0] - 1;
  if (t < 0 || t / c.line_tokens >= c.n_lines) return;
  const int32_t slot = offload_slot_of(c, h, t / c.line_tokens);
  if (slot < 0) return;
  const int64_t dst = (int64_t(slot) * c.line_tokens + t % c.line_tokens) * c.n_kv_head * row_bytes +
                      int64_t(h) * row_bytes;
  const bool from_host = k_new == nullptr;
  const int64_t host_row = int64_t(host.block_table[t / host.page_size]) * host.page_size + t % host.page_size;
  const char* ks = from_host ? static_cast<const char*>(host.k_pool) + host_row * host.n_kv_head * row_bytes
                             : static_cast<const char*>(k_new);
  const char* vs = from_host ? static_cast<const char*>(host.v_pool) + host_row * host.n_kv_head * row_bytes
                             : static_cast<const char*>(v_new);
  for (int ch = threadIdx.x; ch < row_bytes / 16; ch += blockDim.x) {
    const int64_t src = int64_t(h) * row_bytes + ch * 16;
    *reinterpret_cast<uint4*>(static_cast<char*>(c.bank_k) + dst + ch * 16) =
        *reinterpret_cast<const uint4*>(ks + src);
    if (c.bank_v && vs)
      *reinterpret_cast<uint4*>(static_cast<char*>(c.bank_v) + dst + ch * 16) =
          *reinterpret_cast<const uint4*>(vs + src);
  }
}

// One warp per read; lane 0 looks the line up (and records), the lanes copy 16-byte chunks.
__global__ void gather_kernel(const KvOffloadGatherParams p) {
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  unsigned reads = 0, misses = 0;
  if (i < p.n) {
    const KvOffloadCache& c = p.cache;
    const int h = p.heads[i];
    const int32_t t = p.tokens[i];
    int32_t slot = 0;
    if (lane == 0) {
      slot = offload_lookup(c, h, t, true);
      reads = 1;
      misses = slot < 0;
    }
    slot = __shfl_sync(0xffffffffu, slot, 0, 32);
    const KvView& kv = p.host;
    const int row_bytes = kv.head_dim * kv_elem_bytes(kv.elem);
    const int64_t ld = int64_t(kv.n_kv_head) * row_bytes;
    const int64_t host_row = int64_t(kv.block_table[t / kv.page_size]) * kv.page_size + t % kv.page_size;
    const int64_t src = slot >= 0 ? (int64_t(slot) * c.line_tokens + t % c.line_tokens) * ld : host_row * ld;
    const char* kb = slot >= 0 ? static_cast<const char*>(c.bank_k) : static_cast<const char*>(kv.k_pool);
    const char* vb = slot >= 0 ? static_cast<const char*>(c.bank_v) : static_cast<const char*>(kv.v_pool);
    for (int ch = lane; ch < row_bytes / 16; ch += 32) {
      const int64_t off = src + int64_t(h) * row_bytes + ch * 16;
      if (p.k_out)
        reinterpret_cast<uint4*>(static_cast<char*>(p.k_out) + int64_t(i) * row_bytes)[ch] =
            *reinterpret_cast<const uint4*>(kb + off);
      if (p.v_out && vb)
        reinterpret_cast<uint4*>(static_cast<char*>(p.v_out) + int64_t(i) * row_bytes)[ch] =
            *reinterpret_cast<const uint4*>(vb + off);
    }
  }
  offload_add_stats(p.cache, reads, misses);
}

size_t update_smem(int32_t n_slots) { return size_t(pow2_at_least(n_slots)) * 8 + size_t(pow2_at_least(n_slots)) * 4; }

}  // namespace

void kv_offload_begin_step(int32_t* tick, Stream s) {
  begin_step_kernel<<<1, 1, 0, static_cast<cudaStream_t>(s)>>>(tick);
  LC_LAUNCH_CHECK("kv_offload_begin_step");
}

void kv_offload_append(const KvOffloadLayer& l, const KvView& host, const void* k_new, const void* v_new, Stream s) {
  if (!l.keys.enabled() && !l.kv.enabled()) return;
  for (const KvOffloadCache* c : {&l.keys, &l.kv})
    LC_REQUIRE(!c->enabled() || (c->bank_k && (!k_new || v_new || !c->bank_v) && c->n_kv_head == host.n_kv_head),
               "internal: kv_offload_append needs caches of the view's %d KV heads and both new rows (or none)",
               host.n_kv_head);
  LC_REQUIRE(host.seq_lens && host.n_seq == 1 && host.head_dim * kv_elem_bytes(host.elem) % 16 == 0 &&
                 (k_new || (host.k_pool && host.v_pool && host.block_table && host.page_size >= 1)),
             "internal: kv_offload_append needs one sequence with 16-byte rows (and the view's pools without new rows)");
  const int row_bytes = host.head_dim * kv_elem_bytes(host.elem);
  append_kernel<<<dim3(unsigned(host.n_kv_head), 2), 32, 0, static_cast<cudaStream_t>(s)>>>(l, host, k_new, v_new,
                                                                                            row_bytes);
  LC_LAUNCH_CHECK("kv_offload_append heads=%d", host.n_kv_head);
}

void kv_offload_gather(const KvOffloadGatherParams& p, Stream s) {
  LC_REQUIRE(p.cache.enabled() && p.host.on_device && p.heads && p.tokens && p.n >= 0 &&
                 p.host.head_dim * kv_elem_bytes(p.host.elem) % 16 == 0,
             "internal: kv_offload_gather needs a cache, a device host view with 16-byte rows, heads and tokens");
  if (p.n == 0) return;
  constexpr int kWarps = 8;
  gather_kernel<<<unsigned((p.n + kWarps - 1) / kWarps), kWarps * 32, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("kv_offload_gather n=%d", p.n);
}

void kv_offload_update(const KvOffloadLayer& l, const KvView& host, Stream s) {
  int32_t max_slots = 0;
  for (const KvOffloadCache* cp : {&l.keys, &l.kv}) {
    const KvOffloadCache& c = *cp;
    if (!c.enabled()) continue;
    LC_REQUIRE(c.bank_k && c.slot_line && c.last_use && c.miss_lines && c.miss_count && c.stats && c.tick,
               "internal: kv_offload_update with an incomplete cache");
    LC_REQUIRE(c.n_buckets == 0 || (c.hash_used && c.n_buckets >= kBucketsPerSlot * c.n_slots &&
                                    (c.n_buckets & (c.n_buckets - 1)) == 0),
               "internal: kv_offload_update with a hash map of %d buckets for %d slots (a power of two >= %d x slots)",
               c.n_buckets, c.n_slots, kBucketsPerSlot);
    LC_REQUIRE(c.n_slots >= 1 && c.n_slots <= kMaxOffloadSlots && c.line_tokens >= 1 && c.n_kv_head == host.n_kv_head &&
                   (c.admit_steps == 1 || c.admit_steps == 2),
               "internal: kv_offload_update with %d slots (1..%d), line of %d tokens, %d/%d KV heads, admit %d",
               c.n_slots, kMaxOffloadSlots, c.line_tokens, c.n_kv_head, host.n_kv_head, c.admit_steps);
    max_slots = std::max(max_slots, c.n_slots);
  }
  if (max_slots == 0) return;
  LC_REQUIRE(host.on_device && host.head_dim * kv_elem_bytes(host.elem) % 16 == 0,
             "internal: kv_offload_update needs a device-addressable host view with 16-byte rows");
  const size_t smem = update_smem(max_slots);
  // Opt in above the default 48 KiB on the first launch: the kernel's static shared memory (the
  // reduction's) comes on top of the dynamic part, so 48 KiB of keys alone already exceed it.
  static size_t allowed = 0;
  if (smem > allowed) {
    LC_CUDA_CHECK(cudaFuncSetAttribute(update_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                  "kv_offload_update smem %zu bytes", smem);
    allowed = smem;
  }
  update_kernel<<<dim3(unsigned(host.n_kv_head), 2), kThreads, smem, static_cast<cudaStream_t>(s)>>>(l, host);
  LC_LAUNCH_CHECK("kv_offload_update heads=%d slots=%d", host.n_kv_head, max_slots);
}

}  // namespace longctx::cuda
