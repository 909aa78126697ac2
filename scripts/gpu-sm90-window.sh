#!/usr/bin/env bash
# gpu-sm90-window.sh: one device call for branch sm90-window (issue 14 item 5): the row window in
# the Hopper sparse kernel (SparseGeo::kWindow), so HiP + Self-Extend's near part at head_dim
# 128/256 runs on it instead of the generic mma.sync kernel.
# Steps (each with a limit, skipped when BUDGET seconds would pass; logs archived after each):
#   sass        cuobjdump of main's and the branch's longctx_bench_hip: SASS instruction counts and
#               registers of every sparse kernel; the window-less instantiations must match
#               (names normalised: the branch's SparseGeo has one more template flag)
#   tests       test_sparse_window (all: fp64 oracle, both kernels, d 64/128/256), test_cuda
#               'SparseAttn*', test_gpu_hip_self_extend (the method, its near part now on Hopper)
#   memcheck    compute-sanitizer on the windowed Hopper cases of test_sparse_window
#   kernel A/B  longctx_bench_hip at 32K and 128K (llama3-8b geometry, HiP's index): the branch's
#               --window 1024 (near part on sparse_attention = Hopper windowed, on the generic
#               kernel, far part) beside main's plain HiP sparse attention; two rounds, interleaved
#   model A/B   longctx bench model, random-weight llama3-8b:4 at 32K, every layer sparse: HiP +
#               Self-Extend 8:1024 and plain HiP, main and branch interleaved
# Pack (here, after nice ninja -C build -j2 test_sparse_window test_cuda test_gpu_hip_self_extend
# longctx_bench_hip longctx; MAIN_BUILD: main's build folder):
#   bash scripts/gpu-sm90-window.sh --pack build /work/main/build .carry/sm90-window
# Run (device): run(command="OUT=$OUT GIT_COMMIT=<sha> bash .carry/sm90-window/gpu-sm90-window.sh",
#                   carry=[".carry/sm90-window"], timeout_s=420)
# Results: $OUT/results.tgz (logs/, every step's log and JSON) and summary.txt beside it.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  set -e
  build=$2 main=$3 c=$4 tmp=/tmp/sm90-window-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c" "$tmp"
  cp "$build/tests/cuda/test_sparse_window" "$build/tests/cuda/test_cuda" "$build/tests/gpu/test_gpu_hip_self_extend" \
     "$build/bench/longctx_bench_hip" "$build/src/cli/longctx" "$tmp/"
  cp "$main/bench/longctx_bench_hip" "$tmp/longctx_bench_hip_main"
  cp "$main/src/cli/longctx" "$tmp/longctx_main"
  strip "$tmp"/*
  carry_libs "$tmp/lib" "$build/tests/cuda/test_cuda" "$build/tests/gpu/test_gpu_hip_self_extend" "$build/src/cli/longctx"
  # One xz stream with a 64 MB dictionary (-9, one thread), similar binaries next to each other:
  # main's and the branch's longctx share most bytes, so the pack is 23 MB instead of 46 MB.
  XZ_OPT="-9 -T1" tar -C "$tmp" -cJf "$c/bins.tar.xz" longctx longctx_main test_gpu_hip_self_extend \
    longctx_bench_hip longctx_bench_hip_main test_cuda test_sparse_window lib
  cp "$0" "$D/gpu-carry.sh" "$c/"
  ls -la "$c"; du -sh "$c"; exit 0
fi
out_archive sm90-window results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/sm90-window-bin "$OUT/logs" "${BUDGET:-400}"
B=/tmp/sm90-window-bin L=$OUT/logs

# SASS instruction counts and registers per sparse kernel, main vs branch (window-less must match).
sass_of() { cuobjdump -sass "$1" 2>/dev/null | awk '/Function :/ {f=$3} /^ +\/\*[0-9a-f]+\*\// {n[f]++} END {for (k in n) print k, n[k]}' |
  grep -E "sparse|plan" | norm | sort; }
res_of() { cuobjdump -res-usage "$1" 2>/dev/null | grep -A1 -E "Function [^ ]*(sparse|plan)" | paste - - |
  sed -E 's/.*Function ([^ :]*).*(REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+).*/\1 \2/' | norm | sort; }
# the anonymous namespace's hash differs by source path; SparseGeo<d, stages, fp8, window = 0> is main's <d, stages, fp8>
norm() { sed -E 's/_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]+/ANON/g; s/(SparseGeoILi[0-9]+ELi[0-9]+ELb[01])ELb0E/\1E/g'; }
sass_check() {
  for bin in longctx_bench_hip_main longctx_bench_hip; do sass_of $B/$bin > "$L/sass_$bin.txt"; res_of $B/$bin > "$L/res_$bin.txt"; done
  echo "SASS instruction counts (kernel, main, branch) where they differ:"
  join -a1 -a2 -e - -o 0,1.2,2.2 "$L/sass_longctx_bench_hip_main.txt" "$L/sass_longctx_bench_hip.txt" | awk '$2 != $3'
  echo "resource usage, main vs branch:"; diff "$L/res_longctx_bench_hip_main.txt" "$L/res_longctx_bench_hip.txt"
  echo "kernels compared: $(wc -l < "$L/sass_longctx_bench_hip_main.txt") main, $(wc -l < "$L/sass_longctx_bench_hip.txt") branch"
  return 0
}
sass_check > "$L/sass.log" 2>&1  # a shell function: not through step's timeout
head -30 "$L/sass.log" | tee -a "$OUT/summary.txt"

step test_sparse_window 120 $B/test_sparse_window
step test_cuda_sparse 90 $B/test_cuda --gtest_filter='SparseAttn*'
step test_gpu_hip_self_extend 60 $B/test_gpu_hip_self_extend
step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_sparse_window \
  --gtest_filter='SparseWindow.PrefillHipLike*:SparseWindow.PrefillWindowEmptyRows:SparseWindow.DispatchRoutes'

# Kernel A/B on HiP's index (llama3-8b geometry 32/8/128): main's plain sparse attention beside the
# branch's plain, windowed (Hopper and generic) and far-part runs. Two rounds, interleaved.
for r in 1 2; do
  step k${r}_main 40 $B/longctx_bench_hip_main --lens "" --prefill 32768,131072 --dense-max 0 --json $L/k${r}_main.json
  step k${r}_branch 50 $B/longctx_bench_hip --lens "" --prefill 32768,131072 --dense-max 0 --window 1024 \
    --json $L/k${r}_branch.json
done

# Model A/B (prefill-bound rows: 4 decode steps), main and branch interleaved.
AB=(bench model --device cuda --decode 4 --repeats 2 --lengths 32k --random-weights llama3-8b:4)
for attn in hip=dense_layers=0,self_extend=8:1024 hip=dense_layers=0; do
  tag=${attn//[=:,]/_}
  for bin in longctx_main longctx; do
    step "m_${bin}_$tag" 40 $B/$bin "${AB[@]}" --attn "$attn" --json "$L/m_${bin}_$tag.json"
  done
done
grep -h "HiP + Self-Extend\|sparse attention" $L/k*_*.log > $L/kernel_lines.txt 2>/dev/null
cat $L/kernel_lines.txt | tee -a "$OUT/summary.txt"
exit $status
