#!/usr/bin/env bash
# gpu-tokenselect-graph.sh: the device-machine run of TokenSelect's device-side decode step
# (issue 16): the device-count top-k, the selection cache decided on the device, graph replay.
#
# What: (1) test_cuda TopKSelect* + TokenSelect* (cuda::top_k_select vs the CPU top_k_indices:
# ties, M = k, k > M, M = k +- 1, device counts, the skip flag, graph replay; the selection
# kernels); (2) test_gpu GpuTokenSelect* (the GPU model vs the CPU TokenSelect, cache hits and
# misses, graph == eager); (3) `longctx bench model --device cuda --random-weights llama3-8b
# --lengths $LENGTHS --decode 32` for each of $ATTNS, one process each, dense first (the
# baseline in the same call); (4) bench/bench_tokenselect.cu's one-layer decode step at 128K;
# (5) test_tokenselect_step; (6) compute-sanitizer memcheck on the top-k and device-count tests;
# (7) the test_gpu suites whose paths the model's graph change touches. Logs and JSON in $OUT.
# Build here (no GPU needed), then pack into the lead's checkout's carry folder:
#   cmake --build build-gpu -j2 --target longctx test_gpu test_cuda test_tokenselect_step longctx_bench_tokenselect
#   bash scripts/gpu-tokenselect-graph.sh --pack build-gpu /work/main/.carry/ts-graph
# Run on the device: OUT=$OUT BIN=.carry/ts-graph bash .carry/ts-graph/gpu-tokenselect-graph.sh
# (env: STEPS to pick steps, ATTNS the --attn specs to bench, LENGTHS the bench lengths)
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
BINS="src/cli/longctx tests/gpu/test_gpu tests/cuda/test_cuda tests/cuda/test_tokenselect_step bench/longctx_bench_tokenselect"
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/ts-graph-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry/lib" "$tmp"
  for b in $BINS; do cp "$build/$b" "$tmp/"; done
  strip "$tmp"/*
  (cd "$tmp" && tar -cJf "$carry/bin.tar.xz" *)
  carry_libs "$tmp/lib" "$tmp"/*  # compressed too: OpenBLAS alone is 36 MB
  tar -C "$tmp" -cJf "$carry/lib.tar.xz" lib && rmdir "$carry/lib"
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/ts-graph}
LENGTHS=${LENGTHS:-128k}
ATTNS=${ATTNS:-dense tokenselect tokenselect=theta=-1 tokenselect=theta=2}
STEPS=${STEPS:-tests_topk tests_engine bench bench_layer tests_step memcheck tests_hooks}
X=/tmp/ts-graph-bin
mkdir -p "$OUT"
unpack_bin "$BIN/bin.tar.xz" "$X"
tar -xJf "$BIN/lib.tar.xz" -C "$X" || exit 2
status=0
record_env "$OUT/env.txt" "${GIT_COMMIT:-unknown}"

# step (gpu-carry.sh): output in $OUT/NAME.log; after each step the lines that matter, and a
# failure reported without stopping.
STEP_SUMMARY=/dev/null
step_show() {
  grep -E "FAILED|Failure|Expected|Which is|error|ERROR SUMMARY|^\[  (PASSED|SKIPPED)|worst|greedy:|N=" \
    "$OUT/$1.log" | head -30
  [ "$2" = 0 ] || echo "$1 FAILED (rc=$2)"
}

has() { [[ " $STEPS " == *" $1 "* ]]; }
has tests_topk && step tests_topk 40 "$X/test_cuda" --gtest_filter='TopKSelect*:TokenSelect*'
has tests_engine && step tests_engine 60 "$X/test_gpu" --gtest_filter='GpuTokenSelect*'
has bench && for attn in $ATTNS; do
  name=bench_${attn//[=,]/_}
  echo "== bench model --attn $attn --lengths $LENGTHS ($(date -u +%T))"
  timeout ${BENCH_TIMEOUT:-45} "$X/longctx" bench model --device cuda --random-weights llama3-8b --attn "$attn" \
    --lengths "$LENGTHS" --decode 32 --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1; rc=$?
  tail -4 "$OUT/$name.log"
  [ $rc = 0 ] || { echo "bench $attn FAILED (rc=$rc)"; status=1; }
done
has bench_layer && step bench_layer 40 "$X/longctx_bench_tokenselect" --lens 131072 --chunk-lens 131072 \
  --json "$OUT/bench_layer.json"
has tests_step && step tests_step 40 "$X/test_tokenselect_step"
has memcheck && step memcheck 40 compute-sanitizer --tool memcheck --error-exitcode 99 "$X/test_cuda" \
  --gtest_filter='TopKSelect*:TokenSelectDeviceCounts*'
has tests_hooks && step tests_hooks 60 "$X/test_gpu" --gtest_filter='GpuModel*:GpuGraph*:GpuBatch*:GpuFailure*'
exit $status
