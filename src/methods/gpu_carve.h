// gpu_carve.h: a GpuMethod's sub-buffers in one device block. The method's Layout takes each
// buffer's offset in turn (Carve::take); device_bytes() and allocate() build the same Layout, so
// the bound the model's fit check adds (memory_plan.h) and the allocation cannot drift apart.
#pragma once
#include <cstddef>

namespace longctx {

// Every sub-buffer starts on cudaMalloc's alignment (gpu/memory_plan.h's kAlign), which the
// kernels' vector loads (16 bytes) and TMA descriptors (128 bytes) need.
inline constexpr size_t kGpuSubAlign = 256;

struct Carve {
  size_t off = 0;  // bytes taken so far (aligned): the block's size once every buffer is taken
  size_t take(size_t bytes) {
    const size_t at = off;
    off = (off + bytes + kGpuSubAlign - 1) / kGpuSubAlign * kGpuSubAlign;
    return at;
  }
};

}  // namespace longctx
