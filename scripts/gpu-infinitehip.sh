#!/usr/bin/env bash
# gpu-infinitehip.sh: the device-machine run of InfiniteHiP: GPU tests, memcheck, benchmarks beside
# torch SDPA, the engine end to end.
#
# Steps (STEPS, space-separated; default all):
#   tests    test_ihip_gpu (decode and prefill pruning stages bit-equal to the CPU reference in
#            every RoPE mode (prefill RoPE none on tensor cores: exact-dot inputs, and fp64-judged
#            on random ones), the decode / prefill indices, sparse attention over the prefill index
#            vs fp64 dense with the same mask) and test_ihip_gpu_method (the GpuMethod's index vs
#            the CPU method's key sets; what the GPU refuses)
#   memcheck compute-sanitizer memcheck on the small cases
#   decode   longctx_bench_infinitehip decode step types at 128K and 1M vs our dense decode
#   prefill  longctx_bench_infinitehip: a 32K chunk after 128K / 512K / 1M keys vs our dense
#            prefill, and torch SDPA (cuDNN, flash) on the same chunk shapes (bench/torch_baseline.py)
#   engine   test_gpu GpuInfiniteHip* (GPU model vs CPU model, tiny random model) and
#            `longctx bench model --random-weights llama3-8b --lengths 128k`, dense vs
#            prefill:infinitehip=rope=off (32K chunks)
# Logs and JSON land in $OUT/results.tar.gz (and summary.txt).
# Build here (no GPU needed), then pack:
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpu -j2 test_ihip_gpu test_ihip_gpu_method longctx_bench_infinitehip test_gpu longctx
#   scripts/gpu-infinitehip.sh --pack build-gpu /work/main/.carry/ihip-gpu
# Run on the device: STEPS="tests prefill" OUT=/tmp/out BIN=.carry/ihip-gpu bash .carry/ihip-gpu/gpu-infinitehip.sh
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/gpu-ihip-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/lib"
  for f in tests/cuda/test_ihip_gpu tests/cuda/test_ihip_gpu_method bench/longctx_bench_infinitehip tests/gpu/test_gpu \
           src/cli/longctx; do
    [ -x "$build/$f" ] && cp "$build/$f" "$tmp/" && strip "$tmp/$(basename "$f")"  # absent: that step fails there
  done
  carry_libs "$tmp/lib" $(ls "$tmp"/test_ihip_gpu_method "$tmp"/test_gpu "$tmp"/longctx 2>/dev/null)
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$carry/"
  cp "$(dirname "$0")/../bench/torch_baseline.py" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${BIN:-.carry/ihip-gpu}
STEPS=${STEPS:-tests memcheck decode prefill engine}
B=/tmp/ihip-bin
mkdir -p "$OUT" "$B"
unpack_bin "$CARRY/bin.tar.xz" "$B"
record_env "$OUT/env.txt" "${GIT_COMMIT:-unknown}"
status=0
# step (gpu-carry.sh): output in $OUT/NAME.log, one summary line.
gtest_summary() { grep -E "Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED)|tests ran|^\[ gpu" "$OUT/$1.log" | head -30; }

for s in $STEPS; do
  case $s in
    tests)
      step test_ihip_gpu 120 "$B/test_ihip_gpu" --gtest_filter="${IHIP_FILTER:-*}"; gtest_summary test_ihip_gpu
      step test_ihip_gpu_method 60 "$B/test_ihip_gpu_method"; gtest_summary test_ihip_gpu_method ;;
    memcheck)
      step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu" \
        --gtest_filter='IhipGpu.Ties*:IhipGpuPrefill.ChunkAtTheStart*:IhipGpuPrefill.WideGroups*:IhipGpuPrefill.TensorCore*'
      tail -3 "$OUT/memcheck.log" ;;
    decode)
      step bench_decode 60 "$B/longctx_bench_infinitehip" --json "$OUT/bench_decode.json"; cat "$OUT/bench_decode.log" ;;
    prefill)
      step bench_prefill 100 "$B/longctx_bench_infinitehip" --lens "" --prefix 131072,524288,1048576 --chunk 32768 \
        --json "$OUT/bench_prefill.json"
      grep -v "^{" "$OUT/bench_prefill.log" | grep -v '^ *"' | head -20
      step torch_chunk 100 python3 "$CARRY/torch_baseline.py" --prefill "" --decode "" --chunk 32768 \
        --chunk-lens 163840,557056,1081344 --json "$OUT/torch_chunk.json"
      grep "^chunk" "$OUT/torch_chunk.log" ;;
    engine)
      step test_gpu_ihip 90 "$B/test_gpu" --gtest_filter='GpuInfiniteHip*'; gtest_summary test_gpu_ihip
      for attn in dense 'prefill:infinitehip=rope=off'; do
        name=e2e_$(echo "$attn" | tr -c 'a-z0-9' '_')
        step "$name" 150 "$B/longctx" bench model --device cuda --random-weights llama3-8b --lengths 128k --decode 32 \
          --gpu-chunk 32768 --attn "$attn" --json "$OUT/$name.json"
        tail -4 "$OUT/$name.log"
      done ;;
  esac
done
# One archive: the device call returns a limited number of files.
tar -C "$OUT" -czf /tmp/ihip-results.tar.gz . && find "$OUT" -type f ! -name summary.txt -delete && mv /tmp/ihip-results.tar.gz "$OUT/"
exit $status
