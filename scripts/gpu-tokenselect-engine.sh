#!/usr/bin/env bash
# gpu-tokenselect-engine.sh: the device-machine run of TokenSelect in the GPU model (issue 16):
# tests, memcheck, and `bench model` tokenselect vs dense in the same call.
#
# What: (1) test_gpu GpuTokenSelect* (the GPU model's tokenselect vs dense within the budget and vs
# the CPU TokenSelect on a tiny random model, the selection cache) and the suites whose code paths
# the pre-RoPE hooks touch (GpuModel*, GpuGraph*, GpuBatch*, GpuMInference*, GpuFailure*, DeviceChoice*);
# (2) test_tokenselect_step (the one-layer step and the cache's cosine kernel); (3) compute-sanitizer
# memcheck on GpuTokenSelect.MatchesCpuTokenSelect; (4) `longctx bench model --device cuda
# --random-weights llama3-8b --lengths $LENGTHS --decode 32`, --attn dense then tokenselect, one
# process each (own warm-up). Benchmarks run before (3)-(4)'s regression suites so that a call
# cut at its limit still brings them back. Logs and JSON land in $OUT.
# Build here (no GPU needed), then pack into the lead's checkout's carry folder:
#   cmake --build build-gpu -j2 --target longctx test_gpu test_tokenselect_step
#   bash scripts/gpu-tokenselect-engine.sh --pack build-gpu /work/main/.carry/ts-engine
# Run on the device: OUT=$OUT BIN=.carry/ts-engine bash .carry/ts-engine/gpu-tokenselect-engine.sh
# (env: STEPS to pick steps, ATTNS the --attn specs to bench, LENGTHS the bench lengths)
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/ts-engine-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry/lib" "$tmp"
  cp "$build/src/cli/longctx" "$build/tests/gpu/test_gpu" "$build/tests/cuda/test_tokenselect_step" "$tmp/"
  strip "$tmp"/*
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  source "$(dirname "$0")/gpu-carry.sh"
  carry_libs "$carry/lib" "$tmp/longctx" "$tmp/test_gpu" "$tmp/test_tokenselect_step"
  cp "$0" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/ts-engine}
LENGTHS=${LENGTHS:-128k}
ATTNS=${ATTNS:-dense tokenselect}  # one bench process each, in this order
STEPS=${STEPS:-tests_engine tests_step bench tests_hooks memcheck}
mkdir -p "$OUT" /tmp/ts-engine-bin && tar -xJf "$BIN/bin.tar.xz" -C /tmp/ts-engine-bin || exit 2
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
X=/tmp/ts-engine-bin
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step() {  # step NAME TIMEOUT CMD...: run, keep the log, report failure without stopping
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date -u +%T))"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  grep -E "FAILED|Failure|Expected|Which is|error|ERROR SUMMARY|^\[  (PASSED|SKIPPED)|worst|greedy:|exact set" \
    "$OUT/$name.log" | head -40
  [ $rc = 0 ] || { echo "$name FAILED (rc=$rc)"; status=1; }
}

has() { [[ " $STEPS " == *" $1 "* ]]; }
has tests_engine && step tests_engine 60 "$X/test_gpu" --gtest_filter='GpuTokenSelect*'
has tests_step && step tests_step 40 "$X/test_tokenselect_step"
has bench && for attn in $ATTNS; do
  echo "== bench model --attn $attn --lengths $LENGTHS ($(date -u +%T))"
  timeout ${BENCH_TIMEOUT:-80} "$X/longctx" bench model --device cuda --random-weights llama3-8b --attn "$attn" \
    --lengths "$LENGTHS" --decode 32 --json "$OUT/bench_${attn//[=,]/_}.json" > "$OUT/bench_${attn//[=,]/_}.log" 2>&1; rc=$?
  tail -6 "$OUT/bench_${attn//[=,]/_}.log"
  [ $rc = 0 ] || { echo "bench $attn FAILED (rc=$rc)"; status=1; }
done
has tests_hooks && step tests_hooks ${HOOKS_TIMEOUT:-60} "$X/test_gpu" --gtest_filter='GpuModel*:GpuGraph*:GpuBatch*:GpuMInference*:GpuFailure*:DeviceChoice*'
has memcheck && step memcheck ${MEMCHECK_TIMEOUT:-45} compute-sanitizer --tool memcheck --error-exitcode 99 "$X/test_gpu" \
  --gtest_filter='GpuTokenSelect.MatchesCpuTokenSelect'
exit $status
