#!/usr/bin/env bash
# gpu-offload.sh: the device-machine run of KV offload (issue 17): GPU tests, memcheck, benchmark.
#
# What: (1) test_kv_offload (read-through + LRU update = the CPU twin; HiP decode with offload on
# == off, bit-identical, partly replayed from a CUDA graph), test_kv's GPU cases, HiP's GPU tests
# (test_hip_gpu: unchanged with offload off) and the decode kernels' tests
# of test_cuda (decode_split.cuh gained the V-offset hook); (2) compute-sanitizer memcheck on
# test_kv_offload; (3) longctx_bench_offload at $LENS (device vs offload vs uvm, one layer of
# Llama-3-8B geometry); (4) longctx_bench_hip at 1M (HiP's own benchmark, for comparison with its
# recorded numbers). Set SKIP_TESTS=1 to run the benchmark only. Logs and JSON land in $OUT.
# Build here (no GPU needed), then pack:
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpu -j2 test_kv_offload test_kv test_hip_gpu test_cuda \
#     longctx_bench_offload longctx_bench_hip
#   scripts/gpu-offload.sh --pack build-gpu /work/main/.carry/offload
# Run on the device: OUT=/tmp/out BIN=.carry/offload LENS=1048576 bash .carry/offload/gpu-offload.sh
set -uo pipefail
BINS="test_kv_offload test_kv test_hip_gpu test_cuda longctx_bench_offload longctx_bench_hip"
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3
  rm -rf "$carry" && mkdir -p "$carry/lib"
  cp "$build/tests/kv/test_kv_offload" "$build/tests/kv/test_kv" "$build/tests/cuda/test_hip_gpu" \
    "$build/tests/cuda/test_cuda" "$build/bench/longctx_bench_offload" \
    "$build/bench/longctx_bench_hip" "$carry/"
  for b in $BINS; do strip "$carry/$b"; done
  for lib in $(for b in $BINS; do ldd "$carry/$b"; done | awk '/=> \// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|ld-linux*|libcublas*|libcuda*) ;;
      *) cp -L "$lib" "$carry/lib/" ;;
    esac
  done
  cp "$0" "$carry/gpu-offload.sh"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/offload}
LENS=${LENS:-1048576}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  grep -E "MemTotal|MemAvailable" /proc/meminfo; echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

run_test() {  # name timeout [gtest args]
  local t=$1 to=$2; shift 2
  timeout "$to" "$BIN/$t" "$@" > "$OUT/$t.log" 2>&1; local rc=$?
  grep -E "FAILED|Failure|Expected|Which is|reads," "$OUT/$t.log" | head -20
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran" "$OUT/$t.log"
  [ $rc = 0 ] || { echo "$t FAILED (rc=$rc)"; status=1; }
}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== tests"
  run_test test_kv_offload 90
  run_test test_kv 60
  run_test test_hip_gpu 60
  run_test test_cuda 150 --gtest_filter='SparseDecode*:AttnDecode*'
  echo "== compute-sanitizer memcheck (test_kv_offload)"
  timeout ${MEMCHECK_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_kv_offload" \
    > "$OUT/memcheck.log" 2>&1; rc=$?
  tail -3 "$OUT/memcheck.log"
  [ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; status=1; }
fi

echo "== longctx_bench_offload --lens $LENS"
timeout ${BENCH_TIMEOUT:-150} "$BIN/longctx_bench_offload" --lens "$LENS" --json "$OUT/bench_offload.json" > /dev/null \
  2> "$OUT/bench_offload.log"; rc=$?
cat "$OUT/bench_offload.log"
[ $rc = 0 ] || { echo "OFFLOAD BENCH FAILED (rc=$rc)"; status=1; }

if [ "${SKIP_HIP_BENCH:-0}" != 1 ]; then
  echo "== longctx_bench_hip (1M decode)"
  timeout ${HIP_TIMEOUT:-60} "$BIN/longctx_bench_hip" --lens 1048576 --prefill 16384 --json "$OUT/bench_hip.json" \
    > /dev/null 2> "$OUT/bench_hip.log"; rc=$?
  cat "$OUT/bench_hip.log"
  [ $rc = 0 ] || { echo "HIP BENCH FAILED (rc=$rc)"; status=1; }
fi
exit $status
