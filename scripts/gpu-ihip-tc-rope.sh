#!/usr/bin/env bash
# gpu-ihip-tc-rope.sh: the device-machine run of InfiniteHiP's rope=on prefill pruning on tensor
# cores (issues 15 and 19): the RoPE modes' chunk scores from bf16 mma over rotated, bf16-rounded
# queries and probe keys instead of the fp32 FMA scorer.
#
# Steps, each under its own timeout (a step is skipped when it would run past BUDGET seconds);
# logs and JSON in $OUT/logs, packed into $OUT/all-logs.tgz after every step (few files come back
# from $OUT); one line per step in $OUT/summary.txt:
#   tests     test_ihip_gpu, each IhipGpuPrefill test in its own process at once (their fp64 CPU
#             oracles are single-threaded; the machine has 16 cores), plus compute-sanitizer
#             memcheck on the new TensorCoreRope* cases
#   st_*      longctx_bench_infinitehip --prefill-rope relative, 32K chunk after a 32K prefix, main's
#             binary (old_*: the FMA scorer) and this branch's (new_*: tensor cores), at gemma-3's
#             4,1,256 (also after prefix 0) and Llama-3-8B's 32,8,128
#   model_*   `longctx bench model --device cuda --random-weights gemma3-270m --lengths 32k --decode 4
#             --repeats 2 --attn dense / infinitehip`, main's binary (old_*) and this branch's (new_*)
# Build here, then pack (OLD: a folder with main's longctx and longctx_bench_infinitehip):
#   cmake --build build-gpu -j2 --target longctx test_ihip_gpu longctx_bench_infinitehip
#   OLD=/tmp/ihiptc-old bash scripts/gpu-ihip-tc-rope.sh --pack build-gpu /work/main/.carry/ihip-tc-rope
# Run on the device: OUT=$OUT GIT_COMMIT=<commit> bash .carry/ihip-tc-rope/gpu-ihip-tc-rope.sh
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/gpu-ihip-tc-rope-pack
  source "$(dirname "$0")/gpu-carry.sh"
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/lib"
  for f in tests/cuda/test_ihip_gpu src/cli/longctx bench/longctx_bench_infinitehip; do
    cp "$build/$f" "$tmp/" && strip "$tmp/$(basename "$f")"
  done
  cp "${OLD:?OLD=a folder with main\'s binaries}/longctx" "$tmp/longctx_old" && strip "$tmp/longctx_old"
  cp "$OLD/longctx_bench_infinitehip" "$tmp/bench_old" && strip "$tmp/bench_old"
  carry_libs "$tmp/lib" "$tmp"/longctx "$tmp"/longctx_old "$tmp"/test_ihip_gpu "$tmp"/longctx_bench_infinitehip \
    "$tmp"/bench_old
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  cp "$0" "$carry/gpu-ihip-tc-rope.sh" && cp "$(dirname "$0")/gpu-carry.sh" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${BIN:-.carry/ihip-tc-rope}
BUDGET=${BUDGET:-170}  # seconds: the call's limit (180) less a margin
B=/tmp/ihip-tc-rope-bin
L=$OUT/logs
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # step, step_session
step_session "$CARRY/bin.tar.xz" "$B" "$L" "$BUDGET"
T0=$STEP_T0
# The tests: one process per IhipGpuPrefill test and the memcheck, all at once; rc = failures.
run_tests() {
  local pids=() names=() t fails=0 i
  for t in $("$B/test_ihip_gpu" --gtest_list_tests --gtest_filter='IhipGpuPrefill.*' | awk '/^ /{print $1}'); do
    timeout 55 "$B/test_ihip_gpu" --gtest_filter="IhipGpuPrefill.$t" > "$L/t_$t.log" 2>&1 & pids+=($!); names+=("$t")
  done
  timeout 55 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu" \
    --gtest_filter='IhipGpuPrefill.TensorCoreRope*' > "$L/t_memcheck.log" 2>&1 & pids+=($!); names+=(memcheck)
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"; local rc=$?
    echo "${names[$i]} rc=$rc $(grep -hE '^\[  (PASSED|FAILED)|ERROR SUMMARY|ihip mma' "$L/t_${names[$i]}.log" | tr '\n' ' ')"
    [ $rc = 0 ] || fails=$((fails + 1))
  done
  return $fails
}
stages() {  # stages NAME BINARY SHAPE PREFIXES
  step "$1" 30 "$B/$2" --lens '' --prefill-shape "$3" --prefill-rope relative --prefix "$4" --chunk 32768 \
    --json "$L/$1.json"
  grep "prefill" "$L/$1.log"
}
model() {  # model NAME BINARY ATTN
  step "$1" 25 "$B/$2" bench model --device cuda --random-weights gemma3-270m --lengths 32k --decode 4 --repeats 2 \
    --attn "$3" --json "$L/$1.json"
  tail -3 "$L/$1.log"
}

step tests 60 bash -c "$(declare -f run_tests); B=$B L=$L; run_tests"; cat "$L/tests.log"
stages st_old_4_1_256 bench_old 4,1,256 0,32768
stages st_new_4_1_256 longctx_bench_infinitehip 4,1,256 0,32768
stages st_old_32_8_128 bench_old 32,8,128 32768
stages st_new_32_8_128 longctx_bench_infinitehip 32,8,128 32768
model model_old_infinitehip longctx_old infinitehip
model model_new_infinitehip longctx infinitehip
model model_new_dense longctx dense
model model_old_dense longctx_old dense
tar -C "$OUT" -czf "$OUT/all-logs.tgz" logs
echo "total $(( $(date +%s) - T0 ))s"
exit $status
