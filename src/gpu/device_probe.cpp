// device_probe.cpp: see device_probe.h.
#include "gpu/device_probe.h"

#include "kernels/cuda/runtime.h"
#include "util/error.h"

namespace longctx::gpu {

Probe probe_device() {
  Probe p;
  try {
    if (cuda::device_count() == 0) {
      p.why = "no CUDA device found (no NVIDIA GPU or driver visible to this process)";
      return p;
    }
    const cuda::DeviceInfo d = cuda::device_info(0);
    p.name = d.name;
    p.free_bytes = d.free_mem;
    p.total_bytes = d.total_mem;
    // The kernels are compiled for sm_90a only (wgmma/TMA): any other GPU cannot run them.
    if (d.sm_major != 9 || d.sm_minor != 0) {
      p.why = fmt::format("GPU '{}' is sm_{}{}; longctx's CUDA kernels are built for Hopper (sm_90) only", d.name,
                          d.sm_major, d.sm_minor);
      return p;
    }
    p.usable = true;
  } catch (const std::exception& e) {
    p.why = e.what();
  }
  return p;
}

}  // namespace longctx::gpu
