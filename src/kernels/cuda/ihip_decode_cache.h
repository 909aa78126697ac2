// ihip_decode_cache.h (cuda): InfiniteHiP's per-stage decode mask cache on the device: the
// refresh decision of a decode step and the commit of a refreshed stage's output, so that one
// captured CUDA graph serves every step type (None / S1 / S1&2 / All) with no host sync.
// CPU twin: InfiniteHipMethod::decode_set (methods/infinitehip/infinitehip_method.cpp); tested
// through the GPU method (tests/cuda/test_ihip_gpu_method.cpp: key sets of every step equal to
// the CPU method's) and the GPU model (tests/gpu/test_gpu_infinitehip.cpp).
//
// What, per layer and decode step of one sequence (len = *seq_len, pos = len - 1):
//   plan    first = the first stage i whose cache is missing (refresh_pos[i] < 0), ahead of the
//           step (pos < refresh_pos[i]) or refresh[i] steps old; stages [first, N) refresh.
//           A step whose candidates fit min_k (the CPU routes it dense) refreshes every stage
//           (all candidates survive: the key set is every key) and records nothing, so the CPU's
//           state and the GPU's agree when the route turns sparse. Writes the stages' inputs:
//           stage0_len (the stage-0 KvView's length: len if stage 0 refreshes, else 0 = no
//           candidates) and in_len[first] = cache_len[first - 1] (0 for a stage that does not
//           refresh: no candidates, the kernels return at once); refresh_pos, win_begin (at the
//           stage-0 refresh: its candidate end) and the step-type counters.
//   commit  after stage i ran into its scratch output: when it refreshed, copy it into the
//           layer's cache i and give stage i + 1 its length as input.
// The pruning stages themselves are kernels/cuda/ihip_prune.h's, unchanged: a stage with no
// candidates writes an empty scratch output that is not committed.
//   keys    (rope=on: the pre-RoPE attention) the step's key set as a position list: [0, sink_end)
//           + the last stage's cache + [max(win_begin, sink_end), len), sink_end = min(n_sink, len)
//           (InfiniteHipMethod's IhipKeySet::keys), padded with position 0 up to the list's
//           capacity; its length and the query's StreamingLLM position (length - 1) on the device.
//           With no cache (a dense step): the length is len and the list is left alone (the
//           caller passes 0..capacity-1).
// One sequence per call (the method keeps its caches per sequence: GpuMethod::keeps_sequence_state).
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

inline constexpr int kIhipMaxStages = 8;

struct IhipDecodePlanParams {
  const int32_t* seq_len = nullptr;  // [1] the step's kv length (device: a replayed graph sees it change)
  int n_stage = 0;                   // N <= kIhipMaxStages
  int32_t refresh[kIhipMaxStages] = {};  // steps between refreshes of stage i
  int64_t n_sink = 256, n_stream = 1024;
  int64_t min_k = 0;             // the route's threshold: candidates <= min_k is a dense step
  int32_t* refresh_pos = nullptr;  // [N] layer state: position of stage i's last refresh (-1: none)
  int32_t* win_begin = nullptr;    // [1] layer state: the window's start (the stage-0 refresh's candidate end)
  const int32_t* cache_len = nullptr;  // [N] layer state: each stage's cached output length
  int32_t* refreshes = nullptr;    // [N] out: 1 where stage i refreshes this step
  int32_t* stage0_len = nullptr;   // [1] out
  int32_t* in_len = nullptr;       // [N] out: stage i's input length (entry 0 unused)
  int32_t* counts = nullptr;       // [N + 1] statistics: sparse steps refreshing from stage i; [N]: cached steps
};
void ihip_decode_plan(const IhipDecodePlanParams& p, Stream s = nullptr);

struct IhipDecodeCommitParams {
  int stage = 0, n_stage = 0;
  const int32_t* refreshes = nullptr;  // [N] the plan's flags
  const int32_t* out = nullptr;        // [cap] the stage's fresh output
  const int32_t* out_len = nullptr;    // [1]
  int32_t* cache = nullptr;            // [cap] layer state
  int32_t* cache_len = nullptr;        // [N] layer state (entry `stage` written)
  int64_t cap = 0;
  int32_t* in_len = nullptr;           // [N] the next stage's input length (entry stage + 1 written)
};
void ihip_decode_commit(const IhipDecodeCommitParams& p, Stream s = nullptr);

struct IhipDecodeKeysParams {
  const int32_t* seq_len = nullptr;    // [1]
  const int32_t* sel = nullptr;        // [>= *sel_len] the last stage's cache, or nullptr: every key
  const int32_t* sel_len = nullptr;    // [1]
  const int32_t* win_begin = nullptr;  // [1]
  int64_t n_sink = 256;
  int32_t* keys = nullptr;             // [cap] (sparse)
  int64_t cap = 0;
  int32_t* n_keys = nullptr;           // [1] out
  int32_t* q_pos = nullptr;            // [1] out: n_keys - 1
};
void ihip_decode_keys(const IhipDecodeKeysParams& p, Stream s = nullptr);

}  // namespace longctx::cuda
