// hip_self_extend_gpu.h: HiP with Self-Extend in the GPU model (`--device cuda --attn
// hip=...,self_extend=G:W`): the GPU twin of the CPU engine's HiP + Self-Extend
// (docs/self_extend.md decision 6; self_extend_attention.h). Tested by
// tests/gpu/test_gpu_hip_self_extend.cpp (the GPU model against the CPU engine).
//
// What: a pre-RoPE GpuMethod (gpu_method.h: attends()), built from dense Self-Extend's GPU parts
// (self_extend_gpu.h: rotated key copies per sequence, rotated queries, merge) and HiP's GPU
// builder (hip_gpu.h: the estimator and its mask cache). Per step of a layer:
//   route  the HiP side of the step's phase decides (HipMethod::route: dense_layers, and steps
//          with nothing to prune); dense steps run dense Self-Extend (SelfExtendGpu::attend_dense);
//   index  HiP's estimator on the queries and keys rotated at the grouped positions (SE2), the
//          same index for both parts (prefill: per query block; decode: cached between refreshes);
//   near   q and keys at their own positions, cuda::sparse_attention / sparse_decode over the
//          index with the row-level window W (row q sees its index's keys in (q - W, q]; (SE1));
//   far    q and keys at grouped positions, over the same index with the rows moved back by W
//          (prefill: q_pos0 - W; decode: shift W): row q sees its index's keys <= q - W (SE2);
//   merge  SelfExtendGpu::merge, one softmax (SE3).
// The plan kernels clip the index per query block (near: keys > first row - W; far: keys <= last
// row - W), the kernels mask per row: decision 6's split, the pairs of the CPU's index each
// scored near or grouped.
// Cost: HiP's (estimator + sparse attention) with the sparse attention run twice over the index
// (each part visits only its keys), both rotations of the step's rows, and the merge. Both parts
// run on the sparse kernel plain HiP uses (cuda::sparse_attention: on sm_90 at head_dim 128/256
// the Hopper kernel, its windowed variant for the near part). Benchmarks: docs/benchmarks.md.
// Memory: dense Self-Extend's (2 x the K cache in rotated copies) + HiP's index buffers.
// Not on the GPU (the registry refuses, "use --device cpu"): Self-Extend with a sparse method
// other than HiP, the fp8 KV cache's decode, KV offload.
// Decode replays from CUDA graphs (decode_graph_safe): dense Self-Extend's device-length prep
// (self_extend_gpu.h), HiP's device mask cache and refresh schedule, sparse_decode on device
// lengths; tiles at or below HiP's dense threshold (window + sinks + k keys: the route, a host
// decision) decode eagerly (decode_graph_min_kv).
#pragma once
#include <memory>

#include "methods/gpu_method.h"
#include "methods/hip/hip_method.h"
#include "methods/self_extend/self_extend_gpu.h"

namespace longctx {

// se: both phases' Self-Extend; prefill / decode: the HiP side of each phase (nullptr: the
// phase's steps are all dense Self-Extend). Throws Error when the model's shape has no kernel.
std::unique_ptr<GpuMethod> make_hip_self_extend_gpu(const SelfExtendParams& se, const HipMethod* prefill,
                                                    const HipMethod* decode, const MethodContext& ctx);

}  // namespace longctx
