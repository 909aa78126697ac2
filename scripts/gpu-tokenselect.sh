#!/usr/bin/env bash
# gpu-tokenselect.sh: the device-machine run of TokenSelect's GPU kernels: tests, memcheck, bench.
#
# What: (1) the TokenSelect kernel tests (test_cuda TokenSelect*: paged dot product, soft vote,
# top-k, the whole selection vs fp64 / brute force), (2) compute-sanitizer memcheck on them,
# (3) longctx_bench_tokenselect (one decode step of one layer, Llama-3-8B geometry, 128K and 1M:
# scoring, softmax+sum, top-k, attention; miss and hit steps; our dense decode), (4) torch SDPA
# (cuDNN and flash) dense decode on the same shapes (bench/torch_baseline.py). Logs and JSON land
# in $OUT.
# Build here (no GPU needed):
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpu -j2 test_cuda longctx_bench_tokenselect
# then copy the stripped binaries into BIN (default .carry/tokenselect) as test_cuda and
# bench_tokenselect, with bench/torch_baseline.py as torch_baseline.py.
# Run on the device: OUT=/tmp/out BIN=.carry/tokenselect bash .carry/tokenselect/gpu-tokenselect.sh
set -uo pipefail
OUT=${OUT:-out}
BIN=${BIN:-.carry/tokenselect}
mkdir -p "$OUT"
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== tests"
timeout ${TEST_TIMEOUT:-90} "$BIN/test_cuda" --gtest_filter='TokenSelect*' > "$OUT/tests.log" 2>&1; rc=$?
grep -E "FAILED|Failure|error|seed" "$OUT/tests.log" | head -40
grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran" "$OUT/tests.log"
[ $rc = 0 ] || { echo "TESTS FAILED (rc=$rc)"; status=1; }

echo "== compute-sanitizer memcheck"
timeout ${MEMCHECK_TIMEOUT:-90} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_cuda" \
  --gtest_filter='TokenSelectPagedDot*:TokenSelectSoftVote*:TokenSelectTopK*' > "$OUT/memcheck.log" 2>&1; rc=$?
tail -3 "$OUT/memcheck.log"
[ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; status=1; }

echo "== tokenselect decode step vs dense decode"
timeout ${BENCH_TIMEOUT:-60} "$BIN/bench_tokenselect" --json "$OUT/bench_tokenselect.json" > /dev/null 2> "$OUT/bench_tokenselect.log"; rc=$?
cat "$OUT/bench_tokenselect.log"
[ $rc = 0 ] || { echo "TOKENSELECT BENCH FAILED (rc=$rc)"; status=1; }

echo "== torch SDPA dense decode (same shapes)"
timeout ${TORCH_TIMEOUT:-90} python3 "$BIN/torch_baseline.py" --prefill "" --decode 131072,1048576 \
  --json "$OUT/bench_torch.json" > /dev/null 2> "$OUT/torch.log"; rc=$?
cat "$OUT/torch.log" | tail -8
[ $rc = 0 ] || { echo "TORCH BASELINE FAILED (rc=$rc)"; status=1; }
exit $status
