#!/usr/bin/env bash
# gpu-hip-prefill-ab.sh: one device call for HiP's prefill estimator work (issue 14): the GPU tests
# of the branch (test_hip_gpu, test_hip_gpu_method, test_kv_offload), the prefill A/B at 128K, 512K
# and 1M against main's bench binary carried beside (longctx_bench_hip_main), interleaved: main,
# branch (estimate + sparse attention + the fp8 estimate), any intermediate binaries carried as
# longctx_bench_hip_<name> (estimate only), then torch cuDNN at 128K, compute-sanitizer memcheck on
# the estimator's prefill tests, a second round main, branch of the estimate alone
# (--estimate-only), the branch's phase clocks (longctx_bench_hip_clocks, when carried:
# scripts/gpu-hip-clocks-build.sh) and, time left, ncu on one 1M estimator launch.
# Each step has a timeout and is skipped when it would pass BUDGET seconds (default 230); logs and
# JSON go to /tmp/hipp-out, tarred into $OUT/results.tgz after every step.
# Pack (here, no GPU needed), into the carry folder C = /work/main/.carry/<branch>:
#   ninja -C build-gpu -j2 longctx_bench_hip test_hip_gpu test_hip_gpu_method test_kv_offload
#   bins.tar.xz in C: those four (stripped), longctx_bench_hip_main (main's build), lib/ (the
#   non-system shared libraries ldd lists: OpenBLAS, gfortran, quadmath); commit.txt; this script
#   and bench/torch_baseline.py beside it.
# Run on the device: OUT=... bash .carry/<branch>/gpu-hip-prefill-ab.sh
set -uo pipefail
FINAL=${OUT:-out}; mkdir -p "$FINAL"; OUT=/tmp/hipp-out; mkdir -p $OUT
C=$(dirname "$0"); B=/tmp/hipp; mkdir -p $B && tar -C $B -xJf "$C/bins.tar.xz"; export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
log() { echo "== $* ($(date -u +%T), ${SECONDS}s)" | tee -a "$OUT/steps.log"; }
step() { local name=$1 t=$2; shift 2; log "$name";
  if [ $((SECONDS + t)) -gt ${BUDGET:-230} ]; then echo "$name skipped (time)" | tee -a "$OUT/steps.log"; return; fi
  timeout $t "$@" > "$OUT/$name.log" 2>&1; local rc=$?;
  echo "$name rc=$rc" | tee -a "$OUT/steps.log"; tail -${TAILN:-6} "$OUT/$name.log"; tar -C $OUT -czf "$FINAL/results.tgz" .; }
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv; cat "$C/commit.txt"; date -u; } > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
TAILN=3 step test_hip_gpu 35 $B/test_hip_gpu
TAILN=3 step test_hip_gpu_method 25 $B/test_hip_gpu_method
TAILN=3 step test_kv_offload 25 $B/test_kv_offload
P=131072,524288,1048576
TAILN=8 step bench_main 30 $B/longctx_bench_hip_main --lens "" --prefill $P --dense-max 0 --json "$OUT/bench_main.json"
TAILN=8 step bench_new 30 $B/longctx_bench_hip --lens "" --prefill $P --dense-max 0 --json "$OUT/bench_new.json"
for v in $B/longctx_bench_hip_*; do
  name=${v##*longctx_bench_hip_}; case $name in main|clocks) continue ;; esac
  TAILN=4 step est_$name 15 $v --lens "" --prefill $P --estimate-only --json "$OUT/est_$name.json"
done
TAILN=8 step torch 35 python3 "$C/torch_baseline.py" --shape 32,8,128 --prefill 131072 --decode "" --backends cudnn --json "$OUT/torch.json"
TAILN=3 step memcheck 30 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu --gtest_filter='HipEstimate.PrefillCtaSizes*:HipEstimate.PrefillBlockIds*:HipEstimate.HeadDim256TensorCore*'
TAILN=6 step est_main2 15 $B/longctx_bench_hip_main --lens "" --prefill $P --estimate-only --json "$OUT/est_main2.json"
TAILN=6 step est_new2 15 $B/longctx_bench_hip --lens "" --prefill $P --estimate-only --json "$OUT/est_new2.json"
[ -x $B/longctx_bench_hip_clocks ] && TAILN=3 step clocks 20 $B/longctx_bench_hip_clocks --lens "" --prefill 131072,1048576 --estimate-only
TAILN=4 step ncu_1m 60 ncu --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --clock-control none \
  -k regex:prefill_kernel -c 1 -f -o $OUT/ncu_1m $B/longctx_bench_hip --lens "" --prefill 1048576 --estimate-only
[ -f $OUT/ncu_1m.ncu-rep ] && TAILN=2 step ncu_1m_details 15 ncu -i $OUT/ncu_1m.ncu-rep --page details --print-details all
ls -la $OUT $FINAL
