#!/usr/bin/env bash
# gpu-ihip-ropefp8.sh: the device-machine run of InfiniteHiP rope=on decode on the fp8 KV cache and
# rope=on prefill's block attention forked / joined with events (issue 15).
#
# Steps, each under its own timeout (a step is skipped when it would run past BUDGET seconds);
# logs and JSON in $OUT/logs, packed into $OUT/all-logs.tgz after every step (few files come back
# from $OUT); one line per step in $OUT/summary.txt:
#   method     test_ihip_gpu_method (new: CompactDecodeReadsTheFp8Cache; CompactBlocksOnLanesEqual-
#              BlockByBlock: the event fork / join still writes block-by-block's bits)
#   fp8stages  test_ihip_gpu --gtest_filter='IhipGpu.*' (the decode stages, Fp8Keys* in every RoPE mode)
#   gpu        test_gpu: the fp8-cache and rope=on model tests (GpuInfiniteHip.*Fp8*, RopeOn*,
#              SmolLM2HeadsRopeOn*, GpuPreRopeWindow.InfiniteHip*, TokenSelectFp8*, Refusals*)
#   decode     longctx_bench_infinitehip --lens 131072,1048576 --kv bf16,fp8 (rope=off steps and
#              rope=on's, each cache)
#   model_*    `longctx bench model --device cuda --random-weights gemma3-270m --lengths 32k --decode 16
#              --repeats 2 --attn infinitehip`: the base commit's binary (old_*) and this branch's
#              (new_*), interleaved; new_fp8: this branch with --kv-cache fp8 (refused before)
#   memcheck_* compute-sanitizer memcheck on the fp8 compact decode test, then (budget left) on the
#              lanes test
# Build here, then pack (OLD: the base commit's longctx):
#   cmake --build build-gpu -j2 --target longctx test_gpu test_ihip_gpu test_ihip_gpu_method longctx_bench_infinitehip
#   OLD=/tmp/ihrf-old/longctx bash scripts/gpu-ihip-ropefp8.sh --pack build-gpu /work/main/.carry/ihip-ropefp8
# Run on the device: OUT=$OUT GIT_COMMIT=<commit> bash .carry/ihip-ropefp8/gpu-ihip-ropefp8.sh
# STEPS=ab: the follow-up: the fp8-cache model tests (rope=on's bars set after the first call), then
# the gemma3-270m 32K prefill A/B, base vs branch binary, 5 interleaved pairs of --repeats 3
# (~40 s; the first call's two pairs measured the branch slower, see docs/benchmarks.md).
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/gpu-ihip-ropefp8-pack
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
  cp "$0" "$carry/gpu-ihip-ropefp8.sh" && cp "$(dirname "$0")/gpu-carry.sh" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${BIN:-.carry/ihip-ropefp8}
BUDGET=${BUDGET:-225}  # seconds: the call's limit (240) less the unpacking
B=/tmp/ihip-ropefp8-bin
L=$OUT/logs
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # step, step_session
step_session "$CARRY/bin.tar.xz" "$B" "$L" "$BUDGET"
T0=$STEP_T0
gtest_summary() { grep -E "Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED)|tests ran|random seed|\] " "$L/$1.log" | head -40; }
model() {  # model NAME BINARY [ARGS...]   (REPEATS: --repeats, default 2)
  local name=$1 bin=$2
  shift 2
  step "$name" 25 "$B/$bin" bench model --device cuda --random-weights gemma3-270m --lengths 32k --decode 16 \
    --repeats "${REPEATS:-2}" --attn infinitehip --json "$L/$name.json" "$@"
  tail -3 "$L/$name.log"
}

if [ "${STEPS:-all}" = ab ]; then  # the follow-up: the relaxed rope=on fp8 test, then the prefill A/B
  step gpu_fp8 40 "$B/test_gpu" --gtest_filter='GpuInfiniteHip.*Fp8*:GpuPreRopeWindow.InfiniteHip*Fp8*'
  gtest_summary gpu_fp8
  for i in 1 2 3 4 5; do
    REPEATS=3 model "ab_old_$i" longctx_old
    REPEATS=3 model "ab_new_$i" longctx
  done
  for n in old new; do
    echo "$n prefill_s: $(for i in 1 2 3 4 5; do grep -o '"prefill_s": [0-9.]*' "$L/ab_${n}_$i.json" | cut -d' ' -f2; done | tr '\n' ' ')"
  done | tee "$L/ab.txt"
  tar -C "$OUT" -czf "$OUT/all-logs.tgz" logs
  exit $status
fi
step method 30 "$B/test_ihip_gpu_method"; gtest_summary method
step fp8stages 25 "$B/test_ihip_gpu" --gtest_filter='IhipGpu.*'; gtest_summary fp8stages
step gpu 60 "$B/test_gpu" --gtest_filter='GpuInfiniteHip.*Fp8*:GpuInfiniteHip.RopeOn*:GpuInfiniteHip.SmolLM2HeadsRopeOn*:GpuPreRopeWindow.InfiniteHip*:GpuPreRopeWindow.TokenSelectFp8*:GpuPreRopeWindow.Refusals*'
gtest_summary gpu
step decode 30 "$B/longctx_bench_infinitehip" --lens 131072,1048576 --kv bf16,fp8 --json "$L/decode.json"
grep "^decode" "$L/decode.log"
model old_1 longctx_old
model new_1 longctx
model new_fp8 longctx --kv-cache fp8
step memcheck_fp8 25 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu_method" \
  --gtest_filter='IhipGpuMethod.CompactDecodeReadsTheFp8Cache'
tail -4 "$L/memcheck_fp8.log"
model old_2 longctx_old
model new_2 longctx
step memcheck_blocks 30 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu_method" \
  --gtest_filter='IhipGpuMethod.CompactBlocksOnLanesEqualBlockByBlock'
tail -4 "$L/memcheck_blocks.log"
tar -C "$OUT" -czf "$OUT/all-logs.tgz" logs
echo "total $(( $(date +%s) - T0 ))s"
exit $status
