#!/usr/bin/env bash
# gpu-d256.sh: the sparse methods at head_dim 256 (Gemma 3's global layers) in one device call:
# MInference's GPU index builders at d = 256 against the CPU builders (and every other builder
# test, as the regression check of d = 64 / 128), the Gemma 3 geometry model test (GPU MInference
# vs CPU on the global layer, window layers dense), a compute-sanitizer memcheck of the d = 256
# builder cases, then one-layer sparse prefill with the index estimated on the GPU (build
# included) at d = 256 (Gemma 3 12B: 16 / 8 heads) and d = 128 (Llama-3-8B: 32 / 8, the same
# FLOPs per token), the dense kernel at both, and torch SDPA (cuDNN, flash) at d = 256.
# Each step has a timeout so a hang cannot eat the device budget; logs and JSON land in $OUT.
#
# Here (no GPU needed): build and pack (stripped, one .tar.xz; OpenBLAS static):
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON -DBLA_STATIC=ON
#   ninja -C build-gpu -j2 test_minference_index test_gpu longctx_bench_sparse
#   scripts/gpu-d256.sh --pack            # -> .carry/d256/ (CARRY=... to change)
# On the device (carry the folder): OUT=/tmp/out bash .carry/d256/gpu-d256.sh
#   SEQS=32768,131072 by default. --bench-only: the Gemma 3 model test, the two benchmarks and
#   torch at both shapes (the cuDNN baseline next to our kernels in one call).
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
BUILD=${BUILD:-build-gpu}
CARRY=${CARRY:-.carry/d256}
SEQS=${SEQS:-32768,131072}

if [ "${1:-}" = "--pack" ]; then
  rm -rf "$CARRY" /tmp/d256-pack && mkdir -p "$CARRY" /tmp/d256-pack
  cp "$BUILD/tests/cuda/test_minference_index" "$BUILD/tests/gpu/test_gpu" "$BUILD/bench/longctx_bench_sparse" /tmp/d256-pack/
  strip /tmp/d256-pack/*
  tar -C /tmp/d256-pack -cJf "$CARRY/bin.tar.xz" test_minference_index test_gpu longctx_bench_sparse
  carry_libs "$CARRY/lib" /tmp/d256-pack/*
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$CARRY/"
  git rev-parse HEAD > "$CARRY/commit.txt"
  git status --short -- src tests bench scripts > "$CARRY/dirty.txt"
  ls -la "$CARRY" "$CARRY/lib"; du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-out}
mkdir -p "$OUT"
BIN=/tmp/d256-bin
unpack_bin "$CARRY/bin.tar.xz" "$BIN" "$PWD/$CARRY/lib"
COMMIT=$(cat "$CARRY/commit.txt" 2>/dev/null || echo unknown)
status=0
record_env "$OUT/env.txt" "$COMMIT (binaries built from it plus: $(tr '\n' ' ' < "$CARRY/dirty.txt" 2>/dev/null))"

LOGS=/tmp/d256-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
# step (gpu-carry.sh): logs in $LOGS, each one and its rc line appended to $OUT/steps.log (the
# device call returns at most 8 files: the JSONs, env and this).
STEP_DIR=$LOGS STEP_SUMMARY=$OUT/steps.log
step_show() { { echo "==== $1 (rc=$2)"; cat "$LOGS/$1.log"; } >> "$OUT/steps.log"; }

if [ "${1:-}" = "--bench-only" ]; then
  step tests_gpu ${T_GPU:-60} "$BIN/test_gpu" --gtest_filter='GpuMInferenceD256*'
  grep -E "^\[ (gpu|engine)|Failure|FAILED|^\[  (PASSED|FAILED|SKIPPED)" "$LOGS/tests_gpu.log" | head -20
  for hd in 256 128; do
    step bench_sparse_d$hd ${T_BENCH:-60} "$BIN/longctx_bench_sparse" $([ $hd = 256 ] && echo --head-dim 256) --estimate \
      --seqs "$SEQS" --dense-seqs "$SEQS" --json "$OUT/bench_sparse_d$hd.json"
    grep "^S=" "$LOGS/bench_sparse_d$hd.log"
  done
  for shape in 16,8,256 32,8,128; do
    step "torch_${shape//,/_}" ${T_TORCH:-60} python3 bench/torch_baseline.py --shape "$shape" --prefill "$SEQS" \
      --decode 131072 --json "$OUT/torch_${shape//,/_}.json"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d.get('prefill', d))[:1500])" \
      "$OUT/torch_${shape//,/_}.json"
  done
  echo "== done (commit $COMMIT), status $status"
  exit $status
fi

mindex_grep() { grep -E "^  mindex|Failure|FAILED|differs|picked|dropped|too many|^\[  (PASSED|FAILED|SKIPPED)" "$1" | head -60; }
step tests_mindex_d256 ${T_MINDEX:-70} "$BIN/test_minference_index" --gtest_filter='*HeadDim256*'
mindex_grep "$LOGS/tests_mindex_d256.log"
step tests_gpu ${T_GPU:-70} "$BIN/test_gpu" \
  --gtest_filter='GpuMInferenceD256*:GpuMInferenceParse*:GpuMInference.MatchesCpuMInference:GpuMInference.HeadDim64EngineMatchesCpuEngine'
grep -E "^\[ (gpu|engine)|Failure|FAILED|^\[  (PASSED|FAILED|SKIPPED)" "$LOGS/tests_gpu.log" | head -40
step bench_sparse_d256 ${T_BENCH:-60} "$BIN/longctx_bench_sparse" --head-dim 256 --estimate --seqs "$SEQS" --dense-seqs "$SEQS" \
  --json "$OUT/bench_sparse_d256.json"
cat "$LOGS/bench_sparse_d256.log"
step bench_sparse_d128 ${T_BENCH:-60} "$BIN/longctx_bench_sparse" --estimate --seqs "$SEQS" --dense-seqs "$SEQS" \
  --json "$OUT/bench_sparse_d128.json"
cat "$LOGS/bench_sparse_d128.log"
step torch_16_8_256 ${T_TORCH:-45} python3 bench/torch_baseline.py --shape 16,8,256 --prefill "$SEQS" --decode 131072 \
  --json "$OUT/torch_16_8_256.json"
grep -v "^ " "$LOGS/torch_16_8_256.log" | tail -8
step tests_mindex_rest ${T_MINDEX_REST:-120} "$BIN/test_minference_index" --gtest_filter='-*HeadDim256*'
mindex_grep "$LOGS/tests_mindex_rest.log"
step memcheck_d256 ${T_MEMCHECK:-60} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_minference_index" \
  --gtest_filter='MinferenceIndex.EndToEndSparseAttentionHeadDim256'
tail -3 "$LOGS/memcheck_d256.log"
echo "== done (commit $COMMIT), status $status"
exit $status
