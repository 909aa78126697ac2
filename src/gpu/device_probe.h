// device_probe.h: is there a GPU the CUDA path can use, and if not, why not (one line).
//
// Used by the Engine to fail clearly on --device cuda and to fall back to the CPU (with a note)
// on --device auto. Never throws: a missing driver or device is an answer, not an error.
#pragma once
#include <cstddef>
#include <string>

namespace longctx::gpu {

struct Probe {
  bool usable = false;
  std::string why;     // when !usable: "no CUDA device found", "GPU 'X' is sm_80; ..." ...
  std::string name;    // device 0's name when there is one
  size_t free_bytes = 0, total_bytes = 0;
};
Probe probe_device();

}  // namespace longctx::gpu
