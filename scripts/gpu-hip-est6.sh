#!/usr/bin/env bash
# gpu-hip-est6.sh: one device call for HiP's prefill estimator over the fp8 key copy on f16 tensor
# cores (issue 14): the branch's test_hip_gpu, memcheck on its fp8 prefill cases, the 128K A/B
# against main's bench binary carried beside (longctx_bench_hip_main; random and structured Q/K:
# estimate bf16 / fp8, sparse attention bf16 / fp8 tiles, the fp8 selection's block Jaccard vs
# bf16), 1M, torch cuDNN at 128K, a second interleaved estimate round, ncu at 128K on the bf16 and
# the fp8 estimator kernels (L2 / L1 bytes and throughput, stalls) and the fp8 kernel's spills
# (cuobjdump). Each step is cut to what is left of BUDGET seconds (default 380).
# Pack (here): bash scripts/gpu-hip-est6.sh --pack BUILD MAIN_BENCH C   (C = .carry/hip-est6)
# Run (device): OUT=$OUT GIT_COMMIT=<sha> bash .carry/hip-est6/gpu-hip-est6.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  build=$2 main_bench=$3 c=$4 tmp=/tmp/hip-est6-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c/lib" "$tmp"
  cp "$build/tests/cuda/test_hip_gpu" "$build/bench/longctx_bench_hip" "$tmp/"
  pack_ab "$tmp" "$c" "$main_bench" "$0" bench/torch_baseline.py
  exit 0
fi
out_archive hip-est6 results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/hip-est6-bin "$OUT/logs" "${BUDGET:-380}"
B=/tmp/hip-est6-bin L=$OUT/logs
step test_hip_gpu 60 $B/test_hip_gpu
step memcheck 45 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu \
  --gtest_filter='HipEstimate.PrefillOverAnFp8*:HipEstimate.PrefillFp8Queries*'
step bench_main 30 $B/longctx_bench_hip_main --lens "" --prefill 131072 --dense-max 0 --json $L/bench_main.json
step bench_new 40 $B/longctx_bench_hip --lens "" --prefill 131072 --dense-max 0 --fp8-tiles --json $L/bench_new.json
step bench_main_s 30 $B/longctx_bench_hip_main --lens "" --prefill 131072 --dense-max 0 --structured-qk --json $L/bench_main_s.json
step bench_new_s 40 $B/longctx_bench_hip --lens "" --prefill 131072 --dense-max 0 --fp8-tiles --structured-qk --json $L/bench_new_s.json
step torch 45 python3 "$D/torch_baseline.py" --shape 32,8,128 --prefill 131072 --decode "" --backends cudnn --json $L/torch.json
step est_main2 20 $B/longctx_bench_hip_main --lens "" --prefill 131072 --estimate-only --json $L/est_main2.json
step bench_new2 40 $B/longctx_bench_hip --lens "" --prefill 131072 --dense-max 0 --json $L/bench_new2.json
step bench_new_1m 45 $B/longctx_bench_hip --lens "" --prefill 1048576 --dense-max 0 --fp8-tiles --json $L/bench_new_1m.json
M="--metrics gpu__time_duration.sum,lts__t_bytes.sum,lts__t_bytes.sum.per_second,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,dram__bytes_read.sum,dram__bytes_read.sum.per_second,sm__inst_executed.sum,smsp__inst_executed.avg.per_cycle_active,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"
step ncu_bf16 40 ncu $M --clock-control none --kernel-name-base mangled -k regex:prefill_kernelI13__nv_bfloat16 -c 1 \
  $B/longctx_bench_hip --lens "" --prefill 131072 --estimate-only
step ncu_fp8 50 ncu $M --clock-control none --kernel-name-base mangled -k regex:prefill_kernelI13__nv_fp8 -c 1 \
  $B/longctx_bench_hip --lens "" --prefill 131072 --dense-max 0
step sass 20 bash -c "cuobjdump -sass $B/longctx_bench_hip | awk '/Function : .*prefill_kernelI13__nv_(fp8_e4m3|bfloat16)Lb1ELi2ELi128/{f=\$3} /Function : /&&!/prefill_kernelI13__nv_(fp8_e4m3|bfloat16)Lb1ELi2ELi128/{f=\"\"} f{print f, \$0}' > $L/sass.txt; for f in \$(cut -d' ' -f1 $L/sass.txt | sort -u); do echo \$f \$(grep -c \"^\$f.*LDL\" $L/sass.txt) LDL \$(grep -c \"^\$f.*STL\" $L/sass.txt) STL \$(grep -c \"^\$f.*HMMA\" $L/sass.txt) HMMA; done"
exit $status
