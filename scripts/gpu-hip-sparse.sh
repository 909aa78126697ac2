#!/usr/bin/env bash
# gpu-hip-sparse.sh: HiP's sparse attention on the Hopper kernel (sparse_attention_sm90.cu: the
# producer warps that feed each consumer, the mixed range batches), A/B against main's build of the
# same kernel, tests and one profile, in one device call.
#
# Steps (one deadline of BUDGET_S seconds from the start; a step gets what is left, none starts
# with less than 10 s): test_cuda 'SparseAttn*' (bf16 and fp8, d 128 and 256, the HiP ring cases),
# test_sparse_window, test_hip_gpu_method; bench_hip prefill 128K and 1M (random, fp8 K/V tiles
# beside) and --structured-qk, base and ours interleaved; bench_sparse 128K random and structured
# (MInference's paths), base and ours; a second 128K bench_hip pair; ncu of one
# sparse_attn_sm90_kernel launch at 128K (ours: warp states, source counters, the SASS source
# page as CSV); compute-sanitizer memcheck on the HiP cases; torch SDPA cuDNN at 128K if time is left.
# "base" is main's build (/work/main/build, its sparse kernel identical to this branch's base);
# with VAR_A=<folder> at --pack, an earlier build of this branch ("a": its bench_hip, bench_sparse and
# test_cuda) is timed beside base and ours, and its tests run if ours fail.
#
# Here (no GPU):
#   nice ninja -C build -j2 test_cuda test_hip_gpu_method test_sparse_window longctx_bench_hip longctx_bench_sparse
#   scripts/gpu-hip-sparse.sh --pack
# On the device: run(command='bash .carry/hip-sparse/run.sh', carry=['.carry/hip-sparse'], timeout_s=400)
# Logs: $OUT/steps.log (each step's digest), $OUT/logs.tgz (every log, JSON per benchmark, the ncu CSV).
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step, unpack_bin
BUILD=${BUILD:-build}
BASE_BUILD=${BASE_BUILD:-/work/main/build}
CARRY=${CARRY:-/work/main/.carry/hip-sparse}

if [ "${1:-}" = "--pack" ]; then
  tmp=/tmp/hips-pack
  rm -rf "$tmp" "$CARRY" && mkdir -p "$CARRY" "$tmp"
  cp "$BUILD/tests/cuda/test_cuda" "$BUILD/tests/cuda/test_hip_gpu_method" "$BUILD/tests/cuda/test_sparse_window" \
    "$BUILD/bench/longctx_bench_sparse" "$BUILD/bench/longctx_bench_hip" "$tmp/"
  cp "$BASE_BUILD/bench/longctx_bench_sparse" "$tmp/base_bench_sparse"
  cp "$BASE_BUILD/bench/longctx_bench_hip" "$tmp/base_bench_hip"
  if [ -n "${VAR_A:-}" ]; then
    cp "$VAR_A/longctx_bench_hip" "$tmp/a_bench_hip"; cp "$VAR_A/longctx_bench_sparse" "$tmp/a_bench_sparse"
    cp "$VAR_A/test_cuda" "$tmp/a_test_cuda"
  fi
  strip "$tmp"/*
  tar -C "$tmp" -cJf "$CARRY/bin.tar.xz" .
  carry_libs "$tmp/lib" "$tmp"/*  # OpenBLAS etc. (the CPU oracles)
  tar -C "$tmp/lib" -cJf "$CARRY/lib.tar.xz" .
  cp "$0" "$(dirname "$0")/gpu-carry.sh" bench/torch_baseline.py "$CARRY/"
  git rev-parse --short HEAD > "$CARRY/commit.txt"
  git -C "$(dirname "$BASE_BUILD")" rev-parse --short HEAD > "$CARRY/base.txt"
  printf '#!/usr/bin/env bash\nBUDGET_S=%s bash "$(dirname "$0")/gpu-hip-sparse.sh"\n' "${BUDGET_S:-385}" > "$CARRY/run.sh"
  ls -la "$CARRY"; du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-out}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN=/tmp/hips-bin
unpack_bin "$HERE/bin.tar.xz" "$BIN" "$BIN/lib"
mkdir -p "$BIN/lib" && tar -C "$BIN/lib" -xJf "$HERE/lib.tar.xz"
COMMIT=$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)
BASE=$(cat "$HERE/base.txt" 2>/dev/null || echo unknown)
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-385}
status=0
record_env "$OUT/env.txt" "$COMMIT (base: main's build at $BASE)"

LOGS=/tmp/hips-logs
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

step tests 75 "$BIN/test_cuda" --gtest_filter='SparseAttn*'
tests_rc=$?
[ $tests_rc = 124 ] && { echo "tests timed out (a hang?)" | tee -a "$OUT/steps.log"; }
step tests_window 25 "$BIN/test_sparse_window"
step tests_hip_method 25 "$BIN/test_hip_gpu_method"
# the variants of the same binary kind side by side: base, a (if carried), ours
variants="base ours"; [ -x "$BIN/a_bench_hip" ] && variants="base a ours"
bin_of() { case $1 in base) echo "$BIN/base_$2" ;; a) echo "$BIN/a_$2" ;; ours) echo "$BIN/longctx_$2" ;; esac; }
for v in $variants; do hip "hip_${v}_1" "$(bin_of $v bench_hip)" 30 --prefill 131072,1048576 --fp8-tiles; done
for v in $variants; do hip "hip_${v}_structured" "$(bin_of $v bench_hip)" 22 --prefill 131072,1048576 --structured-qk; done
for v in $variants; do
  step "sparse_$v" 15 "$(bin_of $v bench_sparse)" --seqs 131072 --dense-seqs 0 --json "$LOGS/sparse_$v.json"
done
for v in $variants; do
  step "sparse_${v}_structured" 18 "$(bin_of $v bench_sparse)" --inputs structured --seqs 131072 --dense-seqs 0 \
    --json "$LOGS/sparse_${v}_structured.json"
done
for v in $variants; do hip "hip_${v}_2" "$(bin_of $v bench_hip)" 12 --prefill 131072 --fp8-tiles; done
# one launch at 128K, random inputs: where the warps wait (source counters: stall samples per SASS line)
step ncu_ours 45 ncu --clock-control none --kernel-name regex:sparse_attn_sm90_kernel --launch-count 1 \
  --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SpeedOfLight \
  --section SourceCounters --export "$LOGS/ncu_ours" \
  "$BIN/longctx_bench_hip" --lens "" --dense-max 0 --prefill 131072
[ -f "$LOGS/ncu_ours.ncu-rep" ] && timeout 20 ncu --import "$LOGS/ncu_ours.ncu-rep" --page source --csv \
  --print-source sass > "$LOGS/ncu_ours_source.csv" 2> "$LOGS/ncu_ours_source.err"
step memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_cuda" --gtest_filter='SparseAttnSmall.Hip*'
if [ "$tests_rc" != 0 ] && [ -x "$BIN/a_test_cuda" ]; then  # ours failed: the earlier variant's tests
  step tests_a 60 "$BIN/a_test_cuda" --gtest_filter='SparseAttn*'
fi
step torch 45 python3 "$HERE/torch_baseline.py" --prefill 131072 --decode "" --backends cudnn --json "$LOGS/torch.json"
tar -C "$LOGS" -czf "$OUT/logs.tgz" .
echo "== done (commit $COMMIT, base main $BASE), status $status, $(( $(date +%s) - T0 )) s" | tee -a "$OUT/steps.log"
exit $status
