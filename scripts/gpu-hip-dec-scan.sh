#!/usr/bin/env bash
# gpu-hip-dec-scan.sh: one device call for branch hip-dec-scan (issue 14): HiP's decode selection
# with warp 0 scanning the radix histogram and broadcasting it (keep_best, kCta == kThreads),
# against main, whose 16 decode warps each scan it (the suspected cost of main's decode estimate
# being 4% slower than before commit 83abdcc). Prefill's selection is the same code in both.
# Steps: the branch's test_hip_gpu (all) and test_hip_gpu_method, memcheck on the decode and
# prefill estimate cases, three interleaved decode rounds (main, branch) at 128K and 1M, one
# prefill estimate round each at 128K (unchanged expected).
# Pack (here, in the branch's worktree after building longctx_bench_hip test_hip_gpu
# test_hip_gpu_method; MAIN_BENCH: main's bench/longctx_bench_hip):
#   bash scripts/gpu-hip-dec-scan.sh --pack build MAIN_BENCH .carry/hip-dec-scan
# Run (device): run(command="OUT=$OUT GIT_COMMIT=<sha> bash .carry/hip-dec-scan/gpu-hip-dec-scan.sh",
#                   carry=[".carry/hip-dec-scan"], timeout_s=420)
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  set -e
  build=$2 main_bench=$3 c=$4 tmp=/tmp/hip-dec-scan-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c" "$tmp"
  cp "$build/bench/longctx_bench_hip" "$build/tests/cuda/test_hip_gpu" "$build/tests/cuda/test_hip_gpu_method" "$tmp/"
  pack_ab "$tmp" "$c" "$main_bench" "$0"
  exit 0
fi
out_archive hip-dec-scan results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/hip-dec-scan-bin "$OUT/logs" "${BUDGET:-300}"
B=/tmp/hip-dec-scan-bin L=$OUT/logs
step test_hip_gpu 60 $B/test_hip_gpu
step test_hip_gpu_method 30 $B/test_hip_gpu_method
step memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu \
  --gtest_filter='HipEstimate.Decode*:HipEstimate.PrefillBlockIds*:HipEstimate.PrefillOverAnFp8*'
for round in 1 2 3; do
  for v in main branch; do
    b=$B/longctx_bench_hip_main; [ $v = branch ] && b=$B/longctx_bench_hip
    step d${round}_$v 20 $b --lens 131072,1048576 --prefill "" --dense-max 0 --json $L/d${round}_$v.json
  done
done
for v in main branch; do
  b=$B/longctx_bench_hip_main; [ $v = branch ] && b=$B/longctx_bench_hip
  step p_$v 40 $b --lens "" --prefill 131072 --dense-max 0 --estimate-only --json $L/p_$v.json
done
exit $status
