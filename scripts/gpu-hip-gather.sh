#!/usr/bin/env bash
# gpu-hip-gather.sh: HiP's sparse attention on the Hopper kernel (sparse_attention_sm90.cu: the
# gathered 2-key blocks' tiles), A/B against a base build of the same kernel, in one device call.
#
# Two phases (PHASE=1 or 2 in the carried run.sh), each under one deadline of BUDGET_S seconds
# from the start (a step gets what is left, none starts with less than 10 s):
#   1 (measure): a smoke test of the HiP cases; bench_hip prefill 128K and 1M (random inputs) with
#     base and ours; ncu (SchedulerStats, WarpStateStats, MemoryWorkloadAnalysis, Occupancy) on
#     one sparse_attn_sm90_kernel launch at 128K, ours and base; bench_hip --structured-qk with
#     base and ours; bench_sparse 128K random (MInference's paths) with base and ours.
#   2 (final): test_cuda 'SparseAttn*' (bf16 and fp8, d 128 and 256), test_hip_gpu_method,
#     compute-sanitizer memcheck on the HiP sparse cases; bench_hip random and --structured-qk,
#     base and ours interleaved; torch SDPA cuDNN / flash at 128K (bench/torch_baseline.py, the
#     lead's checkout); bench_sparse 128K random and structured, base and ours; with VAR_A, an
#     earlier variant's bench_hip beside them (and its tests if ours fail).
# "base" is the kernel of the commit named in base.txt (built from `git archive` of it, with this
# branch's bench_hip.cu for the --structured-qk option), "ours" this branch's.
# Logs: $OUT/steps.log (each step's digest), $OUT/logs.tgz (every log), JSON per benchmark in it.
#
# Here (no GPU):
#   cmake --build build -j2 --target test_cuda test_hip_gpu_method longctx_bench_sparse longctx_bench_hip
#   cmake --build .base/build -j2 --target test_cuda longctx_bench_sparse longctx_bench_hip
#   (.base/: `git archive BASE_COMMIT | tar -x -C .base`, configured with the same flags)
#   PHASE=1 BASE_COMMIT=<sha> scripts/gpu-hip-gather.sh --pack
# On the device: run `bash .carry/hip-gather/run.sh` (carry [".carry/hip-gather"], timeout_s 240).
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step, unpack_bin
BUILD=${BUILD:-build}
BASE_BUILD=${BASE_BUILD:-.base/build}
CARRY=${CARRY:-/work/main/.carry/hip-gather}

if [ "${1:-}" = "--pack" ]; then
  tmp=/tmp/hipg-pack
  rm -rf "$tmp" "$CARRY" && mkdir -p "$CARRY" "$tmp"
  cp "$BUILD/tests/cuda/test_cuda" "$BUILD/tests/cuda/test_hip_gpu_method" "$BUILD/bench/longctx_bench_sparse" \
    "$BUILD/bench/longctx_bench_hip" "$tmp/"
  cp "$BASE_BUILD/bench/longctx_bench_sparse" "$tmp/base_bench_sparse"
  cp "$BASE_BUILD/bench/longctx_bench_hip" "$tmp/base_bench_hip"
  if [ -n "${VAR_A:-}" ]; then  # a variant's packed bin.tar.xz (an earlier commit of this branch)
    mkdir -p "$tmp/a" && tar -C "$tmp/a" -xJf "$VAR_A"
    cp "$tmp/a/test_cuda" "$tmp/a_test_cuda"; cp "$tmp/a/longctx_bench_hip" "$tmp/a_bench_hip"; rm -rf "$tmp/a"
  fi
  strip "$tmp"/*
  tar -C "$tmp" -cJf "$CARRY/bin.tar.xz" .
  carry_libs "$tmp/lib" "$tmp"/*  # OpenBLAS etc. (the CPU oracles), compressed: the carry's 64 MiB
  tar -C "$tmp/lib" -cJf "$CARRY/lib.tar.xz" .
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$CARRY/"
  git rev-parse --short HEAD > "$CARRY/commit.txt"
  echo "${BASE_COMMIT:-unknown}" > "$CARRY/base.txt"
  printf '#!/usr/bin/env bash\nPHASE=%s BUDGET_S=%s bash "$(dirname "$0")/gpu-hip-gather.sh"\n' "${PHASE:-1}" \
    "${BUDGET_S:-225}" > "$CARRY/run.sh"
  ls -la "$CARRY"; du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-out}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN=/tmp/hipg-bin
unpack_bin "$HERE/bin.tar.xz" "$BIN" "$BIN/lib"
mkdir -p "$BIN/lib" && tar -C "$BIN/lib" -xJf "$HERE/lib.tar.xz"
COMMIT=$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)
BASE=$(cat "$HERE/base.txt" 2>/dev/null || echo unknown)
PHASE=${PHASE:-1}
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-225}
status=0
record_env "$OUT/env.txt" "$COMMIT (base $BASE, phase $PHASE)"

LOGS=/tmp/hipg-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
STEP_DIR=$LOGS STEP_SUMMARY=$OUT/steps.log STEP_BUDGET_S=$BUDGET_S STEP_T0=$T0
step_show() {
  { echo "==== $1 (rc=$2)"; grep -E "^prefill|^S=|^  sparse|Failure|FAILED|^\[  (PASSED|FAILED|SKIPPED)|ERROR SUMMARY|^ *(---|Section|[A-Z][A-Za-z /%-]+ +[a-zA-Z%/]+ +[0-9.,]+$)" \
      "$LOGS/$1.log" | head -120; } >> "$OUT/steps.log"
  tar -C "$LOGS" -czf "$OUT/logs.tgz" .
}
hip() {  # hip NAME BIN LIMIT ARGS...: bench_hip prefill (no decode, no dense: torch is the baseline)
  local name=$1 bin=$2 limit=$3; shift 3
  step "$name" "$limit" "$bin" --lens "" --dense-max 0 --json "$LOGS/$name.json" "$@"
}
ncu_sparse() {  # ncu_sparse NAME BIN LIMIT: one sparse_attn_sm90_kernel launch at 128K, random inputs
  step "$1" "$3" ncu --clock-control none --kernel-name regex:sparse_attn_sm90_kernel --launch-count 1 \
    --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
    --section SpeedOfLight --section LaunchStats \
    "$2" --lens "" --dense-max 0 --prefill 131072
}

ok=1
step smoke "${T_SMOKE:-45}" "$BIN/test_cuda" \
  --gtest_filter='SparseAttnSmall.Hip*:SparseAttnSmallFp8.ShortRangesTailPackingAndHip'
[ $? = 124 ] && { ok=0; echo "smoke timed out (a hang): our benchmarks skipped"; }

if [ "$PHASE" = 1 ]; then
  hip hip_base "$BIN/base_bench_hip" 30 --prefill 131072,1048576 --fp8-tiles
  [ $ok = 1 ] && hip hip_ours "$BIN/longctx_bench_hip" 30 --prefill 131072,1048576 --fp8-tiles
  [ $ok = 1 ] && ncu_sparse ncu_ours "$BIN/longctx_bench_hip" 45
  ncu_sparse ncu_base "$BIN/base_bench_hip" 45
  [ $ok = 1 ] && hip hip_ours_structured "$BIN/longctx_bench_hip" 25 --prefill 131072,1048576 --structured-qk
  hip hip_base_structured "$BIN/base_bench_hip" 25 --prefill 131072,1048576 --structured-qk
  step sparse_base 30 "$BIN/base_bench_sparse" --seqs 131072 --dense-seqs 0 --json "$LOGS/sparse_base.json"
  [ $ok = 1 ] && step sparse_ours 30 "$BIN/longctx_bench_sparse" --seqs 131072 --dense-seqs 0 \
    --json "$LOGS/sparse_ours.json"
else
  [ $ok = 1 ] && step tests "${T_TESTS:-70}" "$BIN/test_cuda" --gtest_filter='SparseAttn*'
  tests_rc=$?
  hip hip_base_1 "$BIN/base_bench_hip" 25 --prefill 131072,1048576 --fp8-tiles
  [ -x "$BIN/a_bench_hip" ] && hip hip_a_1 "$BIN/a_bench_hip" 25 --prefill 131072,1048576 --fp8-tiles
  [ $ok = 1 ] && hip hip_ours_1 "$BIN/longctx_bench_hip" 25 --prefill 131072,1048576 --fp8-tiles
  hip hip_base_structured "$BIN/base_bench_hip" 20 --prefill 131072,1048576 --structured-qk
  [ $ok = 1 ] && hip hip_ours_structured "$BIN/longctx_bench_hip" 20 --prefill 131072,1048576 --structured-qk
  step torch 45 python3 bench/torch_baseline.py --prefill 131072 --decode "" --backends cudnn \
    --json "$LOGS/torch.json"
  [ $ok = 1 ] && step memcheck "${T_MEMCHECK:-60}" compute-sanitizer --tool memcheck --error-exitcode 99 \
    "$BIN/test_cuda" --gtest_filter='SparseAttnSmall.Hip*'
  step tests_hip_method 25 "$BIN/test_hip_gpu_method"
  [ $ok = 1 ] && ncu_sparse ncu_ours "$BIN/longctx_bench_hip" 20
  step sparse_base 15 "$BIN/base_bench_sparse" --seqs 131072 --dense-seqs 0 --json "$LOGS/sparse_base.json"
  [ $ok = 1 ] && step sparse_ours 15 "$BIN/longctx_bench_sparse" --seqs 131072 --dense-seqs 0 \
    --json "$LOGS/sparse_ours.json"
  hip hip_base_2 "$BIN/base_bench_hip" 15 --prefill 131072,1048576
  [ $ok = 1 ] && hip hip_ours_2 "$BIN/longctx_bench_hip" 15 --prefill 131072,1048576
  step sparse_base_structured 20 "$BIN/base_bench_sparse" --inputs structured --seqs 131072 --dense-seqs 0 \
    --json "$LOGS/sparse_base_structured.json"
  [ $ok = 1 ] && step sparse_ours_structured 20 "$BIN/longctx_bench_sparse" --inputs structured --seqs 131072 \
    --dense-seqs 0 --json "$LOGS/sparse_ours_structured.json"
  if [ $ok = 0 ] || [ "$tests_rc" != 0 ]; then  # ours failed: the fallback variant's tests
    [ -x "$BIN/a_test_cuda" ] && step tests_a 60 "$BIN/a_test_cuda" --gtest_filter='SparseAttn*'
  fi
fi
tar -C "$LOGS" -czf "$OUT/logs.tgz" .
echo "== done (commit $COMMIT, base $BASE, phase $PHASE), status $status, $(( $(date +%s) - T0 )) s" | tee -a "$OUT/steps.log"
exit $status
