#!/usr/bin/env bash
# gpu-hip-est7-ab.sh: the device calls for the estimator's leaner tensor-core score loop (issue 14:
# each branch's first sampled key written once where the branch is made, s.key0; the paper case's
# epilogue without per-item masks when every item is a key of the region; e4m3 widening without
# shifts, fp8vec::e4m3x4_to_f16x4, in every fp8 kernel). Measured against main's bench
# (longctx_bench_hip_main) in the same call.
#   PART=1: test_hip_gpu, memcheck on the estimator's prefill cases, four interleaved rounds main /
#           head at 128K (two also at 1M: estimate bf16 / fp8 and the sparse attention), the phase
#           clocks of both at 128K, ncu's instruction counts, tensor-pipe use and (head) per-instruction
#           stall samples of the fp8 kernels at 128K, torch
#           cuDNN causal at 128K (the 10x baseline of the same call).
#   PART=2: the other fp8 kernels' tests (test_cuda decode / sparse / TokenSelect, test_ihip_gpu,
#           test_sparse_window, test_gpu's fp8 tile cases).
# Pack (here): bash scripts/gpu-hip-est7-ab.sh --pack BUILD BINS_DIR C   (BINS_DIR: main's bench as
#   longctx_bench_hip_main and its phase-clock build as longctx_bench_hip_clocksmain)
# Run (device): OUT=$OUT PART=1 GIT_COMMIT=<sha> bash .carry/hip-est7/gpu-hip-est7-ab.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  build=$2 bins=$3 c=$4 tmp=/tmp/hip-est7-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c" "$tmp"
  cp "$build"/tests/cuda/{test_hip_gpu,test_cuda,test_ihip_gpu,test_sparse_window} "$build/tests/gpu/test_gpu" \
    "$build"/bench/{longctx_bench_hip,longctx_bench_hip_clocks} "$bins"/* "$tmp/"
  pack_ab "$tmp" "$c" "" "$0" bench/torch_baseline.py
  exit 0
fi
out_archive hip-est7-ab results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/hip-est7-bin "$OUT/logs" "${BUDGET:-560}"
B=/tmp/hip-est7-bin L=$OUT/logs
if [ "${PART:-1}" = 1 ]; then
  step test_hip_gpu 90 $B/test_hip_gpu
  step memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu \
    --gtest_filter='HipEstimate.PrefillOverAnFp8*:HipEstimate.PrefillFp8Queries*:HipEstimate.PrefillCtaSizes*'
  for round in 1 2 3 4; do
    lens=131072
    [ $round -le 2 ] && lens=131072,1048576
    for n in main head; do
      b=$B/longctx_bench_hip_main
      [ $n = head ] && b=$B/longctx_bench_hip
      step r${round}_$n 40 $b --lens "" --prefill $lens --dense-max 0 --json $L/r${round}_$n.json
    done
  done
  step clocks_main 20 $B/longctx_bench_hip_clocksmain --lens "" --prefill 131072 --dense-max 0 --estimate-only
  step clocks_head 20 $B/longctx_bench_hip_clocks --lens "" --prefill 131072 --dense-max 0 --estimate-only
  # (not --estimate-only: it times the bf16 estimate alone, and the fp8 kernel would never run)
  for n in main head; do
    b=$B/longctx_bench_hip_main
    [ $n = head ] && b=$B/longctx_bench_hip
    step ncu_$n 60 ncu --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
      --metrics sm__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      --clock-control none --kernel-name-base mangled -k regex:prefill_kernelI13__nv_fp8 -c 1 \
      $b --lens "" --prefill 131072 --dense-max 0
  done
  # The head's per-instruction stall samples (the docs' stall shares): a report and its SASS page.
  step ncu_src 90 ncu --section WarpStateStats --section SourceCounters --clock-control none \
    --kernel-name-base mangled -k regex:prefill_kernelI13__nv_fp8 -c 1 -o $L/fp8src \
    $B/longctx_bench_hip --lens "" --prefill 131072 --dense-max 0
  step ncu_src_csv 60 bash -c "ncu -i $L/fp8src.ncu-rep --page source --csv --print-source sass > $L/fp8src_sass.csv"
  rm -f $L/fp8src.ncu-rep
  step torch 45 python3 "$D/torch_baseline.py" --shape 32,8,128 --prefill 131072 --decode "" --backends cudnn --json $L/torch.json
else
  step test_cuda 240 $B/test_cuda --gtest_filter='AttnDecode*:SparseAttn*:SparseGeneric*:SparseDecode*:TokenSelect*'
  step test_ihip_gpu 120 $B/test_ihip_gpu
  step test_sparse_window 60 $B/test_sparse_window
  step test_gpu_fp8 90 $B/test_gpu --gtest_filter='*Fp8*:*fp8*:*AttnTiles*'
fi
grep -hE "^\[  (PASSED|FAILED) |ERROR SUMMARY|prefill.*ms|phase clocks" $L/*.log 2>/dev/null | head -60 >> "$OUT/summary.txt"
exit $status
