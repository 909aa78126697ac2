#!/usr/bin/env bash
# gpu-infinitehip.sh: the device-machine run of InfiniteHiP: GPU tests, memcheck, benchmark beside
# torch SDPA.
#
# What: (1) test_ihip_gpu (the CUDA pruning stage bit-equal to the CPU reference in every RoPE
# mode, ties, the 3K preset at 70K with 32/8 heads, the decode index); (2) compute-sanitizer
# memcheck on its small cases; (3) longctx_bench_infinitehip (decode step types None / S1 / S1&2 /
# All at 128K and 1M, averaged over the (16,8,4) and (32,16,8) schedules, vs our dense decode);
# (4) torch SDPA (cuDNN and flash) decode on the same shapes (bench/torch_baseline.py).
# Logs and JSON land in $OUT.
# Build here (no GPU needed), then pack:
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpu -j2 test_ihip_gpu longctx_bench_infinitehip
#   scripts/gpu-infinitehip.sh --pack build-gpu /work/main/.carry/ihip
# Run on the device: OUT=/tmp/out BIN=.carry/ihip bash .carry/ihip/gpu-infinitehip.sh
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3
  rm -rf "$carry" && mkdir -p "$carry"
  cp "$build/tests/cuda/test_ihip_gpu" "$build/bench/longctx_bench_infinitehip" "$carry/"
  strip "$carry/test_ihip_gpu" "$carry/longctx_bench_infinitehip"
  cp "$0" "$carry/gpu-infinitehip.sh"
  cp "$(dirname "$0")/../bench/torch_baseline.py" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/ihip}
mkdir -p "$OUT"
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== tests"
timeout ${TEST_TIMEOUT:-90} "$BIN/test_ihip_gpu" > "$OUT/test_ihip_gpu.log" 2>&1; rc=$?
grep -E "FAILED|Failure|error|Expected|Which is" "$OUT/test_ihip_gpu.log" | head -30
grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran|OK \]" "$OUT/test_ihip_gpu.log"
[ $rc = 0 ] || { echo "test_ihip_gpu FAILED (rc=$rc)"; status=1; }

echo "== compute-sanitizer memcheck (test_ihip_gpu, small cases)"
timeout ${MEMCHECK_TIMEOUT:-90} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_ihip_gpu" \
  --gtest_filter='IhipGpu.Ties*:IhipGpu.StagesEqual*' > "$OUT/memcheck.log" 2>&1; rc=$?
tail -3 "$OUT/memcheck.log"
[ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; status=1; }

echo "== longctx_bench_infinitehip"
timeout ${BENCH_TIMEOUT:-60} "$BIN/longctx_bench_infinitehip" --json "$OUT/bench_infinitehip.json" > /dev/null \
  2> "$OUT/bench_infinitehip.log"; rc=$?
cat "$OUT/bench_infinitehip.log"
[ $rc = 0 ] || { echo "INFINITEHIP BENCH FAILED (rc=$rc)"; status=1; }

echo "== torch SDPA baseline"
timeout ${TORCH_TIMEOUT:-60} python3 "$BIN/torch_baseline.py" --prefill "" --decode 131072,1048576 \
  --json "$OUT/bench_torch.json" > /dev/null 2> "$OUT/torch.log"; rc=$?
cat "$OUT/torch.log"
[ $rc = 0 ] || { echo "TORCH BASELINE FAILED (rc=$rc)"; status=1; }
exit $status
