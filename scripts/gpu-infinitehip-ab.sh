#!/usr/bin/env bash
# gpu-infinitehip-ab.sh: one device call for a change to InfiniteHiP's GPU pruning kernels: the
# tests, memcheck of the changed kernels, and the decode benchmark of the previous build and the
# new one side by side (interleaved base / new / new with LONGCTX_NO_PDL=1, twice while time
# allows), optionally the GPU model's InfiniteHiP tests and torch SDPA cuDNN decode.
#
# Steps (in order; each under a timeout, logs in $OUT, one archive $OUT/results.tar.gz):
#   tests     test_ihip_gpu (every case), test_ihip_gpu_method; a failing binary runs again with
#             LONGCTX_NO_PDL=1 (the decode kernels launched plainly: tells a launch-order problem
#             from a kernel one)
#   bench     longctx_bench_infinitehip decode at 128K and 1M: base, new, new with LONGCTX_NO_PDL=1
#             (NEW_ARGS: extra arguments of the new build's runs, e.g. NEW_ARGS="--kv bf16,fp8")
#   model     test_gpu --gtest_filter='GpuInfiniteHip*' (when packed: GPU model vs CPU model)
#   torch     bench/torch_baseline.py --decode 131072,1048576 (cuDNN, flash; TORCH=1 only)
#   memcheck  compute-sanitizer memcheck on MEMCHECK_FILTER's test_ihip_gpu cases
#   bench     more base / new / new-no-PDL triples (up to REPS in all) while the call is under AB_SECONDS
# Build here (no GPU needed) the new binaries in build-gpu, the base bench from the previous commit,
# then pack (test_gpu is packed when build-gpu has it):
#   scripts/gpu-infinitehip-ab.sh --pack build-gpu BASE_BENCH_BINARY /work/main/.carry/<branch>
# Run there: BIN=.carry/<branch> OUT=$OUT bash .carry/<branch>/gpu-infinitehip-ab.sh
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
if [ "${1:-}" = "--pack" ]; then
  build=$2 base=$3 carry=$4 tmp=/tmp/gpu-ihip-ab-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/lib"
  for f in tests/cuda/test_ihip_gpu tests/cuda/test_ihip_gpu_method bench/longctx_bench_infinitehip \
           tests/gpu/test_gpu; do
    [ -f "$build/$f" ] || { [ "$f" = tests/gpu/test_gpu ] && continue; }
    cp "$build/$f" "$tmp/" && strip "$tmp/$(basename "$f")"
  done
  cp "$base" "$tmp/longctx_bench_infinitehip.base" && strip "$tmp/longctx_bench_infinitehip.base"
  carry_libs "$tmp/lib" "$tmp/test_ihip_gpu_method" $(ls "$tmp/test_gpu" 2>/dev/null)
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$carry/"
  cp "$(dirname "$0")/../bench/torch_baseline.py" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${BIN:-.carry/ihip-gpu}
AB_SECONDS=${AB_SECONDS:-140}  # the second triple needs <= 40 s of a 200 s call
TORCH=${TORCH:-0}
NEW_ARGS=${NEW_ARGS:-}
REPS=${REPS:-2}
MEMCHECK_LIMIT=${MEMCHECK_LIMIT:-40}
TEST_LIMIT=${TEST_LIMIT:-75}    # test_ihip_gpu
MODEL_LIMIT=${MODEL_LIMIT:-60}  # test_gpu GpuInfiniteHip*
MEMCHECK_FILTER=${MEMCHECK_FILTER:-IhipGpu.TiesKeepTheEarliestChunks:IhipGpu.HeadDim64*:IhipGpuPrefill.HeadDim64*}
B=/tmp/ihip-ab-bin
T0=$(date +%s)
mkdir -p "$OUT" "$B"
unpack_bin "$CARRY/bin.tar.xz" "$B"
record_env "$OUT/env.txt" "${GIT_COMMIT:-unknown}"
status=0
# step (gpu-carry.sh): output in $OUT/NAME.log, one summary line (with the time since the start).
STEP_T0=$T0
gtest_summary() { grep -E "Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED)|^\[       OK|tests ran" "$OUT/$1.log" | head -40; }

tests() {  # tests NAME LIMIT: the binary, and again without PDL when it fails
  step "$1" "$2" "$B/$1"; local rc=$?; gtest_summary "$1"
  [ $rc = 0 ] || { step "$1_no_pdl" "$2" env LONGCTX_NO_PDL=1 "$B/$1"; gtest_summary "$1_no_pdl"; }
}
tests test_ihip_gpu "$TEST_LIMIT"
tests test_ihip_gpu_method 30
ab_triple() {  # ab_triple REP: the base build's decode benchmark, the new one's, the new one's without PDL
  step "bench_base_$1" 40 "$B/longctx_bench_infinitehip.base" --json "$OUT/bench_base_$1.json"
  grep "^decode" "$OUT/bench_base_$1.log"
  step "bench_new_$1" 40 "$B/longctx_bench_infinitehip" $NEW_ARGS --json "$OUT/bench_new_$1.json"
  grep "^decode" "$OUT/bench_new_$1.log"
  step "bench_new_no_pdl_$1" 40 env LONGCTX_NO_PDL=1 "$B/longctx_bench_infinitehip" $NEW_ARGS \
    --json "$OUT/bench_new_no_pdl_$1.json"
  grep "^decode" "$OUT/bench_new_no_pdl_$1.log"
}
ab_triple 1
if [ -x "$B/test_gpu" ]; then
  step model "$MODEL_LIMIT" "$B/test_gpu" --gtest_filter='GpuInfiniteHip*'
  gtest_summary model
  grep "gpu infinitehip" "$OUT/model.log"
fi
if [ "$TORCH" = 1 ]; then
  step torch_decode 40 python3 "$CARRY/torch_baseline.py" --prefill "" --decode 131072,1048576 \
    --json "$OUT/torch_decode.json"
  grep "^decode" "$OUT/torch_decode.log"
fi
step memcheck "$MEMCHECK_LIMIT" compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu" --gtest_filter="$MEMCHECK_FILTER"
tail -3 "$OUT/memcheck.log"
for rep in $(seq 2 "$REPS"); do
  [ $(( $(date +%s) - T0 )) -lt "$AB_SECONDS" ] && ab_triple "$rep"
done
tar -C "$OUT" -czf /tmp/ihip-ab-results.tar.gz . && find "$OUT" -type f ! -name summary.txt -delete && mv /tmp/ihip-ab-results.tar.gz "$OUT/"
exit $status
