#!/usr/bin/env bash
# gpu-hip-fp8-engine.sh: one device call for HiP's prefill estimate over the fp8 cache's keys
# (--attn-tiles fp8, issue 14): the branch's GPU tests, memcheck on the new builder case, and the
# end-to-end prefill A/B at 128K on the Llama-3-8B geometry (random weights, all 32 layers, fp8
# cache): main's longctx with fp8 tiles (HiP's estimate over the bf16 staging) vs the branch's with
# bf16 tiles and with fp8 tiles (the estimate over the e4m3 keys), two interleaved rounds.
# Each step has a timeout and is skipped when it would pass BUDGET seconds (default 390); logs and
# JSON go to /tmp/hipfp8-out, tarred into $OUT/results.tgz after every step.
# Pack (here, no GPU needed), into C = /work/main/.carry/hip-fp8-engine:
#   nice ninja -C build -j2 longctx test_gpu test_hip_gpu_method
#   bins.tar.xz in C: longctx, test_gpu, test_hip_gpu_method (stripped), longctx_main (main's
#   build/src/cli/longctx), lib/ (the non-system shared libraries ldd lists); commit.txt (branch
#   and main commits); this script beside it.
# Run on the device: OUT=$OUT bash .carry/hip-fp8-engine/gpu-hip-fp8-engine.sh
set -uo pipefail
FINAL=${OUT:-out}; mkdir -p "$FINAL"; OUT=/tmp/hipfp8-out; rm -rf $OUT; mkdir -p $OUT
C=$(cd "$(dirname "$0")" && pwd); B=/tmp/hipfp8; rm -rf $B; mkdir -p $B && tar -C $B -xJf "$C/bins.tar.xz"
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
log() { echo "== $* ($(date -u +%T), ${SECONDS}s)" | tee -a "$OUT/steps.log"; }
step() { local name=$1 t=$2; shift 2; log "$name";
  if [ $((SECONDS + t)) -gt ${BUDGET:-390} ]; then echo "$name skipped (time)" | tee -a "$OUT/steps.log"; return; fi
  timeout $t "$@" > "$OUT/$name.log" 2>&1; local rc=$?;
  echo "$name rc=$rc" | tee -a "$OUT/steps.log"; tail -${TAILN:-6} "$OUT/$name.log"; tar -C $OUT -czf "$FINAL/results.tgz" .; }
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv; cat "$C/commit.txt"; date -u; } > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
TAILN=4 step hipfp8 60 $B/test_gpu --gtest_filter='HipFp8*'
grep "\[hip fp8\]" $OUT/hipfp8.log
TAILN=4 step attn_tiles 150 $B/test_gpu --gtest_filter='AttnTiles*'
grep "\[attn-tiles\]" $OUT/attn_tiles.log
TAILN=3 step hip_gpu_method 40 $B/test_hip_gpu_method
TAILN=3 step memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_gpu --gtest_filter='HipFp8*'
A="bench model --device cuda --random-weights llama3-8b --lengths 128k --attn hip --kv-cache fp8 --decode 2"
for r in 1 2; do
  TAILN=3 step main_fp8_r$r 60 $B/longctx_main $A --attn-tiles fp8 --json $OUT/main_fp8_r$r.json
  TAILN=3 step new_bf16_r$r 60 $B/longctx $A --attn-tiles bf16 --json $OUT/new_bf16_r$r.json
  TAILN=3 step new_fp8_r$r 60 $B/longctx $A --attn-tiles fp8 --json $OUT/new_fp8_r$r.json
done
TAILN=3 step memcheck_engine 60 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_gpu --gtest_filter='AttnTiles.HipFp8EstimateAndTilesNearBf16HeadDim64'
ls -la $OUT $FINAL
