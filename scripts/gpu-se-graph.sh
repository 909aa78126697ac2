#!/usr/bin/env bash
# gpu-se-graph.sh: one device call for branch se-graph (issue 14 item 5): Self-Extend's GPU decode
# (dense=self_extend=G:W and hip=...,self_extend=G:W) replayed from CUDA graphs, its lengths read on
# the device (cuda::self_extend_decode_prep).
# Steps (each with a limit, skipped when BUDGET seconds would pass; logs archived after each):
#   model       the default model joined from $LONGCTX_CACHE when its xz parts are stored there
#               (gpu-eval-cells.sh store calls); the tests below use tiny random models and run
#               without it
#   tests       test_gpu_self_extend (the step vs the fp64 oracle, eager and graph-replayed across W;
#               the prep kernel vs its CPU twin and cuda::rope; the GPU model vs the CPU engine, graph
#               decode bit-equal to eager) and test_gpu_hip_self_extend (the same for HiP + Self-Extend);
#               test_cuda's RoPE users (cuda::rope's arithmetic moved to rope_rotate.cuh) and test_gpu's
#               GpuPreRopeWindow (Self-Extend on Gemma 3's global layers, now graph-replayed) and GpuGraph
#   memcheck    compute-sanitizer on the prep kernel's and the replayed steps' tests
#   model A/B   longctx bench model, decode tok/s of the branch beside main's longctx (eager Self-Extend
#               decode there), interleaved: smollm2-135m (random weights, 30 layers) at 16K and 32K,
#               --decode 64, for dense=self_extend=8:1024, hip=self_extend=8:1024, hip, dense; and
#               llama3-8b:4 at 32K with hip=dense_layers=0,self_extend=8:1024
# Pack (here, after nice ninja -C build -j2 longctx test_gpu_self_extend test_gpu_hip_self_extend test_cuda test_gpu;
# MAIN: main's build folder):
#   bash scripts/gpu-se-graph.sh --pack build /work/main/build .carry/se-graph
# Run (device): run(command="OUT=$OUT GIT_COMMIT=<sha> bash .carry/se-graph/gpu-se-graph.sh",
#                   carry=[".carry/se-graph"], timeout_s=420)
# Results: $OUT/results.tgz (logs/: every step's log, the bench JSON, ab.txt) and summary.txt beside it.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  set -e
  build=$2 main=$3 c=$4 tmp=/tmp/se-graph-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c" "$tmp"
  cp "$build/tests/gpu/test_gpu_self_extend" "$build/tests/gpu/test_gpu_hip_self_extend" "$build/src/cli/longctx" \
    "$build/tests/cuda/test_cuda" "$build/tests/gpu/test_gpu" "$tmp/"
  cp "$main/src/cli/longctx" "$tmp/longctx_main"
  strip "$tmp"/*
  carry_libs "$tmp/lib" "$build/tests/gpu/test_gpu" "$build/tests/cuda/test_cuda" "$build/src/cli/longctx"
  # One xz stream with a 64 MB dictionary: main's and the branch's longctx share most bytes.
  XZ_OPT="-9 -T1" tar -C "$tmp" -cJf "$c/bins.tar.xz" longctx longctx_main test_gpu_self_extend \
    test_gpu_hip_self_extend test_gpu test_cuda lib
  cp "$0" "$D/gpu-carry.sh" "$c/"
  ls -la "$c"; du -sh "$c"; exit 0
fi
export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
out_archive se-graph results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/se-graph-bin "$OUT/logs" "${BUDGET:-400}"
B=/tmp/se-graph-bin L=$OUT/logs

# The default model, when the lead's store calls left its parts here (not needed by these tests).
{ join_model_xz "$LONGCTX_CACHE/models/model.xz.part2" || echo "default model not joined (the tests run without it)"; } \
  > "$L/model.log" 2>&1
tail -1 "$L/model.log" | tee -a "$OUT/summary.txt"

step test_gpu_self_extend 120 $B/test_gpu_self_extend
step test_gpu_hip_self_extend 90 $B/test_gpu_hip_self_extend
step test_cuda_rope 60 $B/test_cuda --gtest_filter='OpsSmall.*:BlockOpsSmall.*:TokenSelectCompactKv.*'
step test_gpu_prerope_graph 90 $B/test_gpu --gtest_filter='GpuPreRopeWindow.*:GpuGraph.*'
step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_gpu_self_extend \
  --gtest_filter='GpuSelfExtendPrep.*:GpuSelfExtendStep.GraphReplayedDecodeAcrossWindow'
grep -h "differ from eager\|graph decode across W\|decode prep\|worst |diff|/tol\|FAILED\|PASSED" \
  $L/test_gpu_self_extend.log $L/test_gpu_hip_self_extend.log $L/test_cuda_rope.log $L/test_gpu_prerope_graph.log \
  $L/memcheck.log 2>/dev/null | head -40 |
  tee -a "$OUT/summary.txt"

# Model A/B: decode tok/s, main (eager Self-Extend decode) and branch (graph replay) interleaved.
S=(bench model --device cuda --random-weights smollm2-135m --lengths 16k,32k --decode 64 --repeats 2)
for attn in dense=self_extend=8:1024 hip=self_extend=8:1024 hip dense; do
  tag=s_${attn//[=:,]/_}
  for bin in longctx_main longctx; do step "${tag}_$bin" 40 $B/$bin "${S[@]}" --attn "$attn" --json "$L/${tag}_$bin.json"; done
done
LL=(bench model --device cuda --random-weights llama3-8b:4 --lengths 32k --decode 64 --repeats 2)
attn=hip=dense_layers=0,self_extend=8:1024
for bin in longctx_main longctx; do step "l_hip_se_$bin" 60 $B/$bin "${LL[@]}" --attn "$attn" --json "$L/l_hip_se_$bin.json"; done

python3 - "$L" > "$L/ab.txt" 2>&1 <<'EOF'
import glob, json, os, sys
L = sys.argv[1]
print(f"{'run':<40} {'length':>7} {'main dec tok/s':>15} {'branch dec tok/s':>17} {'ratio':>7} {'prefill ratio':>14}")
for f in sorted(glob.glob(os.path.join(L, "*_longctx.json"))):
    m = f.replace("_longctx.json", "_longctx_main.json")
    if not os.path.exists(m):
        continue
    b, a = json.load(open(f)), json.load(open(m))
    for rb, ra in zip(b["results"], a["results"]):
        d = rb["decode_tokens_per_s"] / ra["decode_tokens_per_s"] if ra["decode_tokens_per_s"] else 0
        p = ra["prefill_s"] / rb["prefill_s"] if rb["prefill_s"] else 0
        name = os.path.basename(f)[: -len("_longctx.json")] + " " + b["attn"]
        print(f"{name:<40} {rb['length']:>7} {ra['decode_tokens_per_s']:>15.1f} {rb['decode_tokens_per_s']:>17.1f} "
              f"{d:>7.3f} {p:>14.3f}")
EOF
tee -a "$OUT/summary.txt" < "$L/ab.txt"
exit $status
