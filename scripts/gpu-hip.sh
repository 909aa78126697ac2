#!/usr/bin/env bash
# gpu-hip.sh: the device-machine run of HiP: GPU tests, memcheck, benchmark beside torch SDPA.
#
# What: (1) test_hip_gpu (the CUDA mask estimation bit-equal to the CPU reference, prefill and
# paged decode with the refresh rule; tensor-core prefill judged against fp64 on random inputs),
# test_hip_gpu_method (the GpuMethod's prefill and decode indexes = the CPU method's key sets,
# decode as one replayed CUDA graph), test_kv_offload (HiP decode through the KV offload tier
# bit-identical to without it), and, when packed, the shared sparse attention kernel's tests
# (test_cuda: Sparse* and everything else in it, test_minference_index: MInference's builders
# feeding the same kernel); (2) compute-sanitizer memcheck on test_hip_gpu (MEMCHECK_FILTER: a
# gtest filter, e.g. the newest cases) and on the sparse kernel's HiP-shaped case (gathered tails);
# (3) longctx_bench_hip (decode at DECODE_LENS, prefill at PREFILL_LENS: estimation, bf16 and over
# an fp8 copy of K, + sparse attention, vs our dense kernel up to DENSE_MAX; GEOMETRY: H/KV/D,...);
# (4) torch SDPA on the prefill shapes (bench/torch_baseline.py): TORCH_RUNS, space-separated
# H,KV,D:len,len entries (default 32,8,128:TORCH_PREFILL_LENS), each its own JSON; (5) optionally (MODEL=1, a longctx binary in
# $BIN) the whole Llama-3-8B geometry at MODEL_LENGTHS, dense and hip. Logs and JSON land in $OUT.
# Build here (no GPU needed), then pack:
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpu -j2 test_hip_gpu test_hip_gpu_method test_kv_offload test_cuda \
#     test_minference_index longctx_bench_hip
#   scripts/gpu-hip.sh --pack build-gpu /work/main/.carry/hip [path/to/longctx]
# Run on the device: OUT=/tmp/out BIN=.carry/hip bash .carry/hip/gpu-hip.sh
# Steps are skipped by empty lists (DECODE_LENS= PREFILL_LENS= TORCH_RUNS= TEST_BINS=) or TESTS=0
# (tests and memcheck); SANITIZE=0 skips memcheck.
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 cli=${4:-}
  rm -rf "$carry" && mkdir -p "$carry"
  bins="$build/tests/cuda/test_hip_gpu $build/tests/cuda/test_hip_gpu_method $build/tests/kv/test_kv_offload
    $build/tests/cuda/test_cuda $build/tests/cuda/test_minference_index $build/bench/longctx_bench_hip $cli"
  tmp=$(mktemp -d) && mkdir -p "$tmp/lib"
  packed=""
  for b in $bins; do
    [ -f "$b" ] || { echo "$b: not built, not packed"; continue; }
    cp "$b" "$tmp/" && strip "$tmp/$(basename "$b")" && packed="$packed $b"
  done
  for lib in $(ldd $packed | awk '/=> \// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|ld-linux*|libcublas*|libcuda*) ;;
      *) cp -L "$lib" "$tmp/lib/" ;;
    esac
  done
  # One .tar.xz (the carry limit is 64 MiB; OpenBLAS alone is 36 MB), unpacked on the device.
  tar -C "$tmp" -cf - . | xz -T2 -6 > "$carry/bins.tar.xz" && rm -rf "$tmp"
  cp "$0" "$carry/gpu-hip.sh"
  cp "$(dirname "$0")/../bench/torch_baseline.py" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/hip}
TORCH_SCRIPT=bench/torch_baseline.py
[ -f "$BIN/torch_baseline.py" ] && TORCH_SCRIPT=$BIN/torch_baseline.py  # the packed (newer) copy
if [ -f "$BIN/bins.tar.xz" ]; then
  mkdir -p /tmp/hip-bin && tar -C /tmp/hip-bin -xJf "$BIN/bins.tar.xz" && BIN=/tmp/hip-bin
fi
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
DECODE_LENS=${DECODE_LENS-131072,1048576}
PREFILL_LENS=${PREFILL_LENS-16384,32768,65536,131072}
TORCH_PREFILL_LENS=${TORCH_PREFILL_LENS-$PREFILL_LENS}
TORCH_RUNS=${TORCH_RUNS-${TORCH_PREFILL_LENS:+32,8,128:$TORCH_PREFILL_LENS}}
GEOMETRY=${GEOMETRY:-32/8/128}
DENSE_MAX=${DENSE_MAX:-1048576}
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

run_test() {  # name [args...]
  local t=$1; shift
  [ -x "$BIN/$t" ] || { echo "$t: not packed, skipped"; return; }
  timeout ${TEST_TIMEOUT:-90} "$BIN/$t" "$@" > "$OUT/$t.log" 2>&1; local rc=$?
  grep -E "FAILED|Failure|error|Expected|Which is" "$OUT/$t.log" | head -30
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran" "$OUT/$t.log"
  [ $rc = 0 ] || { echo "$t FAILED (rc=$rc)"; status=1; }
}
if [ "${TESTS:-1}" = 1 ]; then
  echo "== tests"
  for t in ${TEST_BINS-test_hip_gpu test_hip_gpu_method test_kv_offload test_cuda test_minference_index}; do run_test $t; done
  grep -h "  sparse hip-2-key" "$OUT/test_cuda.log" 2>/dev/null
  grep -h "^\[hip " "$OUT/test_hip_gpu.log" 2>/dev/null
fi
if [ "${TESTS:-1}" = 1 ] && [ "${SANITIZE:-1}" = 1 ]; then
  echo "== compute-sanitizer memcheck (test_hip_gpu ${MEMCHECK_FILTER:-*}; test_cuda SparseAttnSmall.Hip*)"
  timeout ${MEMCHECK_TIMEOUT:-90} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_hip_gpu" \
    --gtest_filter="${MEMCHECK_FILTER:-*}" > "$OUT/memcheck.log" 2>&1; rc=$?
  tail -3 "$OUT/memcheck.log"
  [ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; status=1; }
  if [ -x "$BIN/test_cuda" ]; then
    timeout ${MEMCHECK_TIMEOUT:-90} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_cuda" \
      --gtest_filter='SparseAttnSmall.Hip*' > "$OUT/memcheck_sparse.log" 2>&1; rc=$?
    tail -3 "$OUT/memcheck_sparse.log"
    [ $rc = 0 ] || { echo "MEMCHECK (sparse) FAILED (rc=$rc)"; status=1; }
  fi
fi

if [ -n "$DECODE_LENS$PREFILL_LENS" ]; then
  echo "== longctx_bench_hip ($GEOMETRY; decode: ${DECODE_LENS:-none}; prefill: ${PREFILL_LENS:-none}; dense to $DENSE_MAX)"
  timeout ${BENCH_TIMEOUT:-150} "$BIN/longctx_bench_hip" --lens "$DECODE_LENS" --prefill "$PREFILL_LENS" \
    --geometry "$GEOMETRY" --dense-max "$DENSE_MAX" --json "$OUT/bench_hip.json" > /dev/null 2> "$OUT/bench_hip.log"; rc=$?
  cat "$OUT/bench_hip.log"
  [ $rc = 0 ] || { echo "HIP BENCH FAILED (rc=$rc)"; status=1; }
fi

for run in $TORCH_RUNS; do
  shape=${run%%:*} lens=${run#*:} tag=$(echo "$shape" | tr , -)
  echo "== torch SDPA baseline ($shape; prefill: $lens)"
  timeout ${TORCH_TIMEOUT:-120} python3 "$TORCH_SCRIPT" --shape "$shape" --prefill "$lens" --decode "${TORCH_DECODE_LENS-}" \
    --backends "${TORCH_BACKENDS:-cudnn,flash}" --json "$OUT/bench_torch_$tag.json" > /dev/null 2> "$OUT/torch_$tag.log"; rc=$?
  cat "$OUT/torch_$tag.log"
  [ $rc = 0 ] || { echo "TORCH BASELINE ($shape) FAILED (rc=$rc)"; status=1; }
done

if [ "${MODEL:-0}" = 1 ] && [ -x "$BIN/longctx" ]; then
  for attn in dense hip; do
    echo "== bench model: llama3-8b geometry (random weights), --attn $attn, ${MODEL_LENGTHS:-128k}"
    timeout ${MODEL_TIMEOUT:-100} "$BIN/longctx" bench model --device cuda --random-weights llama3-8b --attn $attn \
      --lengths "${MODEL_LENGTHS:-128k}" --decode 32 --json "$OUT/bench_model_$attn.json" > "$OUT/bench_model_$attn.log" 2>&1; rc=$?
    tail -15 "$OUT/bench_model_$attn.log"
    [ $rc = 0 ] || { echo "MODEL BENCH ($attn) FAILED (rc=$rc)"; status=1; }
  done
fi
exit $status
