#!/usr/bin/env bash
# gpu-batch-check.sh: several sequences on the GPU in device calls: the batch tests (tests/gpu
# test_gpu_batch.cpp), the KV cache tests, the existing GPU tests, and the batched decode
# benchmark (bench/bench_gpu_batch.cpp: aggregate tokens/s for 1/8/32/64 sequences vs the
# single-sequence decode, fraction of the HBM bound).
# Here (no GPU needed; the default model travels in two halves, one per call, back to back):
#   BUILD=build-gpu CARRY=/work/main/.carry/gpubatch scripts/gpu-batch-check.sh --pack [--model-part 1|2]
# There (carry the CARRY folder, e.g. .carry/gpubatch):
#   CARRY=.carry/gpubatch OUT=$OUT scripts/gpu-batch-check.sh [--steps "kv batch bench"] [--tests FILTER]
# Steps: kv (test_kv), batch (test_gpu GpuBatch*), others (test_gpu FILTER, default all but
# GpuBatch*), bench (smollm2-135m and llama3-8b geometries, 4K context each). Logs and bench JSON
# land in $OUT.
set -uo pipefail
CARRY=${CARRY:-.carry/gpubatch}
if [ "${1:-}" = "--pack" ]; then
  source "$(dirname "$0")/gpu-carry.sh"
  tmp=/tmp/gpubatch-pack; rm -rf "$tmp" "$CARRY"; mkdir -p "$tmp" "$CARRY/lib"
  cp "$BUILD/tests/gpu/test_gpu" "$BUILD/tests/kv/test_kv" "$BUILD/bench/longctx_bench_gpu_batch" "$tmp/"
  strip "$tmp"/*
  for lib in $(ldd "$tmp"/* | awk '/=> \// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|ld-linux*|libcublas*|libcuda*) ;;
      *) cp -L "$lib" "$CARRY/lib/" ;;
    esac
  done
  XZ_OPT=-9 tar -C "$tmp" -cJf "$CARRY/bin.tar.xz" .
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$CARRY/"  # the device runs the lead's checkout: the scripts travel too
  git -C "$(dirname "$0")" rev-parse --short HEAD > "$CARRY/commit"
  if [ "${2:-}" = "--model-part" ]; then
    m=${LONGCTX_CACHE:-$HOME/.cache/longctx}/models/$MODEL_NAME; half=$(( ($(stat -c %s "$m") + 1) / 2 ))
    if [ "$3" = 1 ]; then head -c $half "$m" > "$CARRY/model.part1"; else tail -c +$((half + 1)) "$m" > "$CARRY/model.part2"; fi
  fi
  du -sh "$CARRY"/* "$CARRY"; exit 0
fi

source "$(dirname "$0")/gpu-carry.sh"
OUTD=${OUT:-out}; mkdir -p "$OUTD"
steps="kv batch others bench"; filter='-GpuBatch*'
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --tests) filter="$2"; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
BIN=/root/gpubatch-bin; rm -rf "$BIN"; mkdir -p "$BIN"
tar -C "$BIN" -xJf "$CARRY/bin.tar.xz" || { echo "no $CARRY/bin.tar.xz"; exit 2; }
export LD_LIBRARY_PATH="$PWD/$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LONGCTX_CACHE=/root/longctx-cache
join_default_model "$CARRY"
record_env "$OUTD/env.txt" "$(cat "$CARRY/commit" 2>/dev/null)"
for step in $steps; do
  t0=$(date +%s)
  case "$step" in
    kv) timeout 40 "$BIN/test_kv" > "$OUTD/test_kv.log" 2>&1; echo "test_kv rc=$?"; tail -n 3 "$OUTD/test_kv.log" ;;
    batch)
      timeout 110 "$BIN/test_gpu" --gtest_filter='GpuBatch*' > "$OUTD/test_batch.log" 2>&1; echo "test_gpu GpuBatch* rc=$?"
      grep -E "^\[ (gpu|message) |^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|actual" "$OUTD/test_batch.log" | head -n 60 ;;
    others)
      timeout 240 "$BIN/test_gpu" --gtest_filter="$filter" > "$OUTD/test_gpu.log" 2>&1; echo "test_gpu $filter rc=$?"
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==" "$OUTD/test_gpu.log" | tail -n 30 ;;
    bench)
      timeout 40 "$BIN/longctx_bench_gpu_batch" smollm2-135m 4096 32 1,8,32,64 > "$OUTD/bench-smollm2.json" 2> "$OUTD/bench-smollm2.log"
      echo "bench smollm2 rc=$?"; cat "$OUTD/bench-smollm2.json"; tail -n 3 "$OUTD/bench-smollm2.log"
      timeout 100 "$BIN/longctx_bench_gpu_batch" llama3-8b 4096 16 1,8,32,64 > "$OUTD/bench-llama3.json" 2> "$OUTD/bench-llama3.log"
      echo "bench llama3 rc=$?"; cat "$OUTD/bench-llama3.json"; tail -n 3 "$OUTD/bench-llama3.log"
      timeout 100 "$BIN/longctx_bench_gpu_batch" llama3-8b 4096 16 1,8,32,64 fp8 > "$OUTD/bench-llama3-fp8.json" 2> "$OUTD/bench-llama3-fp8.log"
      echo "bench llama3 fp8 rc=$?"; cat "$OUTD/bench-llama3-fp8.json"; tail -n 3 "$OUTD/bench-llama3-fp8.log" ;;
  esac
  echo "  ($step: $(( $(date +%s) - t0 )) s)"
done
