#!/usr/bin/env bash
# gpu-tokenselect.sh: the device-machine run of TokenSelect's GPU kernels: tests, memcheck, bench.
#
# What: (1) the TokenSelect kernel tests (test_cuda TokenSelect*: paged dot product, soft vote,
# top-k, the whole selection vs fp64 / brute force) and the GPU step against the CPU method
# (test_tokenselect_step: compaction, selection query, key sets, compacted attention),
# (2) compute-sanitizer memcheck on them, (3) longctx_bench_tokenselect (one layer, Llama-3-8B
# geometry: the decode step at 128K and 1M, and a 512-token prefill chunk after 128K, 512K and 1M
# keys, by stages, against our dense kernels), (4) torch SDPA (cuDNN and flash) dense decode and
# dense prefill chunks on the same shapes (bench/torch_baseline.py). Logs and JSON land in $OUT.
# Build here (no GPU needed), then pack the binaries and the shared libraries they need:
#   ninja -C build test_cuda test_tokenselect_step longctx_bench_tokenselect
#   bash scripts/gpu-tokenselect.sh --pack build .carry/tokenselect
# Run on the device: OUT=$OUT BIN=.carry/tokenselect bash .carry/tokenselect/gpu-tokenselect.sh
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3
  rm -rf "$carry" && mkdir -p "$carry/lib"
  cp "$build/tests/cuda/test_cuda" "$build/tests/cuda/test_tokenselect_step" "$carry/"
  cp "$build/bench/longctx_bench_tokenselect" "$carry/bench_tokenselect"
  cp bench/torch_baseline.py "$0" "$carry/"
  strip "$carry"/test_* "$carry/bench_tokenselect"
  source "$(dirname "$0")/gpu-carry.sh"
  carry_libs "$carry/lib" "$carry/test_tokenselect_step" "$carry/bench_tokenselect"
  # OpenBLAS alone is ~36 MB: carry one xz archive (the device run unpacks it) under the limit.
  tar -C "$carry" -cJf "$carry.tar.xz" . && rm -rf "$carry" && mkdir -p "$carry" && mv "$carry.tar.xz" "$carry/bin.tar.xz"
  cp "$0" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/tokenselect}
if [ -f "$BIN/bin.tar.xz" ]; then
  mkdir -p /tmp/tokenselect-bin && tar -xJf "$BIN/bin.tar.xz" -C /tmp/tokenselect-bin && BIN=/tmp/tokenselect-bin
fi
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step() {  # step NAME TIMEOUT CMD...: run, keep the log, report failure without stopping
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  grep -E "FAILED|Failure|error|ERROR SUMMARY|^\[  (PASSED|SKIPPED)" "$OUT/$name.log" | head -30
  [ $rc = 0 ] || { echo "$name FAILED (rc=$rc)"; status=1; }
}

step tests 120 "$BIN/test_cuda" --gtest_filter='TokenSelect*'
step tests_step 120 "$BIN/test_tokenselect_step"
step memcheck 180 compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_tokenselect_step"
step bench 120 "$BIN/bench_tokenselect" --json "$OUT/bench_tokenselect.json"
grep -E "^N=|^chunk" "$OUT/bench.log"
step torch 150 python3 "$BIN/torch_baseline.py" --prefill "" --decode 131072,1048576 \
  --chunk 512 --chunk-lens 131072,524288,1048576 --json "$OUT/bench_torch.json"
grep -E "^(decode|chunk|copy)" "$OUT/torch.log"
exit $status
