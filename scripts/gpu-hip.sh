#!/usr/bin/env bash
# gpu-hip.sh: the device-machine run of HiP: GPU tests, memcheck, benchmark beside torch SDPA.
#
# What: (1) test_hip_gpu (the CUDA mask estimation bit-equal to the CPU reference, prefill and
# paged decode with the refresh rule; tensor-core prefill judged against fp64 on random inputs), test_hip_gpu_method (the GpuMethod's prefill and decode
# indexes = the CPU method's key sets, decode as one replayed CUDA graph) and test_kv_offload (HiP
# decode through the KV offload tier bit-identical to without it); (2) compute-sanitizer
# memcheck on test_hip_gpu; (3) longctx_bench_hip (decode 128K/1M refresh/cached/avg over r_m=8,
# prefill 16K-128K estimation + sparse attention, vs our dense kernels); (4) torch SDPA (cuDNN and
# flash) on the same shapes (bench/torch_baseline.py). Logs and JSON land in $OUT.
# Build here (no GPU needed), then pack:
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpu -j2 test_hip_gpu test_hip_gpu_method test_kv_offload longctx_bench_hip
#   scripts/gpu-hip.sh --pack build-gpu /work/main/.carry/hip
# Run on the device: OUT=/tmp/out BIN=.carry/hip bash .carry/hip/gpu-hip.sh
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3
  rm -rf "$carry" && mkdir -p "$carry/lib"
  cp "$build/tests/cuda/test_hip_gpu" "$build/tests/cuda/test_hip_gpu_method" "$build/tests/kv/test_kv_offload" \
    "$build/bench/longctx_bench_hip" "$carry/"
  strip "$carry/test_hip_gpu" "$carry/test_hip_gpu_method" "$carry/test_kv_offload" "$carry/longctx_bench_hip"
  for lib in $(ldd "$carry/test_hip_gpu_method" | awk '/=> \// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|ld-linux*|libcublas*|libcuda*) ;;
      *) cp -L "$lib" "$carry/lib/" ;;
    esac
  done
  cp "$0" "$carry/gpu-hip.sh"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/hip}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== tests"
for t in test_hip_gpu test_hip_gpu_method test_kv_offload; do
  timeout ${TEST_TIMEOUT:-60} "$BIN/$t" > "$OUT/$t.log" 2>&1; rc=$?
  grep -E "FAILED|Failure|error|Expected|Which is" "$OUT/$t.log" | head -30
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran" "$OUT/$t.log"
  [ $rc = 0 ] || { echo "$t FAILED (rc=$rc)"; status=1; }
done

echo "== compute-sanitizer memcheck (test_hip_gpu)"
timeout ${MEMCHECK_TIMEOUT:-90} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_hip_gpu" \
  > "$OUT/memcheck.log" 2>&1; rc=$?
tail -3 "$OUT/memcheck.log"
[ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; status=1; }

echo "== longctx_bench_hip"
timeout ${BENCH_TIMEOUT:-100} "$BIN/longctx_bench_hip" --prefill ${PREFILL_LENS:-16384,32768,65536,131072} ${BENCH_ARGS:-} --json "$OUT/bench_hip.json" > /dev/null 2> "$OUT/bench_hip.log"; rc=$?
cat "$OUT/bench_hip.log"
[ $rc = 0 ] || { echo "HIP BENCH FAILED (rc=$rc)"; status=1; }

echo "== torch SDPA baseline"
timeout ${TORCH_TIMEOUT:-80} python3 bench/torch_baseline.py --prefill ${PREFILL_LENS:-16384,32768,65536,131072} --decode 131072,1048576 \
  --json "$OUT/bench_torch.json" > /dev/null 2> "$OUT/torch.log"; rc=$?
cat "$OUT/torch.log"
[ $rc = 0 ] || { echo "TORCH BASELINE FAILED (rc=$rc)"; status=1; }
exit $status
