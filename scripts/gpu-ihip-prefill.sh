#!/usr/bin/env bash
# gpu-ihip-prefill.sh: one device call for InfiniteHiP's prefill scoring (issue 15's 32K chunk after
# 1M keys): the prefill tests and memcheck, then longctx_bench_infinitehip of a base build and of
# this branch interleaved, then torch SDPA (cuDNN, flash) on the same chunk shapes, all within one
# deadline (the device call's limit) so every step leaves its log.
#
# Phases (each step's rc and seconds in $OUT/summary.txt; logs and JSON in $OUT/results.tar.gz):
#   1. in parallel (CPU-bound oracles, no timing): test_ihip_gpu IhipGpuPrefill.*,
#      test_ihip_gpu_method, compute-sanitizer memcheck on the tensor-core and small prefill cases
#      (not the 640-pair group loop: its kernels are the pipeline test's, which memcheck runs)
#   2. serial (timed): bench base / ours at --prefix 131072,524288,1048576 --chunk 32768,
#      torch_baseline.py --chunk 32768 --chunk-lens 163840,557056,1081344 (the same prefix + chunk
#      key counts), then base / ours again at 1M only, then ours with --prefill-scorer mma-sync at
#      1M (RoPE none's mma.sync scorer instead of wgmma: the A/B inside one binary) and at head_dim
#      64 (--prefill-shape 9,3,64: SmolLM2's heads) with each scorer (the first steps cut by the
#      deadline), then ncu on ours' stage-1 score launch at 1M if time is left
# MODE=ab instead (one kernel change's call): the tensor-core and Llama-3 prefill tests,
# test_ihip_gpu_method and memcheck of Llama3HeadsFillOneQueryTile in parallel, then base / ours
# at 1M, torch cuDNN at 1M + 32K, base / ours at 1M again, base / ours at 128K and 512K, and ncu
# of ours' stage-1 launch, the last ones as the deadline allows.
# MODE=pipe instead (ihip-stage1d: the pipelined scorer without the L2 prefetch, with fewer
# instructions a pass): the tensor-core and Llama-3 prefill tests and the method tests, memcheck of
# the prefetch-equality and Llama-3 cases, then two interleaved rounds at 1M of base, ours and ours
# with --prefill-prefetch on (--prefill-skip-dense), torch cuDNN at 1M + 32K after the first round,
# base / ours at 128K and 512K and at head_dim 64 (--prefill-shape 9,3,64), then ncu (memory,
# compute, warp states, scheduler; raw stall and traffic metrics in ncu_*_raw.txt) of ours' stage-1
# launch.
# MODE=profile instead (a first look at a kernel change): base / ours at 1M, the prefill tests,
# then ncu (scheduler, warp states, source counters, occupancy) on one launch of the stage-1 score
# kernel at 1M of each build (the first score launch: the warm-up's stage 1), reports and their
# text in the archive.
# Build here (no GPU needed), then pack (BASE_BENCH: longctx_bench_infinitehip built from main):
#   ninja -C build-gpu -j2 test_ihip_gpu test_ihip_gpu_method longctx_bench_infinitehip
#   scripts/gpu-ihip-prefill.sh --pack build-gpu BASE_BENCH /work/main/.carry/ihip-prefill3
# Run on the device: OUT=/tmp/out bash .carry/ihip-prefill3/gpu-ihip-prefill.sh
set -uo pipefail
source "$(dirname "$0")/gpu-carry.sh"  # carry_libs, record_env, step
if [ "${1:-}" = "--pack" ]; then
  build=$2 base=$3 carry=$4 tmp=/tmp/gpu-ihip-prefill-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/lib"
  for f in tests/cuda/test_ihip_gpu tests/cuda/test_ihip_gpu_method bench/longctx_bench_infinitehip; do
    cp "$build/$f" "$tmp/" && strip "$tmp/$(basename "$f")" || exit 1
  done
  cp "$base" "$tmp/bench_base" && strip "$tmp/bench_base" || exit 1
  carry_libs "$tmp/lib" "$tmp"/test_ihip_gpu* "$tmp"/longctx_bench_infinitehip "$tmp/bench_base"
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" .
  cp "$0" "$(dirname "$0")/gpu-carry.sh" "$carry/"
  cp "$(dirname "$0")/../bench/torch_baseline.py" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
CARRY=${CARRY:-.carry/ihip-prefill3}
DEADLINE_S=${DEADLINE_S:-228}  # seconds from start by which every step has ended (call limit 240)
B=/tmp/ihip-prefill-bin
T0=$(date +%s)
mkdir -p "$OUT" "$B"
unpack_bin "$CARRY/bin.tar.xz" "$B"
record_env "$OUT/env.txt" "${GIT_COMMIT:-see the branch}"
# step (gpu-carry.sh): output in $OUT/NAME.log, each limit cut to what is left of DEADLINE_S.
STEP_BUDGET_S=$DEADLINE_S STEP_T0=$T0 STEP_MIN_S=3
gtest_summary() {
  grep -E "Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED)|tests ran|^\[ihip" "$OUT/$1.log" | head -20
}

# ncu_stage1 WHO LIMIT: hardware counters of one stage-1 score launch at 1M (ours or base).
ncu_stage1() {
  local bin=$B/longctx_bench_infinitehip; [ "$1" = base ] && bin=$B/bench_base
  if [ $(( DEADLINE_S - ($(date +%s) - T0) )) -lt 30 ]; then echo "== ncu_$1 not run (under 30 s left)"; return; fi
  step "ncu_$1" "$2" ncu --clock-control none --kernel-name regex:score_kernel --launch-count 1 \
    --section SchedulerStats --section WarpStateStats --section SourceCounters --section Occupancy \
    --section LaunchStats -o "$OUT/ncu_$1" "$bin" --lens "" --prefix 1048576 --chunk 32768 || return
  timeout 20 ncu --import "$OUT/ncu_$1.ncu-rep" --page details > "$OUT/ncu_$1.txt" 2>&1
  grep -E "Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued|cycles being" \
    "$OUT/ncu_$1.txt" | head -12
}

# ncu_pipe NAME LIMIT BENCH_ARGS..: ncu_stage1's launch with the memory and compute sections too;
# the details page and the raw stall / traffic / pipe metrics as text.
ncu_pipe() {
  local name=$1 limit=$2; shift 2
  if [ $(( DEADLINE_S - ($(date +%s) - T0) )) -lt 30 ]; then echo "== ncu_$name not run (under 30 s left)"; return; fi
  step "ncu_$name" "$limit" ncu --clock-control none --kernel-name regex:score_kernel --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats \
    -o "$OUT/ncu_$name" "$B/longctx_bench_infinitehip" --lens "" --prefix 1048576 --chunk 32768 \
    --prefill-skip-dense "$@" || return
  timeout 20 ncu --import "$OUT/ncu_$name.ncu-rep" --page details > "$OUT/ncu_$name.txt" 2>&1
  timeout 20 ncu --import "$OUT/ncu_$name.ncu-rep" --page raw > "$OUT/ncu_${name}_raw.txt" 2>&1
  grep -E "Duration|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued|Memory Throughput|DRAM Throughput|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Compute \(SM\)" \
    "$OUT/ncu_$name.txt" | head -24
  grep -E "dram__bytes_read.sum |lts__t_bytes.sum |lts__t_sector_hit_rate.pct |sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active |sm__inst_executed_pipe_tensor|smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio " \
    "$OUT/ncu_${name}_raw.txt" | awk '$NF+0 > 0.05 || /dram|lts|tensor/' | head -40
}

if [ "${MODE:-full}" = pipe ]; then
  bench_line() { grep "^prefill" "$OUT/$1.log"; }
  step test_ihip_gpu 150 "$B/test_ihip_gpu" --gtest_filter='IhipGpuPrefill.TensorCore*:IhipGpuPrefill.Llama3*' &
  step test_ihip_gpu_method 60 "$B/test_ihip_gpu_method" &
  step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu" \
    --gtest_filter='IhipGpuPrefill.TensorCorePipelineWithL2PrefetchEqualsWithout:IhipGpuPrefill.Llama3HeadsFillOneQueryTile' &
  wait
  gtest_summary test_ihip_gpu; gtest_summary test_ihip_gpu_method; tail -3 "$OUT/memcheck.log"
  one_m=(--lens "" --prefix 1048576 --chunk 32768)
  for r in 1 2; do
    step "bench_base_1m_$r" 30 "$B/bench_base" "${one_m[@]}" --json "$OUT/bench_base_1m_$r.json"
    bench_line "bench_base_1m_$r"
    step "bench_ours_1m_$r" 30 "$B/longctx_bench_infinitehip" "${one_m[@]}" --json "$OUT/bench_ours_1m_$r.json"
    bench_line "bench_ours_1m_$r"
    step "bench_ours_pf_1m_$r" 20 "$B/longctx_bench_infinitehip" "${one_m[@]}" --prefill-skip-dense \
      --prefill-prefetch on --json "$OUT/bench_ours_pf_1m_$r.json"; bench_line "bench_ours_pf_1m_$r"
    [ $r = 1 ] || continue
    step torch_chunk 60 python3 "$CARRY/torch_baseline.py" --prefill "" --decode "" --chunk 32768 \
      --chunk-lens 1081344 --backends cudnn --json "$OUT/torch_chunk.json"
    grep "^chunk" "$OUT/torch_chunk.log"
  done
  for who in base ours; do
    bin=$B/longctx_bench_infinitehip; [ $who = base ] && bin=$B/bench_base
    step "bench_${who}_short" 30 "$bin" --lens "" --prefix 131072,524288 --chunk 32768 \
      --json "$OUT/bench_${who}_short.json"; bench_line "bench_${who}_short"
    step "bench_${who}_d64" 30 "$bin" "${one_m[@]}" --prefill-shape 9,3,64 \
      --json "$OUT/bench_${who}_d64.json"; bench_line "bench_${who}_d64"
  done
  ncu_pipe ours 45
  echo "total $(( $(date +%s) - T0 ))s" | tee -a "$OUT/summary.txt"
  tar -C "$OUT" -czf /tmp/ihip-prefill-results.tar.gz . && find "$OUT" -type f ! -name summary.txt -delete &&
    mv /tmp/ihip-prefill-results.tar.gz "$OUT/"
  grep -q "rc=[^0]" "$OUT/summary.txt" && exit 1
  exit 0
fi
if [ "${MODE:-full}" = ab ]; then
  bench_line() { grep "^prefill" "$OUT/$1.log"; }
  step test_ihip_gpu 100 "$B/test_ihip_gpu" --gtest_filter='IhipGpuPrefill.TensorCore*:IhipGpuPrefill.Llama3*' &
  step test_ihip_gpu_method 60 "$B/test_ihip_gpu_method" &
  step memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu" \
    --gtest_filter='IhipGpuPrefill.Llama3HeadsFillOneQueryTile' &
  wait
  gtest_summary test_ihip_gpu; gtest_summary test_ihip_gpu_method; tail -3 "$OUT/memcheck.log"
  for r in 1 2; do
    for who in base ours; do
      bin=$B/longctx_bench_infinitehip; [ $who = base ] && bin=$B/bench_base
      step "bench_${who}_1m_$r" 25 "$bin" --lens "" --prefix 1048576 --chunk 32768 \
        --json "$OUT/bench_${who}_1m_$r.json"; bench_line "bench_${who}_1m_$r"
    done
    [ $r = 1 ] || continue
    step torch_chunk 60 python3 "$CARRY/torch_baseline.py" --prefill "" --decode "" --chunk 32768 \
      --chunk-lens 1081344 --backends cudnn --json "$OUT/torch_chunk.json"
    grep "^chunk" "$OUT/torch_chunk.log"
  done
  for who in base ours; do
    bin=$B/longctx_bench_infinitehip; [ $who = base ] && bin=$B/bench_base
    step "bench_${who}_short" 30 "$bin" --lens "" --prefix 131072,524288 --chunk 32768 \
      --json "$OUT/bench_${who}_short.json"; bench_line "bench_${who}_short"
  done
  ncu_stage1 ours 40
  echo "total $(( $(date +%s) - T0 ))s" | tee -a "$OUT/summary.txt"
  tar -C "$OUT" -czf /tmp/ihip-prefill-results.tar.gz . && find "$OUT" -type f ! -name summary.txt -delete &&
    mv /tmp/ihip-prefill-results.tar.gz "$OUT/"
  grep -q "rc=[^0]" "$OUT/summary.txt" && exit 1
  exit 0
fi
if [ "${MODE:-full}" = profile ]; then
  bench_line() { grep "^prefill" "$OUT/$1.log"; }
  step bench_base_1m 30 "$B/bench_base" --lens "" --prefix 1048576 --chunk 32768 --json "$OUT/bench_base_1m.json"
  bench_line bench_base_1m
  step bench_ours_1m 30 "$B/longctx_bench_infinitehip" --lens "" --prefix 1048576 --chunk 32768 \
    --json "$OUT/bench_ours_1m.json"; bench_line bench_ours_1m
  step test_ihip_gpu 70 "$B/test_ihip_gpu" --gtest_filter='IhipGpuPrefill.*'; gtest_summary test_ihip_gpu
  ncu_stage1 ours 50; ncu_stage1 base 50
  echo "total $(( $(date +%s) - T0 ))s" | tee -a "$OUT/summary.txt"
  tar -C "$OUT" -czf /tmp/ihip-prefill-results.tar.gz . && find "$OUT" -type f ! -name summary.txt -delete &&
    mv /tmp/ihip-prefill-results.tar.gz "$OUT/"
  exit 0
fi

# Phase 1: correctness, in parallel.
step test_ihip_gpu 100 "$B/test_ihip_gpu" --gtest_filter='IhipGpuPrefill.*' &
step test_ihip_gpu_method 60 "$B/test_ihip_gpu_method" &
step memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_ihip_gpu" \
  --gtest_filter='IhipGpuPrefill.TensorCore*:IhipGpuPrefill.Llama3Heads*:IhipGpuPrefill.ChunkAtTheStart*-*CtasLoopOverChunkGroups' &
wait
gtest_summary test_ihip_gpu; gtest_summary test_ihip_gpu_method; tail -3 "$OUT/memcheck.log"

# Phase 2: timings, one at a time.
bench_line() { grep "^prefill" "$OUT/$1.log"; }
step bench_base_1 40 "$B/bench_base" --lens "" --prefix 131072,524288,1048576 --chunk 32768 \
  --json "$OUT/bench_base_1.json"; bench_line bench_base_1
step bench_ours_1 40 "$B/longctx_bench_infinitehip" --lens "" --prefix 131072,524288,1048576 --chunk 32768 \
  --json "$OUT/bench_ours_1.json"; bench_line bench_ours_1
step torch_chunk 90 python3 "$CARRY/torch_baseline.py" --prefill "" --decode "" --chunk 32768 \
  --chunk-lens 163840,557056,1081344 --json "$OUT/torch_chunk.json"
grep "^chunk" "$OUT/torch_chunk.log"
step bench_base_2 25 "$B/bench_base" --lens "" --prefix 1048576 --chunk 32768 --json "$OUT/bench_base_2.json"
bench_line bench_base_2
step bench_ours_2 25 "$B/longctx_bench_infinitehip" --lens "" --prefix 1048576 --chunk 32768 \
  --json "$OUT/bench_ours_2.json"; bench_line bench_ours_2
step bench_ours_sync 25 "$B/longctx_bench_infinitehip" --lens "" --prefix 1048576 --chunk 32768 \
  --prefill-scorer mma-sync --json "$OUT/bench_ours_sync.json"; bench_line bench_ours_sync
for s in mma mma-sync; do
  step "bench_d64_$s" 20 "$B/longctx_bench_infinitehip" --lens "" --prefix 1048576 --chunk 32768 \
    --prefill-shape 9,3,64 --prefill-scorer $s --json "$OUT/bench_d64_$s.json"; bench_line "bench_d64_$s"
done
ncu_stage1 ours 40  # what limits the stage-1 kernel now (skipped when the deadline is near)
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$OUT/summary.txt"
# One archive: the device call returns a limited number of files.
tar -C "$OUT" -czf /tmp/ihip-prefill-results.tar.gz . && find "$OUT" -type f ! -name summary.txt -delete &&
  mv /tmp/ihip-prefill-results.tar.gz "$OUT/"
grep -q "rc=[^0]" "$OUT/summary.txt" && exit 1
exit 0
