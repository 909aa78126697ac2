#!/usr/bin/env bash
# gpu-sparse-d256.sh: the Hopper sparse attention kernel at head_dim 256 in one device call:
# tests, memcheck, and benchmarks side by side with the kernel it replaces at 256.
#
# What, in priority order (each step under a timeout, and all under one deadline, BUDGET_S
# seconds from the start: a step gets what is left, none starts with less than 10 s):
#   1. test_cuda 'Sparse*' (Hopper kernel d 128 and 256 and generic kernel vs the fp64 oracle);
#   2. compute-sanitizer memcheck on 'SparseAttnSmallD256*';
#   3. bench_sparse --head-dim 256 (16 / 8 heads) at 128K, random block-sparse and vertical-slash
#      indices: Hopper 3 stages, 2 stages, generic, and the dense Hopper kernel;
#   4. bench_hip --geometry 4/1/256 (gemma-3-270m's global layers), prefill 128K and 1M: HiP's
#      sparse attention on the Hopper kernel and on the generic kernel (hip_sparse_attention_generic_ms);
#   5. d 128 unchanged: bench_sparse (32 / 8 heads, 128K) with main's binary, then this one;
#   6. torch SDPA cuDNN at 16,8,256 and 4,1,256, 128K prefill;
#   7. test_minference_index '*HeadDim256*' (the GPU MInference index + sparse attention end to end);
#   8. the d 128 A/B again (main, new), if time is left.
# Logs: $OUT/steps.log (every step's output), JSON per benchmark, env.txt.
#
# Here (no GPU): build, then pack the stripped binaries into .carry/<branch>/ of the lead's checkout:
#   cmake --build build-gpu -j2 --target test_cuda test_minference_index longctx_bench_sparse longctx_bench_hip
#   MAIN_BENCH=/tmp/bench_sparse_main scripts/gpu-sparse-d256.sh --pack   # main's bench_sparse beside
# On the device: OUT=/tmp/out bash .carry/sparse-sm90-d256/gpu-sparse-d256.sh
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
BUILD=${BUILD:-build-gpu}
CARRY=${CARRY:-/work/main/.carry/sparse-sm90-d256}

if [ "${1:-}" = "--pack" ]; then
  rm -rf /tmp/sm90-pack && mkdir -p "$CARRY" /tmp/sm90-pack
  cp "$BUILD/tests/cuda/test_cuda" "$BUILD/tests/cuda/test_minference_index" "$BUILD/bench/longctx_bench_sparse" \
    "$BUILD/bench/longctx_bench_hip" /tmp/sm90-pack/
  cp "${MAIN_BENCH:?set MAIN_BENCH to the longctx_bench_sparse built from main}" /tmp/sm90-pack/bench_sparse_main
  strip /tmp/sm90-pack/*
  rm -f "$CARRY/bench_sparse_main"
  tar -C /tmp/sm90-pack -cJf "$CARRY/bin.tar.xz" .
  carry_libs "$CARRY/lib" /tmp/sm90-pack/*
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$CARRY/"
  git rev-parse --short HEAD > "$CARRY/commit.txt"
  ls -la "$CARRY" "$CARRY/lib"; du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-out}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN=/tmp/sm90-bin
unpack_bin "$HERE/bin.tar.xz" "$BIN" "$HERE/lib"
COMMIT=$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-280}
status=0
record_env "$OUT/env.txt" "$COMMIT"

LOGS=/tmp/sm90-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
# step (gpu-carry.sh): logs in $LOGS, each one and its rc line appended to $OUT/steps.log, each limit
# cut to what is left of BUDGET_S.
STEP_DIR=$LOGS STEP_SUMMARY=$OUT/steps.log STEP_BUDGET_S=$BUDGET_S STEP_T0=$T0
step_show() { { echo "==== $1 (rc=$2)"; cat "$LOGS/$1.log"; } >> "$OUT/steps.log"; }
summary() { grep -E "^  sparse|Failure|FAILED|^\[  (PASSED|FAILED|SKIPPED)|ERROR SUMMARY" "$1" | head -${2:-80}; }

step tests_sparse ${T_TESTS:-90} "$BIN/test_cuda" --gtest_filter='Sparse*'
summary "$LOGS/tests_sparse.log"
step memcheck_d256 ${T_MEMCHECK:-70} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_cuda" \
  --gtest_filter='SparseAttnSmallD256*'
summary "$LOGS/memcheck_d256.log" 20
step bench_sparse_d256 ${T_BENCH:-50} "$BIN/longctx_bench_sparse" --head-dim 256 --seqs 131072 --dense-seqs 131072 \
  --json "$OUT/bench_sparse_d256.json"
grep "^S=" "$LOGS/bench_sparse_d256.log"
step bench_hip_d256 ${T_HIP:-45} "$BIN/longctx_bench_hip" --lens "" --prefill 131072,1048576 --geometry 4/1/256 \
  --dense-max 131072 --json "$OUT/bench_hip_d256.json"
grep "^prefill" "$LOGS/bench_hip_d256.log"
ab() {  # $1: run number
  step "d128_main_$1" ${T_AB:-30} "$BIN/bench_sparse_main" --seqs 131072 --dense-seqs 0 --json "$LOGS/d128_main_$1.json"
  grep "^S=" "$LOGS/d128_main_$1.log"
  step "d128_new_$1" ${T_AB:-30} "$BIN/longctx_bench_sparse" --seqs 131072 --dense-seqs 0 --json "$LOGS/d128_new_$1.json"
  grep "^S=" "$LOGS/d128_new_$1.log"
}
ab 1
for shape in 16,8,256 4,1,256; do
  step "torch_${shape//,/_}" ${T_TORCH:-40} python3 bench/torch_baseline.py --shape "$shape" --prefill 131072 --decode "" \
    --backends cudnn --json "$OUT/torch_${shape//,/_}.json"
  grep -v "^ " "$LOGS/torch_${shape//,/_}.log" | tail -4
done
step tests_mindex_d256 ${T_MINDEX:-40} "$BIN/test_minference_index" --gtest_filter='*HeadDim256*'
summary "$LOGS/tests_mindex_d256.log" 20
ab 2
# the d 128 A/B JSONs as one file (the call returns few files)
python3 - "$LOGS" "$OUT/d128_ab.json" <<'PY' || true
import glob, json, os, sys
out = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "d128_*.json"))):
    try:
        out[os.path.basename(f)[:-5]] = json.load(open(f))
    except Exception as e:
        out[os.path.basename(f)[:-5]] = str(e)
json.dump(out, open(sys.argv[2], "w"), indent=1)
PY
echo "== done (commit $COMMIT), status $status, $(( $(date +%s) - T0 )) s"
exit $status
