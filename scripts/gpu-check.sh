#!/usr/bin/env bash
# gpu-check.sh: the one device-machine run of the CUDA backend: tests, memcheck, benchmarks.
#
# What: (1) GPU tests (build-gpu/tests/cuda/test_cuda, fp64 CPU twins), (2) compute-sanitizer
# memcheck on the small-shape tests, (3) longctx_bench_cuda (our attention kernels), (4) torch
# SDPA cuDNN/flash baselines + copy bandwidth on the same shapes, (5) a table of ratios.
# Everything lands in $OUT (logs + JSON); the table is printed last. Each step has a timeout
# (a hung kernel must not eat the device budget); a timed-out step reports rc=124.
# Why one script: device time is scarce; one call does it all (docs/benchmarks.md).
# Build first, here (no GPU needed):
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpu -j2 test_cuda longctx_bench_cuda
# Run on the device (carry build-gpu/tests/cuda/test_cuda and build-gpu/bench/longctx_bench_cuda):
#   OUT=/tmp/out scripts/gpu-check.sh [--skip-tests] [--skip-torch] [--bench-args "..."]
set -uo pipefail
OUT=${OUT:-out}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
skip_tests=0; skip_torch=0; bench_args=""; torch_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-tests) skip_tests=1 ;;
    --skip-torch) skip_torch=1 ;;
    --bench-args) bench_args="$2"; shift ;;
    --torch-args) torch_args="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
export PYTHONUNBUFFERED=1
COMMIT=${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit $COMMIT"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ $skip_tests = 0 ]; then
  echo "== tests"
  timeout ${TEST_TIMEOUT:-150} "$BUILD/tests/cuda/test_cuda" > "$OUT/tests.log" 2>&1; rc=$?
  grep -E "^\s+(prefill|decode|paged|merge|rmsnorm|rope|swiglu|gemm)|FAILED" "$OUT/tests.log" | head -80; grep -E "^\[  (PASSED|FAILED|SKIPPED)" "$OUT/tests.log"
  [ $rc = 0 ] || { echo "TESTS FAILED (rc=$rc)"; status=1; }
  echo "== compute-sanitizer memcheck (small shapes)"
  timeout ${MEMCHECK_TIMEOUT:-200} compute-sanitizer --tool memcheck --error-exitcode 99 "$BUILD/tests/cuda/test_cuda" \
    --gtest_filter='*Small*' > "$OUT/memcheck.log" 2>&1; rc=$?
  tail -3 "$OUT/memcheck.log"
  [ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; status=1; }
fi

echo "== longctx_bench_cuda"
timeout ${BENCH_TIMEOUT:-150} "$BUILD/bench/longctx_bench_cuda" $bench_args --json "$OUT/bench_ours.json" > /dev/null 2> "$OUT/bench.log"; rc=$?
cat "$OUT/bench.log"
[ $rc = 0 ] || { echo "BENCH FAILED (rc=$rc)"; status=1; }

if [ $skip_torch = 0 ]; then
  echo "== torch baseline"
  timeout ${TORCH_TIMEOUT:-150} python3 bench/torch_baseline.py $torch_args --json "$OUT/bench_torch.json" > /dev/null 2> "$OUT/torch.log"; rc=$?
  cat "$OUT/torch.log"
  [ $rc = 0 ] || { echo "TORCH BASELINE FAILED (rc=$rc)"; status=1; }
fi

if [ -f "$OUT/bench_ours.json" ] && [ -f "$OUT/bench_torch.json" ]; then
  echo "== ours vs torch (ratio > 1: longctx faster)"
  python3 bench/compare.py "$OUT/bench_ours.json" "$OUT/bench_torch.json" --out "$OUT/results.json" \
    --meta "git_commit=$COMMIT" "command=scripts/gpu-check.sh"
fi
exit $status
