#!/usr/bin/env bash
# gpu-merged-check.sh: a merged tree's device check in one call: HiP prefill (random and
# structured Q/K) and InfiniteHiP's 32K chunk after the prefix beside torch cuDNN in the same call,
# then every GPU test binary (gpu-suite.sh). The numbers of docs/benchmarks.md "The merged tree
# after session 12" come from it (that call ran the suite under a 330 s limit and the binaries it
# left out in a second call: SUITE_TESTS names them).
#
# Here (no GPU): ninja -C build, then
#   bash scripts/gpu-merged-check.sh --pack build .carry/final      (~47 MB: tests + two benches)
# On the device (timeout_s 600):
#   OUT=$OUT bash .carry/final/gpu-merged-check.sh
# Everything lands in $OUT/final.tgz, the step summary and the suite's summary beside it.
# A short call: FOCUS_FILE=F at --pack and FOCUS=focus.txt there run F's cases instead of the whole
# suite (see below), TORCH_PREFILL=131072 leaves out cuDNN's 1M prefill (~20 s a run), HIP_STRUCTURED=0 the structured
# HiP run, IHIP_PREFIX=1048576 InfiniteHiP's 128K prefix.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 st=$(mktemp -d)
  bash "$HERE/gpu-suite.sh" --pack "$build" "$carry" || exit 2
  cp "$build/bench/longctx_bench_hip" "$build/bench/longctx_bench_infinitehip" "$st/" && strip "$st"/longctx_bench_*
  tar -C "$st" -cJf "$carry/bench.tar.xz" . && rm -rf "$st"
  cp "$0" "$HERE/gpu-carry.sh" "$HERE/../bench/torch_baseline.py" "$carry/"
  [ -n "${FOCUS_FILE:-}" ] && cp "$FOCUS_FILE" "$carry/focus.txt"
  du -sh "$carry"
  exit 0
fi
. "$HERE/gpu-carry.sh"  # step, step_session
W=/tmp/merged-check
rm -rf "$W" && mkdir -p "$W"
OUT_FINAL=${OUT:-out}
OUT=$W  # step_session's archive and the logs live here; final.tgz goes to OUT_FINAL
step_session "$HERE/bench.tar.xz" "$W/b" "$W/logs" "${BUDGET:-580}"
L=$W/logs B=$W/b
step hip 60 "$B/longctx_bench_hip" --lens "" --dense-max 0 --prefill 131072,1048576 --json "$L/hip.json"
[ "${HIP_STRUCTURED:-1}" = 1 ] &&
  step hip_structured 50 "$B/longctx_bench_hip" --lens "" --dense-max 0 --prefill 131072,1048576 --structured-qk \
    --json "$L/hip_structured.json"
step ihip 60 "$B/longctx_bench_infinitehip" --lens "" --prefix "${IHIP_PREFIX:-131072,1048576}" --chunk 32768 \
  --json "$L/ihip.json"
step torch 120 python3 "$HERE/torch_baseline.py" --prefill "${TORCH_PREFILL:-131072,1048576}" --decode "" \
  --backends cudnn --chunk 32768 --chunk-lens 163840,1081344 --json "$L/torch.json"
if [ -n "${FOCUS:-}" ]; then
  # FOCUS=FILE (in the carry folder): instead of the whole suite, the cases a merge touched, one a
  # line: `NAME LIMIT_S BINARY GTEST_FILTER [memcheck]` (memcheck: under compute-sanitizer).
  FB=/tmp/merged-check-tests
  mkdir -p "$FB" && tar -xJf "$HERE/bin.tar.xz" -C "$FB"
  export LD_LIBRARY_PATH="$FB/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  while read -r name limit bin filter tool; do
    [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
    if [ "${tool:-}" = memcheck ]; then
      step "$name" "$limit" compute-sanitizer --tool memcheck --error-exitcode 99 "$FB/$bin" --gtest_filter="$filter"
    else
      step "$name" "$limit" "$FB/$bin" --gtest_filter="$filter"
    fi
    grep -hE "^\[  (PASSED|FAILED|SKIPPED) |ERROR SUMMARY" "$L/$name.log" | head -8 | tee -a "$W/summary.txt"
  done < "$HERE/$FOCUS"
else
  step suite "${SUITE_S:-330}" env OUT="$L/suite" BIN="$HERE" TEST_TIMEOUT=200 TESTS="${SUITE_TESTS:-}" \
    MEMCHECK="test_hip_gpu test_kv_offload" bash "$HERE/gpu-suite.sh"
  cat "$L/suite.log"
fi
mkdir -p "$OUT_FINAL"
tar -C "$W" --exclude b -czf "$OUT_FINAL/final.tgz" . && cp "$W/summary.txt" "$OUT_FINAL/"
[ -f "$L/suite.log" ] && cp "$L/suite.log" "$OUT_FINAL/"
exit $status
