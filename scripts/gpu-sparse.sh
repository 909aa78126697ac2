#!/usr/bin/env bash
# gpu-sparse.sh: the one device-machine run of the MInference CUDA kernels: tests, memcheck,
# benchmarks (ours + torch SDPA cuDNN + FlexAttention), and a summary table printed last.
#
# What: (1) tests/cuda test_cuda --gtest_filter='Sparse*' (fp64 oracle, same mask), (2)
# compute-sanitizer memcheck on the small sparse tests, (3) longctx_bench_sparse (our dense and
# sparse kernels, bench/bench_sparse.cu), (4) bench/flex_baseline.py (SDPA cuDNN, FlexAttention
# with the same block mask), (5) ratios. Logs and JSON land in $OUT. Each step has a timeout.
# Build first, here (no GPU needed):
#   cmake -S . -B build-gpusparse -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON
#   ninja -C build-gpusparse -j2 test_cuda longctx_bench_sparse
# Run on the device (carry build-gpusparse/tests/cuda/test_cuda, build-gpusparse/bench/longctx_bench_sparse):
#   OUT=/tmp/out scripts/gpu-sparse.sh [--skip-tests] [--skip-bench] [--skip-torch] [--seqs 131072,...]
#     [--dense-seqs S,..] (our dense kernel; default 128K,512K) [--sdpa-seqs S,..] (cuDNN; default
#     = --dense-seqs) [--flash-seqs S,..] (SDPA flash = FlashAttention-2; default none)
#     [--ncu S] (hardware counters of one block-sparse and one vertical-slash kernel launch at
#     length S, structured inputs: DRAM / L2 / SM / tensor-pipe throughput, to ncu.csv)
#     [--inputs random|structured]   (structured: Q/K with planted structure, indices estimated on
#     the GPU by MinferenceIndexBuilder, index time included; FlexAttention gets the same blocks)
set -uo pipefail
OUT=${OUT:-out}
BUILD=${BUILD:-build-gpusparse}
mkdir -p "$OUT"
skip_tests=0; skip_bench=0; skip_torch=0; inputs=random; seqs=131072,524288,1048576; dense_seqs=131072,524288
sdpa_seqs=""; flash_seqs=""; ncu_seq=""
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-tests) skip_tests=1 ;;
    --skip-bench) skip_bench=1 ;;
    --skip-torch) skip_torch=1 ;;
    --seqs) seqs="$2"; shift ;;
    --dense-seqs) dense_seqs="$2"; shift ;;
    --sdpa-seqs) sdpa_seqs="$2"; shift ;;
    --flash-seqs) flash_seqs="$2"; shift ;;
    --ncu) ncu_seq="$2"; shift ;;
    --inputs) inputs="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
export PYTHONUNBUFFERED=1
COMMIT=${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit $COMMIT"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if [ $skip_tests = 0 ]; then
  echo "== sparse tests"
  timeout ${TEST_TIMEOUT:-120} "$BUILD/tests/cuda/test_cuda" --gtest_filter='Sparse*' > "$OUT/tests.log" 2>&1; rc=$?
  grep -E "^  sparse|FAILED|Failure|^\[  (PASSED|FAILED|SKIPPED)" "$OUT/tests.log" | head -60
  [ $rc = 0 ] || { echo "TESTS FAILED (rc=$rc)"; tail -20 "$OUT/tests.log"; status=1; }
  echo "== compute-sanitizer memcheck (small sparse shapes)"
  timeout ${MEMCHECK_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 99 "$BUILD/tests/cuda/test_cuda" \
    --gtest_filter='Sparse*Small*' > "$OUT/memcheck.log" 2>&1; rc=$?
  tail -3 "$OUT/memcheck.log"
  [ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; grep -m5 -A8 "=====" "$OUT/memcheck.log"; status=1; }
fi
if [ -n "$ncu_seq" ]; then
  # bench_sparse --inputs structured launches the sparse kernel 1 + reps times per pattern,
  # block-sparse first (reps 10 / 5 / 3 for S <= 128K / 512K / larger): the launches profiled are
  # the last block-sparse one and the first vertical-slash one.
  reps=$(( ncu_seq <= 131072 ? 10 : ncu_seq <= 524288 ? 5 : 3 ))
  echo "== ncu: sparse_attn_sm90_kernel at S=$ncu_seq (launches $reps and $((reps + 1)): block-sparse, vertical-slash)"
  timeout ${NCU_TIMEOUT:-300} ncu --clock-control none --kernel-name regex:sparse_attn_sm90_kernel \
    --launch-skip "$reps" --launch-count 2 --csv --page raw \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed \
    "$BUILD/bench/longctx_bench_sparse" --seqs "$ncu_seq" --dense-seqs 0 --inputs structured \
    > "$OUT/ncu.csv" 2> "$OUT/ncu.log"; rc=$?
  python3 - "$OUT/ncu.csv" <<'PY' || tail -20 "$OUT/ncu.log"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
names, data = rows[head], [r for r in rows[head + 2:] if len(r) == len(rows[head])]
for r, kind in zip(data, ("block-sparse", "vertical-slash")):
    print(kind + ": " + ", ".join(f"{n}={v}" for n, v in zip(names, r)
                                 if n.split("__")[0] in ("gpu", "dram", "lts", "l1tex", "sm")))
PY
  [ $rc = 0 ] || { echo "NCU FAILED (rc=$rc)"; tail -5 "$OUT/ncu.log"; status=1; }
fi
MASKS=${MASKS:-/tmp/longctx-masks}  # block lists for FlexAttention (large: not under $OUT)
mkdir -p "$MASKS"
mask_args=()
[ "$inputs" = structured ] && mask_args=(--mask-dir "$MASKS")
if [ $skip_bench = 0 ]; then
  echo "== longctx_bench_sparse"
  timeout ${BENCH_TIMEOUT:-200} "$BUILD/bench/longctx_bench_sparse" --seqs "$seqs" --dense-seqs "$dense_seqs" \
    --inputs "$inputs" "${mask_args[@]}" --json "$OUT/bench_sparse.json" > /dev/null 2> "$OUT/bench.log"; rc=$?
  cat "$OUT/bench.log"
  [ $rc = 0 ] || { echo "BENCH FAILED (rc=$rc)"; status=1; }
fi
if [ $skip_torch = 0 ]; then
  echo "== torch SDPA cuDNN + FlexAttention"
  timeout ${TORCH_TIMEOUT:-240} python3 bench/flex_baseline.py --seqs "$seqs" --sdpa-seqs "${sdpa_seqs:-$dense_seqs}" \
    --flash-seqs "$flash_seqs" "${mask_args[@]}" \
    --json "$OUT/bench_torch.json" > /dev/null 2> "$OUT/torch.log"; rc=$?
  grep -v Warning "$OUT/torch.log" | tail -20
  [ $rc = 0 ] || { echo "TORCH BASELINE FAILED (rc=$rc)"; status=1; }
fi
echo "== summary"
python3 - "$OUT" "$COMMIT" <<'PY'
import json, os, sys
out, commit = sys.argv[1], sys.argv[2]
runs = []
for f in ("bench_sparse.json", "bench_torch.json"):
    p = os.path.join(out, f)
    if os.path.exists(p):
        runs += [r for r in json.load(open(p))["runs"] if "ms" in r or "error" in r]
by = {}
for r in runs:
    by.setdefault(r["seq"], {})[r["kernel"]] = r
def dense(kind, S):  # measured, or scaled by S^2 from the largest measured length
    if kind in by.get(S, {}): return by[S][kind]["ms"], False
    m = [s for s in by if kind in by[s] and s < S]
    if not m: return None, False
    s0 = max(m); return by[s0][kind]["ms"] * (S / s0) ** 2, True
print(f"commit {commit}")
for S in sorted(by):
    cu, cx = dense("sdpa_cudnn", S); de, dx = dense("dense_sm90", S); fa, fx = dense("sdpa_flash", S)
    print(f"S={S}: cuDNN {cu and round(cu,1)} ms{' (S^2-scaled)' if cx else ''}, ours dense {de and round(de,1)} ms{' (S^2-scaled)' if dx else ''}"
          f", FA2 {fa and round(fa,1)} ms{' (S^2-scaled)' if fx else ''}")
    for k, r in sorted(by[S].items()):
        if k in ("sdpa_cudnn", "dense_sm90", "sdpa_flash"): continue
        if "error" in r:
            print(f"  {k}: ERROR {r['error'][:200]}"); continue
        line = f"  {k}: {r['ms']:.2f} ms"
        if cu: line += f", {cu / r['ms']:.1f}x vs cuDNN"
        if fa: line += f", {fa / r['ms']:.1f}x vs FA2"
        if de: line += f", {de / r['ms']:.1f}x vs ours dense"
        if "tflops_pairs" in r: line += f", {r['tflops_pairs']:.0f} TFLOP/s on attended pairs"
        if "tflops_tiles" in r: line += f" ({r['tflops_tiles']:.0f} on visited tiles)"
        if "index_share" in r: line += f"; index build {r['index_ms']:.2f} ms = {100 * r['index_share']:.1f}% of attention"
        print(line)
json.dump({"commit": commit, "command": "scripts/gpu-sparse.sh", "runs": runs}, open(os.path.join(out, "results.json"), "w"), indent=1)
PY
exit $status
