#!/usr/bin/env bash
# gpu-sparse-decode.sh: the device-machine run of sparse decode: tests, memcheck, benchmarks.
#
# What: (1) the sparse decode and dense decode GPU tests (test_cuda, fp64 oracles), (2)
# compute-sanitizer memcheck on their small shapes, (3) longctx_bench_sparse_decode (A-shape
# sparse decode vs dense decode, 128K/1M, bf16/fp8, a mixed batch of 32), (4) dense decode of the
# base commit vs this commit (longctx_bench_cuda, old and new binaries side by side), since both
# decode kernels share one mainloop (decode_split.cuh). Logs and JSON land in $OUT.
# Build here (no GPU needed):
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpu -j2 test_cuda longctx_bench_sparse_decode longctx_bench_cuda
# then copy the stripped binaries into BIN (default .carry/decode) as test_cuda,
# bench_sparse_decode, bench_cuda_new and (built from the base commit) bench_cuda_old.
# Run on the device: OUT=/tmp/out BIN=.carry/decode bash scripts/gpu-sparse-decode.sh
set -uo pipefail
OUT=${OUT:-out}
BIN=${BIN:-.carry/decode}
mkdir -p "$OUT"
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== tests"
timeout ${TEST_TIMEOUT:-100} "$BIN/test_cuda" --gtest_filter='SparseDecode*:AttnDecode*:AttnMerge*' > "$OUT/tests.log" 2>&1; rc=$?
grep -E "^\s+(sparse|graph|sink|decode|paged|fp8)|FAILED|Failure|error" "$OUT/tests.log" | head -60
grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran" "$OUT/tests.log"
[ $rc = 0 ] || { echo "TESTS FAILED (rc=$rc)"; status=1; }

echo "== compute-sanitizer memcheck (small shapes)"
timeout ${MEMCHECK_TIMEOUT:-90} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_cuda" \
  --gtest_filter='SparseDecodeSmall*:SparseDecodeArgs*:AttnDecodeSmall*' > "$OUT/memcheck.log" 2>&1; rc=$?
tail -3 "$OUT/memcheck.log"
[ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; status=1; }

echo "== sparse decode vs dense decode"
timeout ${BENCH_TIMEOUT:-120} "$BIN/bench_sparse_decode" --json "$OUT/bench_sparse_decode.json" > /dev/null 2> "$OUT/bench_sparse_decode.log"; rc=$?
cat "$OUT/bench_sparse_decode.log"
[ $rc = 0 ] || { echo "SPARSE DECODE BENCH FAILED (rc=$rc)"; status=1; }

echo "== dense decode, base commit vs this commit (alternating, twice each)"
for run in old.1 new.1 old.2 new.2; do
  which=${run%.*}
  timeout ${DENSE_TIMEOUT:-45} "$BIN/bench_cuda_$which" --prefill 8192 --decode 131072,1048576 --no-ops \
    --json "$OUT/bench_cuda_$run.json" > /dev/null 2> "$OUT/bench_cuda_$run.log"; rc=$?
  echo "-- $run"; grep -E "^(decode|batched)" "$OUT/bench_cuda_$run.log" | grep -v "splits=[0-9]*:"
  grep -E "splits=" "$OUT/bench_cuda_$run.log" | head -4
  [ $rc = 0 ] || { echo "DENSE BENCH $run FAILED (rc=$rc)"; status=1; }
done
exit $status
