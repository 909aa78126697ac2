#!/usr/bin/env bash
# gpu-hip-clocks-build.sh: builds longctx_bench_hip_clocks, the bench-only binary whose prefill
# estimator splits each CTA's cycles by phase (clock64(): prologue, scoring, the wait after it,
# radix select, compaction, the iteration's last barrier, epilogue; hip_estimate.h's
# hip_estimate_phase_clocks). Why a separate binary: the engine's build (and the bench timings)
# must not carry the clock reads. How: hip_estimate.cu and bench_hip.cu compiled again with the
# build folder's own nvcc commands plus -DLONGCTX_HIP_PHASE_CLOCKS, linked ahead of the build's
# liblongctx_cuda.a (whose hip_estimate object is then never pulled in).
# Run here (no GPU needed), after `cmake --build BUILD --target longctx_bench_hip`:
#   scripts/gpu-hip-clocks-build.sh [BUILD=build-gpu]   -> BUILD/bench/longctx_bench_hip_clocks
# On the device it prints one "phase clocks n=..." line per --prefill length (stderr).
set -euo pipefail
build=${1:-build-gpu}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(realpath "$build")/hip-clocks && mkdir -p "$tmp"
# The build's nvcc command for FILE (compile_commands.json), with the flag and our output path.
compile() {
  local file=$1 out=$2
  local cmd
  cmd=$(python3 -c 'import json,sys
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]: print(e["command"]); break' "$build/compile_commands.json" "$src/$file")
  [ -n "$cmd" ] || { echo "no compile command for $file in $build" >&2; exit 1; }
  (cd "$build" && eval "${cmd% -o *} -DLONGCTX_HIP_PHASE_CLOCKS -o $tmp/$out")
}
compile src/kernels/cuda/hip_estimate.cu hip_estimate.o
compile bench/bench_hip.cu bench_hip.o
/usr/bin/c++ -O3 -DNDEBUG -static-libstdc++ -static-libgcc "$tmp/bench_hip.o" "$tmp/hip_estimate.o" \
  -o "$build/bench/longctx_bench_hip_clocks" -Wl,-rpath,/usr/local/cuda/lib "$build/src/kernels/cuda/liblongctx_cuda.a" \
  /usr/local/cuda/lib/libcudart_static.a -ldl /usr/lib/x86_64-linux-gnu/librt.a /usr/local/cuda/lib/libcublasLt.so \
  -lcudadevrt -lcudart_static -lrt -lpthread -ldl
echo "built $build/bench/longctx_bench_hip_clocks"
