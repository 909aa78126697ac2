#!/usr/bin/env bash
# gpu-ihip-ropeon.sh: the device-machine run of InfiniteHiP rope=on prefill on Gemma 3's geometry
# (issues 15 and 19): a sparse chunk's 64-row blocks attend on 8 streams at once
# (IhipCompactAttention::attend_blocks) instead of one after another.
#
# Steps, each under its own timeout (a step is skipped when it would run past BUDGET seconds);
# logs and JSON in $OUT/logs, packed into $OUT/all-logs.tgz after every step (few files come back
# from $OUT); one line per step in $OUT/summary.txt:
#   method    test_ihip_gpu_method (new: CompactBlocksOnLanesEqualBlockByBlock, lanes == serial bits)
#   model_*   `longctx bench model --device cuda --random-weights gemma3-270m --lengths 32k --decode 16
#             --repeats 2 --attn dense / infinitehip`, the base commit's binary (old_*) and this
#             branch's (new_*), interleaved
#   gpu       test_gpu: rope=on GPU model vs the CPU (GpuPreRopeWindow.InfiniteHipRopeOnMatchesCpu on
#             gemma3-270m:6, GpuInfiniteHip.RopeOn*, SmolLM2HeadsRopeOn*, PrefillMatchesTheCpuMethod)
#   stages    longctx_bench_infinitehip --prefill-shape 4,1,256, pruning RoPE relative then none,
#             a 32K chunk from position 0 and after 32K: score / select per stage, the index, and
#             rope=on's block attention serial vs 8 lanes
#   memcheck  compute-sanitizer memcheck on CompactBlocksOnLanesEqualBlockByBlock
#   prefill   test_ihip_gpu --gtest_filter='IhipGpuPrefill*' (the prefill pruning kernels, unchanged)
# Build here, then pack (OLD: the base commit's longctx, built from it):
#   cmake --build build-gpu -j2 --target longctx test_gpu test_ihip_gpu test_ihip_gpu_method longctx_bench_infinitehip
#   OLD=/tmp/ihipr-old/longctx bash scripts/gpu-ihip-ropeon.sh --pack build-gpu /work/main/.carry/ihip-ropeon
# Run on the device: OUT=$OUT GIT_COMMIT=<commit> bash .carry/ihip-ropeon/gpu-ihip-ropeon.sh
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/gpu-ihip-ropeon-pack
  source "$(dirname "$0")/gpu-carry.sh"
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/lib"
  for f in tests/gpu/test_gpu tests/cuda/test_ihip_gpu tests/cuda/test_ihip_gpu_method src/cli/longctx \
           bench/longctx_bench_infinitehip; do
    cp "$build/$f" "$tmp/" && strip "$tmp/$(basename "$f")"
  done
  cp "${OLD:?OLD=the base commit\'s longctx}" "$tmp/longctx_old" && strip "$tmp/longctx_old"
  carry_libs "$tmp/lib" "$tmp"/test_gpu "$tmp"/longctx "$tmp"/longctx_old "$tmp"/test_ihip_gpu_method \
    "$tmp"/test_ihip_gpu "$tmp"/longctx_bench_infinitehip
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  cp "$0" "$carry/gpu-ihip-ropeon.sh" && cp "$(dirname "$0")/gpu-carry.sh" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${BIN:-.carry/ihip-ropeon}
BUDGET=${BUDGET:-228}  # seconds: the call's limit (240) less the unpacking
B=/tmp/ihip-ropeon-bin
L=$OUT/logs
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # step, step_session
step_session "$CARRY/bin.tar.xz" "$B" "$L" "$BUDGET"
T0=$STEP_T0
gtest_summary() { grep -E "Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED)|tests ran|random seed" "$L/$1.log" | head -30; }
model() {  # model NAME BINARY ATTN
  step "$1" 30 "$B/$2" bench model --device cuda --random-weights gemma3-270m --lengths 32k --decode 16 --repeats 2 \
    --attn "$3" --json "$L/$1.json"
  tail -3 "$L/$1.log"
}

step method 40 "$B/test_ihip_gpu_method"; gtest_summary method
model old_dense longctx_old dense
model old_infinitehip longctx_old infinitehip
model new_infinitehip longctx infinitehip
model new_dense longctx dense
step gpu 45 "$B/test_gpu" --gtest_filter='GpuPreRopeWindow.InfiniteHipRopeOnMatchesCpu:GpuInfiniteHip.RopeOn*:GpuInfiniteHip.SmolLM2HeadsRopeOn*:GpuInfiniteHip.PrefillMatchesTheCpuMethod'
gtest_summary gpu
step stages 35 "$B/longctx_bench_infinitehip" --lens '' --prefill-shape 4,1,256 --prefill-rope relative \
  --prefix 0,32768 --chunk 32768 --json "$L/stages_relative.json"
grep "prefill" "$L/stages.log"
step memcheck 30 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu_method" \
  --gtest_filter='IhipGpuMethod.CompactBlocksOnLanesEqualBlockByBlock'
tail -4 "$L/memcheck.log"
step prefill 25 "$B/test_ihip_gpu" --gtest_filter='IhipGpuPrefill*'; gtest_summary prefill
step stages_none 20 "$B/longctx_bench_infinitehip" --lens '' --prefill-shape 4,1,256 --prefill-rope none \
  --prefix 0 --chunk 32768 --json "$L/stages_none.json"
grep "prefill" "$L/stages_none.log"
tar -C "$OUT" -czf "$OUT/all-logs.tgz" logs
echo "total $(( $(date +%s) - T0 ))s"
exit $status
