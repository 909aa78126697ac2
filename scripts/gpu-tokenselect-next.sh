#!/usr/bin/env bash
# gpu-tokenselect-next.sh: the device-machine run of TokenSelect's next levers toward issue 16's
# 25x prefill chunk at 1M, its GPU engine on the fp8 KV cache, and head_dim 256 (issue 19).
#
# What: (1) test_cuda TokenSelect* + TopKSelect* (paged_dot at d 256, fp16 scores and their fused
# stats, the soft vote over fp16 scores; the existing selection kernels), (2) test_tokenselect_step
# (the GPU step vs the CPU method: d 256, the fp8 pool vs the dequantized pool, fp16 scores with
# their overlap with fp32's printed), (3) test_gpu GpuTokenSelect* (the GPU model: the fp8 cache
# vs the bf16 cache, the registry at d 256, the earlier model tests), (4) longctx_bench_tokenselect:
# one 512-token chunk after 128K / 512K / 1M keys split by stage for bf16 keys, fp8 keys, the fp8
# cache, each with fp32 and fp16 scores, against our dense chunk, and the d 256 chunk at 128K,
# (5) torch SDPA (cuDNN, flash) dense chunks on both geometries (bench/torch_baseline.py), (6)
# compute-sanitizer memcheck on the new kernels' tests. Logs and JSON in $OUT.
# Build here (no GPU needed), then pack into the lead's checkout's carry folder:
#   cmake --build build-gpu -j2 --target test_cuda test_tokenselect_step test_gpu longctx_bench_tokenselect
#   bash scripts/gpu-tokenselect-next.sh --pack build-gpu /work/main/.carry/ts-gpu
# Run on the device: OUT=$OUT BIN=.carry/ts-gpu bash .carry/ts-gpu/gpu-tokenselect-next.sh
# (env: STEPS picks steps; the step limits add up to under 240 s)
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
BINS="tests/cuda/test_cuda tests/cuda/test_tokenselect_step tests/gpu/test_gpu bench/longctx_bench_tokenselect"
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/ts-next-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp"
  for b in $BINS; do cp "$build/$b" "$tmp/"; done
  strip "$tmp"/*
  cp bench/torch_baseline.py "$tmp/"
  carry_libs "$tmp/lib" "$tmp/test_cuda" "$tmp/test_tokenselect_step" "$tmp/test_gpu" "$tmp/longctx_bench_tokenselect"
  (cd "$tmp" && tar -cJf "$carry/bin.tar.xz" .)  # compressed: OpenBLAS alone is 36 MB
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/ts-gpu}
STEPS=${STEPS:-tests tests_step tests_model bench torch memcheck}
X=/tmp/ts-next-bin
mkdir -p "$OUT"
unpack_bin "$BIN/bin.tar.xz" "$X"
status=0
record_env "$OUT/env.txt" "${GIT_COMMIT:-unknown}"

# step (gpu-carry.sh): output in $OUT/NAME.log; after each step the lines that matter, and a
# failure reported without stopping.
STEP_SUMMARY=/dev/null
step_show() {
  grep -E "FAILED|Failure|Expected|Which is|error|ERROR SUMMARY|^\[  (PASSED|SKIPPED)|\[ f16|\[fp8\]|N=|^(chunk|copy)" \
    "$OUT/$1.log" | head -60
  [ "$2" = 0 ] || echo "$1 FAILED (rc=$2)"
}

has() { [[ " $STEPS " == *" $1 "* ]]; }
has tests && step tests 60 "$X/test_cuda" --gtest_filter='TokenSelect*:TopKSelect*'
has tests_step && step tests_step 35 "$X/test_tokenselect_step"
has tests_model && step tests_model 45 "$X/test_gpu" --gtest_filter='GpuTokenSelect*'
has bench && step bench 40 "$X/longctx_bench_tokenselect" --lens "" --hit-rates "" \
  --chunk-lens 131072,524288,1048576 --d256-lens 131072 --json "$OUT/bench_tokenselect.json"
has torch && step torch 30 bash -c "python3 $X/torch_baseline.py --prefill '' --decode '' --chunk 512 \
  --chunk-lens 131072,524288,1048576 --json $OUT/bench_torch.json && python3 $X/torch_baseline.py --prefill '' \
  --decode '' --chunk 512 --chunk-lens 131072 --shape 4,1,256 --json $OUT/bench_torch_d256.json"
has memcheck && step memcheck 20 bash -c "compute-sanitizer --tool memcheck --error-exitcode 99 $X/test_cuda \
  --gtest_filter='TokenSelectF16Scores.PagedDot*' && compute-sanitizer --tool memcheck --error-exitcode 99 \
  $X/test_tokenselect_step --gtest_filter='TokenSelectCompactKv*'"
exit $status
