#!/usr/bin/env bash
# gpu-hip-sel-decode2.sh: a third device call for the selection (issue 14), prepared for the
# lead (the helper's two calls were spent): the branch's final build (test_hip_gpu all,
# test_hip_gpu_method, memcheck on prefill and decode cases; its PTX equals the 'both' variant
# measured by gpu-hip-sel-decode.sh) and one more decode variant, bcast: warp 0 alone scans the
# histogram and broadcasts through shared memory in decode (the old scheme; decode's 16 warps each
# scanning is the suspected cost of its 4% slower estimate), built from the carried
# decode-broadcast.patch with -DLONGCTX_HIP_SEL_DECODE_BROADCAST. Its decode tests and memcheck,
# three interleaved decode rounds beside main (longctx_bench_hip_main) and the final head, one
# prefill estimate round of main and head.
# Pack (here): bash scripts/gpu-hip-sel-decode2.sh --pack BUILD VAR_DIR MAIN_BENCH C
#   (VAR_DIR: longctx_bench_hip_bcast, test_hip_gpu_bcast, decode-broadcast.patch)
# Run (device): OUT=$OUT GIT_COMMIT=<sha> bash .carry/hip-sel3/gpu-hip-sel-decode2.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  set -e
  build=$2 var=$3 main_bench=$4 c=$5 tmp=/tmp/hip-sel3-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c" "$tmp"
  cp "$build/bench/longctx_bench_hip" "$build/tests/cuda/test_hip_gpu" "$build/tests/cuda/test_hip_gpu_method" \
    "$var/longctx_bench_hip_bcast" "$var/test_hip_gpu_bcast" "$tmp/"
  cp "$main_bench" "$tmp/longctx_bench_hip_main"
  strip "$tmp"/*
  carry_libs "$tmp/lib" "$build/tests/cuda/test_hip_gpu" "$build/bench/longctx_bench_hip"
  tar -C "$tmp" -cJf "$c/bins.tar.xz" .
  cp "$0" "$D/gpu-carry.sh" "$var/decode-broadcast.patch" "$c/"
  ls -la "$c"; du -sh "$c"; exit 0
fi
out_archive hip-sel3 results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/hip-sel3-bin "$OUT/logs" "${BUDGET:-200}"
B=/tmp/hip-sel3-bin L=$OUT/logs
step test_hip_gpu 60 $B/test_hip_gpu
step test_hip_gpu_method 30 $B/test_hip_gpu_method
step memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu \
  --gtest_filter='HipEstimate.PrefillBlockIds*:HipEstimate.PrefillCtaSizes*:HipEstimate.PrefillOverAnFp8*:HipEstimate.DecodeRefresh*:HipEstimate.DecodeOverAnFp8*'
step test_bcast 40 $B/test_hip_gpu_bcast --gtest_filter='HipEstimate.Decode*:HipEstimate.HeadDim256Decode*'
step memcheck_bcast 40 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu_bcast \
  --gtest_filter='HipEstimate.DecodeRefresh*:HipEstimate.DecodeOverAnFp8*'
for round in 1 2 3; do
  for v in main head bcast; do
    b=$B/longctx_bench_hip_$v; [ $v = head ] && b=$B/longctx_bench_hip
    step d${round}_$v 20 $b --lens 131072,1048576 --prefill "" --dense-max 0 --json $L/d${round}_$v.json
  done
done
for v in main head; do
  b=$B/longctx_bench_hip_$v; [ $v = head ] && b=$B/longctx_bench_hip
  step p_$v 40 $b --lens "" --prefill 131072,1048576 --dense-max 0 --estimate-only --json $L/p_$v.json
done
exit $status
