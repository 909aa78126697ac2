#!/usr/bin/env bash
# gpu-ihip-rank.sh: InfiniteHiP's rank=local option (chunks ranked by the largest logit minus the
# row's largest logit over its sinks and window; kernels/ref/ihip_prune.h) on the device: its GPU
# twins' tests, then quality on the default model (SmolLM2-135M, trained to 8K) past its context
# (issue 15: at 16K-64K at least as accurate as dense at 4K).
#
# Here (no GPU), after building longctx test_ihip_gpu test_ihip_gpu_method in BUILD (CUDA on):
#   bash scripts/gpu-ihip-rank.sh --pack BUILD /work/main/.carry/ihip-rank
# which writes p1 (the model's part 1, the two test binaries, these scripts) and p2 (part 2, the
# stripped longctx with its libraries, these scripts). On the device, two calls back to back (the
# machine keeps /root while it stays warm):
#   OUT=$OUT bash .carry/ihip-rank/p1/gpu-ihip-rank.sh tests   # stores part 1; the GPU twins' tests
#   OUT=$OUT bash .carry/ihip-rank/p2/gpu-ihip-rank.sh eval    # joins the model; the quality grid
# tests: test_ihip_gpu (IhipGpuRankLocal*: offsets, scores and lists bit-equal to the CPU twin, decode
#   and prefill, every RoPE mode; plus the existing decode/prefill cases, unchanged paths) and
#   test_ihip_gpu_method (RankLocal: the GPU method's key sets equal the CPU method's; the existing
#   prefill / decode index cases).
# eval: passkey --no-chat and niah_single (chat template) with 5 depths x 2 samples = 10 prompts a
#   cell (seed 42): dense at 4K (the bar), infinitehip (the paper's rule) and infinitehip=rank=local
#   at 4K, 16K, 32K, 64K (-c 66000 --extrapolate), one process per (task, method, lengths), all in
#   parallel on the one GPU, each under PAR_LIMIT_S (default 250 s); progress lines (one a prompt)
#   go to the logs, so a cut process still shows its finished prompts.
# Everything lands in $OUT/all.tgz, with summary.txt and env.txt beside it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # carry_split, join_model, carry_libs, record_env, step, unpack_bin, out_archive

if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 models=${LONGCTX_CACHE:-$HOME/.cache/longctx}/models tmp=/tmp/gpu-ihip-rank-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/tests" "$tmp/bin"
  carry_split "$models/$MODEL_NAME" 2 "$carry/p" || exit 2
  for f in tests/cuda/test_ihip_gpu tests/cuda/test_ihip_gpu_method; do
    cp "$build/$f" "$tmp/tests/" && strip "$tmp/tests/$(basename "$f")"
  done
  carry_libs "$tmp/tests/lib" "$tmp"/tests/test_ihip_gpu "$tmp"/tests/test_ihip_gpu_method
  cp "$build/src/cli/longctx" "$tmp/bin/" && strip "$tmp/bin/longctx"
  carry_libs "$tmp/bin/lib" "$tmp/bin/longctx"
  tar -C "$tmp/tests" -cJf "$carry/p1/tests.tar.xz" .
  tar -C "$tmp/bin" -cJf "$carry/p2/bin.tar.xz" .
  git -C "$HERE" rev-parse --short HEAD > "$tmp/commit.txt"
  for d in p1 p2; do cp "$0" "$HERE/gpu-carry.sh" "$tmp/commit.txt" "$carry/$d/"; done
  du -sb "$carry"/* "$carry"
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
    # part 1 of the model into the cache (join_model says part 2 is not here yet: expected)
    join_model "$HERE" "$MODEL_NAME" "$MODEL_SHA" | tee -a "$OUT/summary.txt"
    B=/tmp/gpu-ihip-rank-tests
    unpack_bin "$HERE/tests.tar.xz" "$B"
    STEP_BUDGET_S=${BUDGET_S:-200} STEP_T0=$T0
    step_show() { grep -E "^\[  (PASSED|FAILED|SKIPPED)|^\[  FAILED|tests ran|Failure" "$OUT/$1.log" | head -20; }
    step ihip_gpu 120 "$B/test_ihip_gpu" \
      --gtest_filter='IhipGpuRankLocal*:IhipGpu.StagesEqualTheCpuReferenceInEveryRopeMode:IhipGpu.HeadDim64*:IhipGpu.Fp8KeysEqual*:IhipGpuPrefill.StagesIndex*:IhipGpuPrefill.HeadDim64*'
    step ihip_gpu_method 60 "$B/test_ihip_gpu_method" \
      --gtest_filter='IhipGpuMethod.RankLocal*:IhipGpuMethod.PrefillIndex*:IhipGpuMethod.DecodeIndex*:IhipGpuMethod.HeadDim64*'
    ;;
  eval)
    join_model "$HERE" "$MODEL_NAME" "$MODEL_SHA" | tee -a "$OUT/summary.txt" || { echo "DEFAULT MODEL NOT HERE"; exit 1; }
    B=/tmp/gpu-ihip-rank-bin
    unpack_bin "$HERE/bin.tar.xz" "$B"
    lim=${PAR_LIMIT_S:-250} depths=0,0.25,0.5,0.75,1
    par() {  # par NAME ARGS...: one eval process in the background; its rc and time in summary.txt
      local name=$1; shift
      ( t=$(date +%s); timeout "$lim" "$B/longctx" eval "$@" --device cuda --depths $depths --samples 2 \
          --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log"
        echo "== $name: rc=$?, $(( $(date +%s) - t )) s" >> "$OUT/summary.txt" ) &
    }
    for task in passkey niah_single; do
      chat=; [ $task = passkey ] && chat=--no-chat
      par "${task}_dense_4k" $task $chat --lengths 4k --attn dense
      for m in infinitehip infinitehip=rank=local; do
        tag=${m/infinitehip=rank=local/local}
        par "${task}_${tag}_4k16k" $task $chat -c 66000 --extrapolate --lengths 4k,16k --attn "$m"
        par "${task}_${tag}_32k" $task $chat -c 66000 --extrapolate --lengths 32k --attn "$m"
        par "${task}_${tag}_64k" $task $chat -c 66000 --extrapolate --lengths 64k --attn "$m"
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
