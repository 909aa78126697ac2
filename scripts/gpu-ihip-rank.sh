#!/usr/bin/env bash
# gpu-ihip-rank.sh: InfiniteHiP's rank=local option (chunks ranked by the largest logit minus the
# row's largest logit over its sinks and window; kernels/ref/ihip_prune.h) on the device: its GPU
# twins' tests, then quality on the default model (SmolLM2-135M, trained to 8K) past its context
# (issue 15: at 16K-64K at least as accurate as dense at 4K).
#
# Here (no GPU), after building longctx test_ihip_gpu test_ihip_gpu_method in BUILD (CUDA on):
#   bash scripts/gpu-ihip-rank.sh --pack BUILD /work/main/.carry/ihip-rank
# (BUILD: -DBLA_STATIC=ON -DLONGCTX_PICTURES=OFF -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++
# -static-libgcc") which writes p1 (the xz'd model's first part, test_ihip_gpu, these scripts) and p2
# (the rest, the stripped longctx with its libraries, these scripts). On the device, two calls back to back (the
# machine keeps /root while it stays warm):
#   OUT=$OUT bash .carry/ihip-rank/p1/gpu-ihip-rank.sh tests   # stores part 1; the GPU twins' tests
#   OUT=$OUT bash .carry/ihip-rank/p2/gpu-ihip-rank.sh eval    # joins the model; the quality grid
# tests: test_ihip_gpu (IhipGpuRankLocal*: offsets, scores and lists bit-equal to the CPU twin, decode
#   and prefill, every RoPE mode; plus existing decode/prefill cases on the changed kernels).
#   test_ihip_gpu_method (RankLocal*) does not fit the carry (41 MB): run it with the next suite.
# eval: passkey --no-chat (5 depths x 2 samples) and niah_single (chat template, 10 samples: it
#   places its needle itself), 10 prompts a cell (seed 42; EVAL_TASKS picks the tasks, default
#   "passkey niah_single"): dense at 4K (the bar), infinitehip (the paper's rule) and infinitehip=rank=local
#   at 4K, 16K, 32K, 64K (-c 66000 --extrapolate), one process per (task, method, lengths), all in
#   parallel on the one GPU, each under PAR_LIMIT_S (default 250 s); progress lines (one a prompt)
#   go to the logs, so a cut process still shows its finished prompts.
# Everything lands in $OUT/all.tgz, with summary.txt and env.txt beside it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # carry_split, join_model, carry_libs, record_env, step, unpack_bin, out_archive

# What travels: each call carries the lead's checkout (12.6 MB of tracked files) and one folder,
# 64 MiB in all, so 2 x 54.5 MB for the model (98.4 MB; 90.5 MB as xz), test_ihip_gpu (2.8 MB xz)
# and longctx with its libraries (11.8 MB xz, OpenBLAS static). The model therefore travels as xz:
# its first MODEL_XZ_PART1 bytes (default 49.8 MB) beside the test, the rest beside longctx.
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 tmp=/tmp/gpu-ihip-rank-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry/p1" "$carry/p2" "$tmp/tests" "$tmp/bin"
  carry_model_xz "$carry/p1" "$carry/p2" || exit 2
  cp "$build/tests/cuda/test_ihip_gpu" "$tmp/tests/" && strip "$tmp/tests/test_ihip_gpu"
  carry_libs "$tmp/tests/lib" "$tmp/tests/test_ihip_gpu"
  cp "$build/src/cli/longctx" "$tmp/bin/" && strip "$tmp/bin/longctx"
  carry_libs "$tmp/bin/lib" "$tmp/bin/longctx"
  tar -C "$tmp/tests" -cf - . | xz -9e -T2 > "$carry/p1/tests.tar.xz"
  tar -C "$tmp/bin" -cf - . | xz -9e -T2 > "$carry/p2/bin.tar.xz"
  git -C "$HERE" rev-parse --short HEAD > "$tmp/commit.txt"
  for d in p1 p2; do cp "$0" "$HERE/gpu-carry.sh" "$tmp/commit.txt" "$carry/$d/"; done
  du -sb "$carry"/p1 "$carry"/p2
  exit 0
fi

what=${1:?usage: gpu-ihip-rank.sh --pack BUILD CARRY | tests | eval}
export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
out_archive gpu-ihip-rank all.tgz summary.txt env.txt
COMMIT=$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)
record_env "$OUT/env.txt" "$COMMIT"
T0=$(date +%s)
status=0

case $what in
  tests)
    mkdir -p "$LONGCTX_CACHE/models" && cp "$HERE/model.xz.part1" "$LONGCTX_CACHE/models/" &&
      echo "model.xz.part1 stored" | tee -a "$OUT/summary.txt"
    B=/tmp/gpu-ihip-rank-tests
    unpack_bin "$HERE/tests.tar.xz" "$B"
    STEP_BUDGET_S=${BUDGET_S:-200} STEP_T0=$T0
    step_show() { grep -E "^\[  (PASSED|FAILED|SKIPPED)|^\[  FAILED|tests ran|Failure" "$OUT/$1.log" | head -20; }
    step ihip_gpu 120 "$B/test_ihip_gpu" \
      --gtest_filter='IhipGpuRankLocal*:IhipGpu.StagesEqualTheCpuReferenceInEveryRopeMode:IhipGpu.HeadDim64*:IhipGpu.Fp8KeysEqual*:IhipGpuPrefill.StagesIndex*:IhipGpuPrefill.HeadDim64*'
    ;;
  eval)
    join_model_xz "$HERE/model.xz.part2" 2>&1 | tee -a "$OUT/summary.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || exit 1
    B=/tmp/gpu-ihip-rank-bin
    unpack_bin "$HERE/bin.tar.xz" "$B"
    lim=${PAR_LIMIT_S:-260} depths=0,0.25,0.5,0.75,1
    par() {  # par NAME ARGS...: one eval process in the background; its rc and time in summary.txt
      local name=$1; shift
      ( t=$(date +%s); timeout "$lim" "$B/longctx" eval "$@" --device cuda --json "$OUT/$name.json" \
          > "$OUT/$name.txt" 2> "$OUT/$name.log"
        echo "== $name: rc=$?, $(( $(date +%s) - t )) s" >> "$OUT/summary.txt" ) &
    }
    for task in ${EVAL_TASKS:-passkey niah_single}; do
      # passkey: 5 depths x 2 samples; niah_single places its needle itself (--depths is not its
      # option: it would run --samples prompts), so 10 samples
      opts="--depths $depths --samples 2"; [ $task = passkey ] && opts="--no-chat $opts"
      [ $task = niah_single ] && opts="--samples 10"
      par "${task}_dense_4k" $task $opts --lengths 4k --attn dense
      for m in infinitehip infinitehip=rank=local; do
        tag=${m/infinitehip=rank=local/local}
        par "${task}_${tag}_4k16k" $task $opts -c 66000 --extrapolate --lengths 4k,16k --attn "$m"
        par "${task}_${tag}_32k" $task $opts -c 66000 --extrapolate --lengths 32k --attn "$m"
        par "${task}_${tag}_64k" $task $opts -c 66000 --extrapolate --lengths 64k --attn "$m"
      done
    done
    wait
    for f in "$OUT"/*.txt; do echo "== $f"; tail -4 "$f"; done
    for f in "$OUT"/*.log; do grep -m2 -i "longctx:\|error" "$f" && echo "   ^ $f"; done
    ;;
  *) echo "unknown: $what (tests | eval)" >&2; exit 2 ;;
esac
echo "total $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
exit $status
