#!/usr/bin/env bash
# gpu-ihip-rank-tc.sh: one device call for InfiniteHiP rank=local on the tensor-core prefill
# scorers (issue 15): the GPU tests (test_ihip_gpu: the rank=local cases first, then the rest;
# test_ihip_gpu_method), compute-sanitizer memcheck of the new tensor-core
# rank=local cases, then the prefill A/B of a 32K chunk after 128K and 1M keys (3K preset,
# --prefill-skip-dense): main's bench binary (longctx_bench_infinitehip_main, the paper's rule) beside
# the branch's with --rank paper / local on the tensor cores and --rank local on the fp32 FMA
# scorer (forced: --prefill-scorer fma, relative RoPE), at Llama-3-8B's 32 / 8 / 128 heads and the
# default model's 9 / 3 / 64, relative RoPE (the engine's rope=on) and RoPE none; a second round
# of the Llama relative trio last.
# Each step has a timeout and is skipped when it would pass BUDGET seconds (default 380); logs and
# JSON go to /tmp/irtc-out, tarred into $OUT/results.tgz after every step.
# Pack (here): nice ninja -C build -j2 tests/cuda/test_ihip_gpu tests/cuda/test_ihip_gpu_method
#   bench/longctx_bench_infinitehip; into C = /work/main/.carry/ihip-rank-tc: bins.tar.xz (those
#   three stripped + main's build/bench/longctx_bench_infinitehip as longctx_bench_infinitehip_main),
#   with lib/ inside (scripts/gpu-carry.sh carry_libs), commit.txt, this script.
# Run on the device: OUT=... bash .carry/ihip-rank-tc/gpu-ihip-rank-tc.sh
set -uo pipefail
FINAL=${OUT:-out}; mkdir -p "$FINAL"; OUT=/tmp/irtc-out; rm -rf $OUT; mkdir -p $OUT
C=$(dirname "$0"); B=/tmp/irtc; rm -rf $B; mkdir -p $B && tar -C $B -xJf "$C/bins.tar.xz"
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
log() { echo "== $* ($(date -u +%T), ${SECONDS}s)" | tee -a "$OUT/steps.log"; }
step() { local name=$1 t=$2; shift 2; log "$name";
  if [ $((SECONDS + t)) -gt ${BUDGET:-380} ]; then echo "$name skipped (time)" | tee -a "$OUT/steps.log"; return; fi
  timeout $t "$@" > "$OUT/$name.log" 2>&1; local rc=$?;
  echo "$name rc=$rc" | tee -a "$OUT/steps.log"; tail -${TAILN:-6} "$OUT/$name.log"; tar -C $OUT -czf "$FINAL/results.tgz" .; }
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv; cat "$C/commit.txt"; date -u; } > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
TAILN=4 step test_rank_local 90 $B/test_ihip_gpu --gtest_filter='IhipGpuRankLocal.*'
TAILN=4 step test_ihip_gpu 90 $B/test_ihip_gpu --gtest_filter='-IhipGpuRankLocal.*'
TAILN=3 step test_ihip_gpu_method 60 $B/test_ihip_gpu_method
TAILN=3 step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_ihip_gpu \
  --gtest_filter='IhipGpuRankLocal.TensorCore*'
bench() { local name=$1 bin=$2; shift 2; TAILN=2 step $name ${T:-25} $B/$bin --lens "" --prefix 131072,1048576 --chunk 32768 \
  --prefill-skip-dense --json "$OUT/$name.json" "$@"; }
M=longctx_bench_infinitehip_main; N=longctx_bench_infinitehip
for shape in 32,8,128 9,3,64; do
  s=${shape//,/_}
  bench rel_main_$s $M --prefill-shape $shape --prefill-rope relative
  bench rel_paper_$s $N --prefill-shape $shape --prefill-rope relative --rank paper
  bench rel_local_$s $N --prefill-shape $shape --prefill-rope relative --rank local
  T=45 bench rel_local_fma_$s $N --prefill-shape $shape --prefill-rope relative --rank local --prefill-scorer fma
  bench none_main_$s $M --prefill-shape $shape
  bench none_paper_$s $N --prefill-shape $shape --rank paper
  bench none_local_$s $N --prefill-shape $shape --rank local
done
bench none_local_sync_32_8_128 $N --prefill-shape 32,8,128 --rank local --prefill-scorer mma-sync
bench none_paper_sync_32_8_128 $N --prefill-shape 32,8,128 --rank paper --prefill-scorer mma-sync
bench rel_main_32_8_128_r2 $M --prefill-shape 32,8,128 --prefill-rope relative
bench rel_paper_32_8_128_r2 $N --prefill-shape 32,8,128 --prefill-rope relative --rank paper
bench rel_local_32_8_128_r2 $N --prefill-shape 32,8,128 --prefill-rope relative --rank local
ls -la $OUT $FINAL
