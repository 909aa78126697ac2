#!/usr/bin/env bash
# gpu-tokenselect-fp8.sh: the device-machine run of TokenSelect's fp8-key scoring and the soft
# vote's stats fused into the scan (issue 16: the 25x prefill-chunk target at 1M, decode vs theta).
#
# What: (1) test_cuda TokenSelect* + TopKSelect* (the fp8 paged dot product vs fp64 over the
# dequantized keys, the fused per-head max / sum, the fp8 pipeline's top-k vs fp64; the existing
# selection kernels), (2) test_tokenselect_step (the GPU step vs the CPU method, now with the fused
# stats), (3) longctx_bench_tokenselect: decode rows at 128K / 1M (bf16 and fp8 scoring, fused vs
# two-pass soft vote), one 512-token chunk after 128K / 512K / 1M keys split by stage with bf16
# and fp8 keys, against our dense chunk; decode per token vs the selection cache's hit rate;
# (4) torch SDPA (cuDNN, flash) dense chunks and decode on the same shapes (bench/torch_baseline.py),
# (5) compute-sanitizer memcheck on the fp8 / fused-stats tests. Logs and JSON in $OUT.
# Build here (no GPU needed), then pack into the lead's checkout's carry folder:
#   cmake --build build -j2 --target test_cuda test_tokenselect_step longctx_bench_tokenselect
#   bash scripts/gpu-tokenselect-fp8.sh --pack build /work/main/.carry/ts-fp8
# Run on the device: OUT=$OUT BIN=.carry/ts-fp8 bash .carry/ts-fp8/gpu-tokenselect-fp8.sh
# (env: STEPS picks steps)
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
BINS="tests/cuda/test_cuda tests/cuda/test_tokenselect_step bench/longctx_bench_tokenselect"
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/ts-fp8-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp"
  for b in $BINS; do cp "$build/$b" "$tmp/"; done
  strip "$tmp"/*
  cp bench/torch_baseline.py "$tmp/"
  carry_libs "$tmp/lib" "$tmp/test_cuda" "$tmp/test_tokenselect_step" "$tmp/longctx_bench_tokenselect"
  (cd "$tmp" && tar -cJf "$carry/bin.tar.xz" .)  # compressed: OpenBLAS alone is 36 MB
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/ts-fp8}
STEPS=${STEPS:-tests tests_step bench torch memcheck}
X=/tmp/ts-fp8-bin
mkdir -p "$OUT"
unpack_bin "$BIN/bin.tar.xz" "$X"
status=0
record_env "$OUT/env.txt" "${GIT_COMMIT:-unknown}"

# step (gpu-carry.sh): output in $OUT/NAME.log; after each step the lines that matter, and a
# failure reported without stopping.
STEP_SUMMARY=/dev/null
step_show() {
  grep -E "FAILED|Failure|Expected|Which is|error|ERROR SUMMARY|^\[  (PASSED|SKIPPED)|N=|^(decode|chunk|copy)" \
    "$OUT/$1.log" | head -60
  [ "$2" = 0 ] || echo "$1 FAILED (rc=$2)"
}

has() { [[ " $STEPS " == *" $1 "* ]]; }
has tests && step tests 45 "$X/test_cuda" --gtest_filter='TokenSelect*:TopKSelect*'
has tests_step && step tests_step 30 "$X/test_tokenselect_step"
has bench && step bench 110 "$X/longctx_bench_tokenselect" --json "$OUT/bench_tokenselect.json"
has torch && step torch 70 python3 "$X/torch_baseline.py" --prefill "" --decode 131072,1048576 \
  --chunk 512 --chunk-lens 131072,524288,1048576 --json "$OUT/bench_torch.json"
has memcheck && step memcheck 30 compute-sanitizer --tool memcheck --error-exitcode 99 "$X/test_cuda" \
  --gtest_filter='TokenSelectFp8PagedDot*:TokenSelectDeviceCounts*'
exit $status
