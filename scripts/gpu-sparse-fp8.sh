#!/usr/bin/env bash
# gpu-sparse-fp8.sh: the Hopper sparse attention kernel's fp8 e4m3 K/V tiles
# (sparse_attention_sm90.cu, SparseAttnParams::kv_dtype) in one device call: tests, memcheck,
# and benchmarks side by side with the bf16 kernel.
#
# What, in priority order (each step under a timeout, all under one deadline, BUDGET_S seconds
# from the start: a step gets what is left, none starts with less than 10 s):
#   1. smoke: one fp8 test (if it times out, the kernel hangs: the other fp8 steps are skipped);
#   2. test_cuda 'SparseAttn*Fp8*' (fp8 kernel d 128 / 256 vs the fp64 oracle on dequantized K/V);
#   3. compute-sanitizer memcheck on 'SparseAttnSmallFp8*';
#   4. bench_sparse --fp8 (32 / 8 heads, d 128), 128K and 1M, random block-sparse and
#      vertical-slash indices: "impl" sm90 (bf16) and sm90_fp8 on the same index;
#   5. bench_hip --fp8-tiles, prefill 128K and 1M (Llama-3-8B shape): HiP's sparse attention,
#      bf16 and fp8 tiles, and the fp8-cache total;
#   6. bench_sparse --fp8 --head-dim 256 (16 / 8 heads) at 128K;
#   7. test_cuda 'SparseAttn*' without the fp8 cases (the bf16 kernel unchanged);
#   8. bench_sparse --fp8 --inputs structured at 128K (estimated indices on structured Q/K);
#   9. a variant build carried beside (VAR2: test_cuda + bench_sparse of a tuning variant):
#      its fp8 tests and its d 128 benchmarks at 128K;
#  10. bench_hip --fp8-tiles --geometry 4/1/256 (gemma-3-270m's global layers), 128K and 1M;
#  11. compute-sanitizer racecheck on one small fp8 test (shared-memory hazards of the in-place
#      widening; informational).
# Logs: $OUT/steps.log (every step's output), $OUT/logs.tgz, JSON per benchmark, env.txt.
#
# Here (no GPU): build, then pack the stripped binaries into .carry/fp8-sm90/ of the lead's checkout:
#   cmake --build build -j2 --target test_cuda longctx_bench_sparse longctx_bench_hip
#   [VAR2=/tmp/dir-with-test_cuda-and-longctx_bench_sparse] scripts/gpu-sparse-fp8.sh --pack
# On the device: run bash .carry/fp8-sm90/gpu-sparse-fp8.sh (carry [".carry/fp8-sm90"], timeout_s 300).
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step, unpack_bin
BUILD=${BUILD:-build}
CARRY=${CARRY:-/work/main/.carry/fp8-sm90}

if [ "${1:-}" = "--pack" ]; then
  rm -rf /tmp/fp8h-pack "$CARRY" && mkdir -p "$CARRY" /tmp/fp8h-pack
  cp "$BUILD/tests/cuda/test_cuda" "$BUILD/bench/longctx_bench_sparse" "$BUILD/bench/longctx_bench_hip" /tmp/fp8h-pack/
  if [ -n "${VAR2:-}" ]; then
    cp "$VAR2/test_cuda" /tmp/fp8h-pack/test_cuda_var2
    cp "$VAR2/longctx_bench_sparse" /tmp/fp8h-pack/bench_sparse_var2
  fi
  strip /tmp/fp8h-pack/*
  tar -C /tmp/fp8h-pack -cJf "$CARRY/bin.tar.xz" .
  carry_libs "$CARRY/lib" /tmp/fp8h-pack/*
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$CARRY/"
  git rev-parse --short HEAD > "$CARRY/commit.txt"
  ls -la "$CARRY" "$CARRY/lib"; du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-out}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN=/tmp/fp8h-bin
unpack_bin "$HERE/bin.tar.xz" "$BIN" "$HERE/lib"
COMMIT=$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-285}
status=0
record_env "$OUT/env.txt" "$COMMIT"

LOGS=/tmp/fp8h-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
STEP_DIR=$LOGS STEP_SUMMARY=$OUT/steps.log STEP_BUDGET_S=$BUDGET_S STEP_T0=$T0
step_show() {
  { echo "==== $1 (rc=$2)"; cat "$LOGS/$1.log"; } >> "$OUT/steps.log"
  tar -C "$LOGS" -czf "$OUT/logs.tgz" .
}
summary() { grep -E "^  sparse|Failure|FAILED|^\[  (PASSED|FAILED|SKIPPED)|ERROR SUMMARY" "$1" | head -${2:-80}; }

fp8_ok=1
step smoke_fp8 ${T_SMOKE:-40} "$BIN/test_cuda" --gtest_filter='SparseAttnSmallFp8.RandomIndexGqaDenseEmptyNonCausal'
rc=$?
summary "$LOGS/smoke_fp8.log" 40
[ $rc = 124 ] && { fp8_ok=0; echo "fp8 smoke test timed out: fp8 steps skipped"; }
if [ $fp8_ok = 1 ]; then
  step tests_fp8 ${T_TESTS:-70} "$BIN/test_cuda" --gtest_filter='SparseAttn*Fp8*:-SparseAttnSmallFp8.RandomIndexGqaDenseEmptyNonCausal'
  summary "$LOGS/tests_fp8.log"
  step memcheck_fp8 ${T_MEMCHECK:-60} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_cuda" \
    --gtest_filter='SparseAttnSmallFp8*'
  summary "$LOGS/memcheck_fp8.log" 20
  step bench_sparse_d128 ${T_BENCH:-60} "$BIN/longctx_bench_sparse" --fp8 --seqs 131072,1048576 --dense-seqs 0 \
    --json "$OUT/bench_sparse_d128.json"
  grep "^S=" "$LOGS/bench_sparse_d128.log"
  step bench_hip ${T_HIP:-60} "$BIN/longctx_bench_hip" --fp8-tiles --lens "" --prefill 131072,1048576 --dense-max 0 \
    --json "$OUT/bench_hip.json"
  grep "^prefill" "$LOGS/bench_hip.log"
  step bench_sparse_d256 ${T_D256:-40} "$BIN/longctx_bench_sparse" --fp8 --head-dim 256 --seqs 131072 --dense-seqs 0 \
    --json "$OUT/bench_sparse_d256.json"
  grep "^S=" "$LOGS/bench_sparse_d256.log"
fi
step tests_bf16 ${T_BF16:-70} "$BIN/test_cuda" --gtest_filter='SparseAttn*:-*Fp8*'
summary "$LOGS/tests_bf16.log"
if [ $fp8_ok = 1 ]; then
  step bench_structured ${T_STRUCT:-40} "$BIN/longctx_bench_sparse" --fp8 --inputs structured --seqs 131072 \
    --dense-seqs 0 --json "$OUT/bench_structured.json"
  grep "^S=" "$LOGS/bench_structured.log"
  if [ -x "$BIN/test_cuda_var2" ]; then
    step var2_tests_fp8 ${T_VAR2:-40} "$BIN/test_cuda_var2" --gtest_filter='SparseAttnSmallFp8*'
    summary "$LOGS/var2_tests_fp8.log" 10
    step var2_bench_d128 ${T_VAR2:-40} "$BIN/bench_sparse_var2" --fp8 --seqs 131072 --dense-seqs 0 \
      --json "$LOGS/var2_bench_d128.json"
    grep "^S=" "$LOGS/var2_bench_d128.log"
    step var2_structured ${T_VAR2:-40} "$BIN/bench_sparse_var2" --fp8 --inputs structured --seqs 131072 \
      --dense-seqs 0 --json "$LOGS/var2_structured.json"
    grep "^S=" "$LOGS/var2_structured.log"
  fi
  step bench_hip_d256 ${T_HIP:-60} "$BIN/longctx_bench_hip" --fp8-tiles --geometry 4/1/256 --lens "" \
    --prefill 131072,1048576 --dense-max 0 --json "$OUT/bench_hip_d256.json"
  grep "^prefill" "$LOGS/bench_hip_d256.log"
  step racecheck_fp8 ${T_RACE:-60} compute-sanitizer --tool racecheck --error-exitcode 99 "$BIN/test_cuda" \
    --gtest_filter='SparseAttnSmallFp8.RandomIndexGqaDenseEmptyNonCausal'
  summary "$LOGS/racecheck_fp8.log" 20
  grep -m5 -iE "hazard|race" "$LOGS/racecheck_fp8.log"
fi
tar -C "$LOGS" -czf "$OUT/logs.tgz" .
echo "== done (commit $COMMIT), status $status, $(( $(date +%s) - T0 )) s"
exit $status
