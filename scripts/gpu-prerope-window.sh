#!/usr/bin/env bash
# gpu-prerope-window.sh: the device-machine run of the pre-RoPE methods (TokenSelect, InfiniteHiP
# rope=on) on Gemma 3's geometry, sliding-window layers included (issues 19 and 15).
#
# Steps (STEPS, space-separated; default all), each under its own timeout; logs and JSON in
# $OUT/logs, packed into $OUT/all-logs.tgz after every step (few files come back from $OUT);
# one line per step in $OUT/summary.txt:
#   tests    test_gpu GpuPreRopeWindow* (gemma3-270m:6 random weights: GPU == CPU for dense,
#            tokenselect, infinitehip rope=on; graph == eager; fp8 cache; refusals)
#   bench    `longctx bench model --device cuda --random-weights gemma3-270m --lengths 4k,32k
#            --decode 64 --repeats 2` for $ATTNS (dense first: the baseline in the same call), and
#            the CLI's refusal of --kv-offload with tokenselect (a `longctx:` line, exit 1)
#   regress  test_gpu GpuTokenSelect*, GpuInfiniteHip.RopeOn*, GpuMInferenceD256* (models without
#            windows, and the window model under a rotated-key method: unchanged paths)
# Build here (no GPU needed), then pack into the lead's checkout's carry folder:
#   cmake --build build-gpu -j2 --target test_gpu longctx
#   bash scripts/gpu-prerope-window.sh --pack build-gpu /work/main/.carry/swa-prerope
# Run on the device: OUT=$OUT BIN=.carry/swa-prerope bash .carry/swa-prerope/gpu-prerope-window.sh
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/gpu-prerope-window-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/lib"
  for f in tests/gpu/test_gpu src/cli/longctx; do
    cp "$build/$f" "$tmp/" && strip "$tmp/$(basename "$f")"
  done
  carry_libs "$tmp/lib" "$tmp"/test_gpu "$tmp"/longctx
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${BIN:-.carry/swa-prerope}
STEPS=${STEPS:-tests bench regress}
ATTNS=${ATTNS:-dense tokenselect infinitehip}
B=/tmp/prerope-window-bin
L=$OUT/logs
mkdir -p "$L" "$B"
unpack_bin "$CARRY/bin.tar.xz" "$B"
record_env "$L/env.txt" "${GIT_COMMIT:-unknown}"
status=0
# step (gpu-carry.sh): logs in $L, summary.txt in $OUT; all-logs.tgz refreshed after each step.
STEP_DIR=$L
step_show() { tar -C "$OUT" -czf "$OUT/all-logs.tgz" logs; }
gtest_summary() { grep -E "Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED)|tests ran|^\[ prerope|^\[ gpu" "$L/$1.log" | head -40; }

for s in $STEPS; do
  case $s in
    tests)
      step tests ${TESTS_TIMEOUT:-85} "$B/test_gpu" --gtest_filter='GpuPreRopeWindow*'; gtest_summary tests ;;
    bench)
      for attn in $ATTNS; do
        name=gemma_$(echo "$attn" | tr -c 'a-z0-9' '_')
        step "$name" ${BENCH_TIMEOUT:-30} "$B/longctx" bench model --device cuda --random-weights gemma3-270m \
          --lengths 4k,32k --decode 64 --repeats 2 --attn "$attn" --json "$L/$name.json"
        tail -4 "$L/$name.log"
      done
      timeout 20 "$B/longctx" bench model --device cuda --random-weights gemma3-270m --lengths 4k --decode 4 \
        --attn tokenselect --kv-offload > "$L/cli_offload.log" 2>&1
      echo "== cli_offload rc=$? (expected 1 with a longctx: line)" | tee -a "$OUT/summary.txt"
      cat "$L/cli_offload.log" ;;
    regress)
      step regress ${REGRESS_TIMEOUT:-60} "$B/test_gpu" \
        --gtest_filter='GpuTokenSelect*:GpuInfiniteHip.RopeOn*:GpuMInferenceD256*'
      gtest_summary regress ;;
  esac
done
tar -C "$OUT" -czf "$OUT/all-logs.tgz" logs
exit $status
