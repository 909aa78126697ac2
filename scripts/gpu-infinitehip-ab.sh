#!/usr/bin/env bash
# gpu-infinitehip-ab.sh: one device call for a change to InfiniteHiP's GPU pruning kernels: the
# tests, memcheck of the changed kernels, and the decode benchmark of the previous build and the
# new one side by side (interleaved base / new, twice while time allows), with torch SDPA cuDNN
# decode on the same shapes.
#
# Steps (in order; each under a timeout, logs in $OUT, one archive $OUT/results.tar.gz):
#   tests     test_ihip_gpu (every case), test_ihip_gpu_method
#   bench     longctx_bench_infinitehip decode at 128K and 1M: base, then new
#   torch     bench/torch_baseline.py --decode 131072,1048576 (cuDNN, flash)
#   memcheck  compute-sanitizer memcheck on MEMCHECK_FILTER's test_ihip_gpu cases
#   bench     a second base / new pair when the call is under AB_SECONDS so far
# Build here (no GPU needed) the new binaries in build-gpu, the base bench from the previous commit,
# then pack:
#   scripts/gpu-infinitehip-ab.sh --pack build-gpu BASE_BENCH_BINARY /work/main/.carry/ihip-gpu
# Run there: OUT=$OUT bash .carry/ihip-gpu/gpu-infinitehip-ab.sh
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 base=$3 carry=$4 tmp=/tmp/gpu-ihip-ab-pack
  source "$(dirname "$0")/gpu-carry.sh"
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/lib"
  for f in tests/cuda/test_ihip_gpu tests/cuda/test_ihip_gpu_method bench/longctx_bench_infinitehip; do
    cp "$build/$f" "$tmp/" && strip "$tmp/$(basename "$f")"
  done
  cp "$base" "$tmp/longctx_bench_infinitehip.base" && strip "$tmp/longctx_bench_infinitehip.base"
  carry_libs "$tmp/lib" "$tmp/test_ihip_gpu_method"
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  cp "$0" "$carry/gpu-infinitehip-ab.sh"
  cp "$(dirname "$0")/../bench/torch_baseline.py" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${BIN:-.carry/ihip-gpu}
AB_SECONDS=${AB_SECONDS:-150}  # the second pair needs <= 80 s of a 240 s call
MEMCHECK_FILTER=${MEMCHECK_FILTER:-IhipGpu.TiesKeepTheEarliestChunks:IhipGpu.HeadDim256*:IhipGpuPrefill.HeadDim256*}
B=/tmp/ihip-ab-bin
T0=$(date +%s)
mkdir -p "$OUT" "$B"
tar -C "$B" -xJf "$CARRY/bin.tar.xz"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
status=0
step() {  # step NAME LIMIT_S CMD...: output in $OUT/NAME.log, one summary line
  local name=$1 limit=$2 t0=$(date +%s); shift 2
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - t0 ))s (at $(( $(date +%s) - T0 ))s)" | tee -a "$OUT/summary.txt"
  [ $rc = 0 ] || status=1
  return $rc
}
gtest_summary() { grep -E "Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED)|^\[       OK|tests ran" "$OUT/$1.log" | head -40; }

step test_ihip_gpu 75 "$B/test_ihip_gpu"; gtest_summary test_ihip_gpu
step test_ihip_gpu_method 30 "$B/test_ihip_gpu_method"; gtest_summary test_ihip_gpu_method
ab_pair() {  # ab_pair REP: the base build's decode benchmark, then the new one's
  step "bench_base_$1" 40 "$B/longctx_bench_infinitehip.base" --json "$OUT/bench_base_$1.json"
  grep "^decode" "$OUT/bench_base_$1.log"
  step "bench_new_$1" 40 "$B/longctx_bench_infinitehip" --json "$OUT/bench_new_$1.json"
  grep "^decode" "$OUT/bench_new_$1.log"
}
ab_pair 1
step torch_decode 40 python3 "$CARRY/torch_baseline.py" --prefill "" --decode 131072,1048576 --json "$OUT/torch_decode.json"
grep "^decode" "$OUT/torch_decode.log"
step memcheck 40 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu" --gtest_filter="$MEMCHECK_FILTER"
tail -3 "$OUT/memcheck.log"
[ $(( $(date +%s) - T0 )) -lt "$AB_SECONDS" ] && ab_pair 2
tar -C "$OUT" -czf /tmp/ihip-ab-results.tar.gz . && find "$OUT" -type f ! -name summary.txt -delete && mv /tmp/ihip-ab-results.tar.gz "$OUT/"
exit $status
