#!/usr/bin/env bash
# gpu-hip-profile.sh: one device call that measures HiP's prefill estimator before cutting it
# (issue 14): the estimate at 128K and 1M (longctx_bench_hip --estimate-only), the phase clocks
# of the bench-only build (longctx_bench_hip_clocks, scripts/gpu-hip-clocks-build.sh) at 128K,
# 512K and 1M, and ncu on ONE estimator launch at 128K and at 1M (sections SchedulerStats,
# WarpStateStats, SourceCounters, LaunchStats, Occupancy, MemoryWorkloadAnalysis; the details page
# as text, the per-instruction source page as CSV for matching against cuobjdump -sass here).
# Pack (here): bins.tar.xz in the carry folder C holding longctx_bench_hip and
# longctx_bench_hip_clocks (stripped), commit.txt and this script beside it.
# Run on the device: OUT=... bash .carry/<branch>/gpu-hip-profile.sh (everything in $OUT/results.tgz)
set -uo pipefail
FINAL=${OUT:-out}; mkdir -p "$FINAL"; OUT=/tmp/hipprof-out; rm -rf $OUT; mkdir -p $OUT
C=$(dirname "$0"); B=/tmp/hipprof; rm -rf $B; mkdir -p $B && tar -C $B -xJf "$C/bins.tar.xz"
log() { echo "== $* ($(date -u +%T), ${SECONDS}s)" | tee -a "$OUT/steps.log"; }
step() { local name=$1 t=$2; shift 2; log "$name";
  if [ $((SECONDS + t)) -gt ${BUDGET:-225} ]; then echo "$name skipped (time)" | tee -a "$OUT/steps.log"; return; fi
  timeout $t "$@" > "$OUT/$name.log" 2>&1; local rc=$?;
  echo "$name rc=$rc" | tee -a "$OUT/steps.log"; tail -${TAILN:-6} "$OUT/$name.log"; tar -C $OUT -czf "$FINAL/results.tgz" .; }
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv; cat "$C/commit.txt"; date -u; ncu --version; } > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
SECTIONS="--section SchedulerStats --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
ncu_one() {  # ncu_one NAME LENGTH LIMIT
  TAILN=4 step ncu_$1 $3 ncu $SECTIONS --clock-control none -k regex:prefill_kernel -c 1 -f -o $OUT/ncu_$1 \
    $B/longctx_bench_hip --lens "" --prefill $2 --estimate-only
  TAILN=2 step ncu_$1_details 20 ncu -i $OUT/ncu_$1.ncu-rep --page details --print-details all
  TAILN=2 step ncu_$1_source 20 ncu -i $OUT/ncu_$1.ncu-rep --page source --csv --print-source sass
}
TAILN=4 step bench 25 $B/longctx_bench_hip --lens "" --prefill 131072,1048576 --estimate-only --json $OUT/bench.json
TAILN=4 step clocks 30 $B/longctx_bench_hip_clocks --lens "" --prefill 131072,524288,1048576 --estimate-only
ncu_one 128k 131072 50
ncu_one 1m 1048576 90
ls -la $OUT $FINAL
