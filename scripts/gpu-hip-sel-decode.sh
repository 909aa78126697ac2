#!/usr/bin/env bash
# gpu-hip-sel-decode.sh: the second device call for the selection (issue 14): the first
# (gpu-hip-sel.sh) measured decode's estimate 6% slower with the new keep_best (the 512-thread
# decode CTAs spilled more around it). Variants of the decode path as bench / test binaries
# longctx_bench_hip_<v> and test_hip_gpu_<v> (bench-only macros of hip_estimate.cu at the time):
#   noinl   keep_best behind a __noinline__ call in decode (its registers apart from the scorer's)
#   norange decode's passes from the top bits (no least/greatest-key step: one barrier less)
#   both    the two
# beside main's (longctx_bench_hip_main) and the branch head's (longctx_bench_hip): their decode
# tests and memcheck on them, three interleaved rounds of decode at 128K / 1M, one prefill round.
# Pack (here): bash scripts/gpu-hip-sel-decode.sh --pack BUILD VAR_DIR MAIN_BENCH C
# Run (device): OUT=$OUT GIT_COMMIT=<sha> bash .carry/hip-sel2/gpu-hip-sel-decode.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  set -e
  build=$2 var=$3 main_bench=$4 c=$5 tmp=/tmp/hip-sel2-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c" "$tmp"
  cp "$build/bench/longctx_bench_hip" "$var"/longctx_bench_hip_* "$var"/test_hip_gpu_* "$tmp/"
  pack_ab "$tmp" "$c" "$main_bench" "$0"
  exit 0
fi
out_archive hip-sel2 results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/hip-sel2-bin "$OUT/logs" "${BUDGET:-300}"
B=/tmp/hip-sel2-bin L=$OUT/logs
dec='HipEstimate.Decode*:HipEstimate.HeadDim256Decode*'
for v in noinl norange both; do
  step test_$v 40 $B/test_hip_gpu_$v --gtest_filter="$dec"
  step memcheck_$v 40 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu_$v \
    --gtest_filter='HipEstimate.DecodeRefresh*:HipEstimate.DecodeOverAnFp8*'
done
for round in 1 2 3; do
  for v in main head noinl norange both; do
    b=$B/longctx_bench_hip_$v; [ $v = head ] && b=$B/longctx_bench_hip
    step d${round}_$v 20 $b --lens 131072,1048576 --prefill "" --dense-max 0 --json $L/d${round}_$v.json
  done
done
for v in main head both; do
  b=$B/longctx_bench_hip_$v; [ $v = head ] && b=$B/longctx_bench_hip
  step p_$v 30 $b --lens "" --prefill 131072 --dense-max 0 --estimate-only --json $L/p_$v.json
done
exit $status
