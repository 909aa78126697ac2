#!/usr/bin/env bash
# gpu-model.sh: the model on the GPU, in one device call: GPU model tests, then the end-to-end
# benchmark of the Llama-3-8B geometry (random weights), JSON and logs to $OUT.
#
# Here (no GPU needed), build and pack what travels (stripped binaries as one .tar.xz, the two
# shared libraries the GPU machine may lack, optionally one half of the default model):
#   cmake -S . -B build-gpumodel -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DLONGCTX_BENCH=OFF -DBLA_STATIC=ON -DLONGCTX_PICTURES=OFF \
#         -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
#   ninja -C build-gpumodel -j2 longctx test_gpu
#   scripts/gpu-model.sh --pack [--model-part 1|2]      # -> build-gpumodel/carry/ (< 64 MiB)
# On the device (carry build-gpumodel/carry):
#   OUT=/tmp/out scripts/gpu-model.sh [--skip-tests] [--skip-bench] [--lengths 32k,128k] [--scaled "128k,512k"]
#       [--eager-too] [--decode N] [--tests GTEST_FILTER]
# --eager-too runs each benchmark a second time with LONGCTX_NO_CUDA_GRAPH=1 (decode by eager
# launches instead of CUDA graph replay), JSON as bench_model_eager*.json.
# BUILD=build-gpugraph (with CARRY=build-gpugraph/carry) packs and runs another build folder.
# Why packed: the two binaries are 33 MB each (sm_90a kernels), 6 MB as .tar.xz; OpenBLAS is
# linked statically (-DBLA_STATIC=ON), libpcre2-8 travels as a .so file; pictures (cairo) are left out.
# The default model (98 MB) is too big for one transfer with the tree: --model-part 1 and 2 in
# two calls made back to back (files under /root survive while the machine is warm); the part
# is appended under $LONGCTX_CACHE and, once whole, checked against the golden file's SHA-256.
# Each step has a timeout so a hang cannot eat the device budget.
set -uo pipefail
BUILD=${BUILD:-build-gpumodel}
CARRY=${CARRY:-$BUILD/carry}  # CARRY=build-gpumodel/carry2 to pack a second folder
. "$(dirname "$0")/gpu-carry.sh"  # carry_pack, carry_unpack, record_env, join_default_model

if [ "${1:-}" = "--pack" ]; then
  part=""
  [ "${2:-}" = "--model-part" ] && part="$3"
  carry_pack "$BUILD" "$CARRY" "$part"; exit 0
fi

OUT=${OUT:-out}
mkdir -p "$OUT"
skip_tests=0; skip_bench=0; lengths="32k,128k"; scaled="128k,512k"; eager_too=0; decode=32; filter="*"
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-tests) skip_tests=1 ;;
    --skip-bench) skip_bench=1 ;;
    --lengths) lengths="$2"; shift ;;
    --scaled) scaled="$2"; shift ;;
    --eager-too) eager_too=1 ;;
    --decode) decode="$2"; shift ;;
    --tests) filter="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
BIN=/tmp/longctx-gpu-model
carry_unpack "$CARRY" "$BIN" || exit 2
export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
COMMIT=${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
status=0
record_env "$OUT/env.txt" "$COMMIT"

# Default model, in parts (for the eval / golden tests).
join_default_model "$CARRY"

if [ $skip_tests = 0 ]; then
  echo "== test_gpu"
  timeout ${TEST_TIMEOUT:-240} $BIN/test_gpu --gtest_filter="$filter" > "$OUT/tests.log" 2>&1; rc=$?
  grep -E "^\[ (gpu|engine|message)|^\[  (PASSED|FAILED|SKIPPED) |Failure|error" "$OUT/tests.log" | head -60
  [ $rc = 0 ] || { echo "TESTS FAILED (rc=$rc)"; status=1; }
fi

if [ $skip_bench = 0 ]; then
  echo "== bench model: llama3-8b geometry, all 32 layers, $lengths"
  timeout ${BENCH_TIMEOUT:-200} $BIN/longctx bench model --device cuda --random-weights llama3-8b --lengths "$lengths" \
    --decode $decode --json "$OUT/bench_model.json" 2> "$OUT/bench.log"; rc=$?
  cat "$OUT/bench.log"
  [ $rc = 0 ] || { echo "BENCH FAILED (rc=$rc)"; status=1; }
  if [ $eager_too = 1 ]; then
    echo "== bench model, eager decode (LONGCTX_NO_CUDA_GRAPH=1): llama3-8b geometry, all 32 layers, $lengths"
    LONGCTX_NO_CUDA_GRAPH=1 timeout ${BENCH_TIMEOUT:-200} $BIN/longctx bench model --device cuda --random-weights llama3-8b \
      --lengths "$lengths" --decode $decode --json "$OUT/bench_model_eager.json" 2> "$OUT/bench_eager.log"; rc=$?
    cat "$OUT/bench_eager.log"
    [ $rc = 0 ] || { echo "EAGER BENCH FAILED (rc=$rc)"; status=1; }
  fi
  if [ -n "$scaled" ]; then
    # 512K with all 32 layers takes ~3 minutes of prefill; 2 layers do the same per-layer work
    # (the LM head and embedding aside), so times scale by 16. 128K is run both ways to check that.
    echo "== bench model: llama3-8b geometry, 2 of 32 layers (scale times by 16), $scaled"
    timeout ${SCALED_TIMEOUT:-150} $BIN/longctx bench model --device cuda --random-weights llama3-8b:2 --lengths "$scaled" \
      --decode $decode --json "$OUT/bench_model_2layers.json" 2> "$OUT/bench_2layers.log"; rc=$?
    cat "$OUT/bench_2layers.log"
    [ $rc = 0 ] || { echo "SCALED BENCH FAILED (rc=$rc)"; status=1; }
  fi
fi
exit $status
