#!/usr/bin/env bash
# gpu-infinitehip-engine.sh: the device-machine run of InfiniteHiP's sparse decode in the GPU engine
# (issue 15): the per-stage decode caches refreshed on the device, one CUDA graph per decode step.
#
# Steps (STEPS, space-separated; default all), each under its own timeout, logs in $OUT:
#   tests    test_ihip_gpu_method (the GpuMethod's decode index = the CPU method's key sets at every
#            step type, the step-type counts; prefill key sets; refusals), test_gpu GpuInfiniteHip*
#            (GPU model vs CPU model logits, sparse decode, rope=off and rope=on; graph == eager bit
#            for bit), the batch
#            test that a per-sequence-state method runs one sequence at a time, and test_ihip_gpu
#            (the pruning kernels, unchanged: a regression check)
#   memcheck compute-sanitizer memcheck on the decode-index test and on the GPU model's rope=on
#            graph test (prefill blocks, decode steps, graph replay)
#   engine   `longctx bench model --device cuda --random-weights llama3-8b --decode 64 --gpu-chunk 32768`
#            at $LENGTHS (default 128k) for each of $ATTNS, one process each, dense first (the
#            baseline in the same call)
#   long     the same at $LONG_LENGTH (default 256k) for $LONG_ATTNS (dense and the decode-only spec,
#            whose prefill is dense: the decode rows compare at equal prefill cost)
# Build here (no GPU needed), then pack into the lead's checkout's carry folder:
#   ninja -C build-gpu -j2 test_ihip_gpu_method test_ihip_gpu test_gpu longctx
#   bash scripts/gpu-infinitehip-engine.sh --pack build-gpu /work/main/.carry/ihip-engine
# Run on the device: OUT=$OUT BIN=.carry/ihip-engine bash .carry/ihip-engine/gpu-infinitehip-engine.sh
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/gpu-ihip-engine-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/lib"
  for f in tests/cuda/test_ihip_gpu_method tests/cuda/test_ihip_gpu tests/gpu/test_gpu src/cli/longctx; do
    cp "$build/$f" "$tmp/" && strip "$tmp/$(basename "$f")"
  done
  carry_libs "$tmp/lib" "$tmp"/test_ihip_gpu_method "$tmp"/test_gpu "$tmp"/longctx
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${BIN:-.carry/ihip-engine}
STEPS=${STEPS:-tests engine memcheck long}
LONG_LENGTH=${LONG_LENGTH:-256k}
LONG_ATTNS=${LONG_ATTNS:-dense decode:infinitehip=rope=off}
LENGTHS=${LENGTHS:-128k}
ATTNS=${ATTNS:-dense decode:infinitehip=rope=off infinitehip=rope=off}
B=/tmp/ihip-engine-bin
mkdir -p "$OUT" "$B"
unpack_bin "$CARRY/bin.tar.xz" "$B"
record_env "$OUT/env.txt" "${GIT_COMMIT:-unknown}"
status=0
# step (gpu-carry.sh): output in $OUT/NAME.log, one summary line.
gtest_summary() { grep -E "Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED)|tests ran|^\[ (gpu|ihip)" "$OUT/$1.log" | head -30; }

for s in $STEPS; do
  case $s in
    tests)
      step test_ihip_gpu_method 60 "$B/test_ihip_gpu_method"; gtest_summary test_ihip_gpu_method
      step test_gpu_ihip 120 "$B/test_gpu" --gtest_filter='GpuInfiniteHip*'; gtest_summary test_gpu_ihip
      step test_gpu_hooks 60 "$B/test_gpu" --gtest_filter='GpuBatchEngine.PerSequenceState*'; gtest_summary test_gpu_hooks
      step test_ihip_gpu 60 "$B/test_ihip_gpu"; gtest_summary test_ihip_gpu ;;
    memcheck)
      step memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu_method" \
        --gtest_filter='IhipGpuMethod.Decode*'
      tail -3 "$OUT/memcheck.log"
      step memcheck_rope 120 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_gpu" \
        --gtest_filter='GpuInfiniteHip.RopeOnGraph*'
      tail -3 "$OUT/memcheck_rope.log" ;;
    engine|long)
      lens=$LENGTHS attns=$ATTNS
      [ $s = long ] && lens=$LONG_LENGTH attns=$LONG_ATTNS
      for len in ${lens//,/ }; do
        for attn in $attns; do
          name=e2e_${len}_$(echo "$attn" | tr -c 'a-z0-9' '_')
          step "$name" ${BENCH_TIMEOUT:-75} "$B/longctx" bench model --device cuda --random-weights llama3-8b \
            --lengths "$len" --decode 64 --gpu-chunk 32768 --attn "$attn" --json "$OUT/$name.json"
          tail -4 "$OUT/$name.log"
        done
      done ;;
  esac
done
exit $status
