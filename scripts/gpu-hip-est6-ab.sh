#!/usr/bin/env bash
# gpu-hip-est6-ab.sh: the second device call for the fp8 f16 scorer (issue 14): the fp8 scorer's
# load / multiply grouping (LONGCTX_HIP_FP8_LOAD_TILES x LONGCTX_HIP_FP8_MMA_TILES, bench-only
# macros of hip_estimate.cu) as bench binaries longctx_bench_hip_<name> beside main's
# (longctx_bench_hip_main) and the branch head's (longctx_bench_hip), two interleaved rounds at
# 128K and 1M (estimate bf16 / fp8, sparse attention, the fp8 selection's block Jaccard vs bf16);
# each variant's test_hip_gpu_<name> fp8 cases, the head's whole test_hip_gpu and memcheck on its
# fp8 cases, torch cuDNN at 128K, ncu at 128K on the head's fp8 kernel (bytes, stalls) and the
# fp8 kernels' spill instructions (cuobjdump). Steps cut to what is left of BUDGET s (default 380).
# (03ae18d removed the macros: the 4 x 4 grouping, the measured best, is the code.)
# Pack (here): bash scripts/gpu-hip-est6-ab.sh --pack BUILD BINS_DIR C   (BINS_DIR: main's bench as
#   longctx_bench_hip_main, variants as longctx_bench_hip_<name> and test_hip_gpu_<name>)
# Run (device): OUT=$OUT GIT_COMMIT=<sha> bash .carry/hip-est6/gpu-hip-est6-ab.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  build=$2 bins=$3 c=$4 tmp=/tmp/hip-est6-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c" "$tmp"
  cp "$build/tests/cuda/test_hip_gpu" "$build/bench/longctx_bench_hip" "$bins"/* "$tmp/"
  pack_ab "$tmp" "$c" "" "$0" bench/torch_baseline.py
  exit 0
fi
out_archive hip-est6-ab results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/hip-est6-bin "$OUT/logs" "${BUDGET:-380}"
B=/tmp/hip-est6-bin L=$OUT/logs
step test_hip_gpu 60 $B/test_hip_gpu
for t in $B/test_hip_gpu_*; do
  step "test_${t##*test_hip_gpu_}" 20 $t --gtest_filter='HipEstimate.PrefillOverAnFp8*:HipEstimate.PrefillFp8Queries*'
done
step memcheck 45 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu \
  --gtest_filter='HipEstimate.PrefillOverAnFp8*:HipEstimate.PrefillFp8Queries*:HipEstimate.PrefillCtaSizes*'
for round in 1 2; do
  for b in $B/longctx_bench_hip_main $B/longctx_bench_hip $B/longctx_bench_hip_*; do
    n=$(basename $b); n=${n#longctx_bench_hip}; n=${n#_}; n=${n:-head}
    [ $round = 2 ] && [ $n != main ] && [ $n != head ] && [ ! -f $L/r1_$n.json ] && continue
    [ -f $L/r${round}_$n.json ] && continue
    step r${round}_$n 25 $b --lens "" --prefill 131072,1048576 --dense-max 0 --json $L/r${round}_$n.json
  done
done
step bench_head_s 30 $B/longctx_bench_hip --lens "" --prefill 131072,1048576 --dense-max 0 --fp8-tiles --structured-qk --json $L/bench_head_s.json
step torch 45 python3 "$D/torch_baseline.py" --shape 32,8,128 --prefill 131072 --decode "" --backends cudnn --json $L/torch.json
step ncu_fp8 60 ncu --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --metrics \
  lts__t_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,sm__inst_executed.sum \
  --clock-control none --kernel-name-base mangled -k regex:prefill_kernelI13__nv_fp8 -c 1 \
  $B/longctx_bench_hip --lens "" --prefill 131072 --dense-max 0
step sass 30 bash -c "for b in $B/longctx_bench_hip $B/longctx_bench_hip_f*; do cuobjdump -sass \$b | awk -v n=\$(basename \$b) '/Function : /{f = /prefill_kernelI13__nv_fp8_e4m3Lb1ELi2ELi128/} f && /LDL/{l++} f && /STL/{s++} END{print n, l, \"LDL\", s, \"STL\"}'; done"
exit $status
