#!/usr/bin/env bash
# gpu-self-extend.sh: Self-Extend on the GPU (methods/self_extend/self_extend_gpu.h) on the device:
# its tests, its cost beside dense, and (when the default model is on the machine) passkey and
# niah_single past the trained 8K context.
#
# Here (no GPU): build for a foreign host, then pack the carry folder:
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DBLA_STATIC=ON \
#         -DLONGCTX_PICTURES=OFF -DLONGCTX_BENCH=OFF -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
#   ninja -C build-gpu -j2 longctx test_gpu_self_extend
#   scripts/gpu-self-extend.sh --pack build-gpu /work/main/.carry/self-extend-gpu [MODEL_PART_DIR]
# (MODEL_PART_DIR: a folder holding a part of the default model made by gpu-carry.sh's carry_split,
# e.g. .carry/quality/d2; it is copied beside the binaries.) On the device:
#   OUT=$OUT bash .carry/self-extend-gpu/gpu-self-extend.sh
# The default model (98 MB) does not travel in one call (64 MiB): the eval steps run when it is
# already under $LONGCTX_CACHE/models, or can be joined there from its carried parts (a call with
# part 1, e.g. `mkdir -p /root/longctx-cache/models && cp .carry/quality/d1/* /root/longctx-cache/models/`,
# then this script with part 2 beside it, back to back while the machine stays warm); otherwise
# they are skipped and say so.
# Steps (each under a timeout cut to what is left of BUDGET_S, default 185 s for a 200 s call):
#   tests    test_gpu_self_extend (fp64 oracle, GPU model vs CPU engine, refusals)
#   refuse   `longctx bench model --device cuda` with two G:W must print `longctx: ...`
#   bench_*  longctx bench model --device cuda --random-weights smollm2-135m at 8K/16K/32K: dense,
#            dense=self_extend=8:1024 (prefill and decode tokens/s; the default model's geometry)
#   passkey / niah (model present): --no-chat, 8K/16K/32K, 5 depths x 4 samples = 20 prompts per
#            cell, -c 33000 --extrapolate, dense vs dense=self_extend=8:1024 side by side
# Everything lands in $OUT/se-all.tgz, summary.txt and env.txt beside it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # carry_libs, record_env, join_model, MODEL_NAME, MODEL_SHA
SE=dense=self_extend=8:1024  # docs/self_extend.md: G = 8 covers 58,368 tokens with W = 1024

if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 part=${4:-} tmp=/tmp/gpu-se-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp"
  cp "$build/src/cli/longctx" "$build/tests/gpu/test_gpu_self_extend" "$tmp/" || exit 2
  strip "$tmp/longctx" "$tmp/test_gpu_self_extend"
  carry_libs "$tmp/lib" "$build/src/cli/longctx" "$build/tests/gpu/test_gpu_self_extend"
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" longctx test_gpu_self_extend lib
  git -C "$HERE" rev-parse --short HEAD > "$carry/commit.txt"
  cp "$0" "$HERE/gpu-carry.sh" "$carry/"
  [ -n "$part" ] && cp "$part"/*.part*of* "$carry/"
  du -sb "$carry"/*; du -sh "$carry"
  exit 0
fi

export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
BIN=/tmp/longctx-se-bin
# Logs in a fresh $OUT; on exit all of it in $FINAL/se-all.tgz, and beside it:
out_archive gpu-se-out se-all.tgz env.txt summary.txt
unpack_bin "$HERE/bin.tar.xz" "$BIN"
record_env "$OUT/env.txt" "$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)"
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-185}
status=0

# step (gpu-carry.sh): stdout in $OUT/NAME.txt, stderr in NAME.log, each limit cut to what is
# left of BUDGET_S; the digest below after each step.
STEP_SPLIT=1 STEP_BUDGET_S=$BUDGET_S STEP_T0=$T0 STEP_MIN_S=5
step_show() { tail -n 25 "$OUT/$1.txt"; grep -m3 "longctx:" "$OUT/$1.log"; }

step tests 60 "$BIN/test_gpu_self_extend"
grep -E "^\[ +(PASSED|FAILED|OK|SKIPPED) +\]" "$OUT/tests.txt" >> "$OUT/summary.txt"

# Different G:W per phase is refused before any work, with the CLI's `longctx: ...` line (HiP +
# Self-Extend runs on the GPU: scripts/gpu-hip-self-extend.sh).
export BIN
step refuse 20 bash -c '"$BIN/longctx" bench model --device cuda --random-weights smollm2-135m --lengths 1k \
  --attn "prefill:dense=self_extend=4:1024;decode:dense=self_extend=8:1024" 2>&1 | tee /dev/stderr |
  grep -q "^longctx: .*the same self_extend=G:W in both phases"'

for attn in dense "$SE"; do
  tag=${attn//[=:]/_}
  step "bench_$tag" 40 "$BIN/longctx" bench model --device cuda --random-weights smollm2-135m --lengths 8k,16k,32k \
    --decode 32 --repeats 2 --attn "$attn" --json "$OUT/bench_$tag.json"
done

mkdir -p "$LONGCTX_CACHE/models"
join_model "$HERE" "$MODEL_NAME" "$MODEL_SHA" > "$OUT/model.txt" 2>&1
cat "$OUT/model.txt"
M="$LONGCTX_CACHE/models/$MODEL_NAME"
if [ -f "$M" ]; then
  EV=("$BIN/longctx" eval -m "$M" --device cuda --no-chat --depths 0,0.25,0.5,0.75,1 --samples 4 -c 33000 --extrapolate
      --attn "dense,$SE")
  step passkey 90 "${EV[@]}" passkey --lengths 8k,16k,32k --json "$OUT/passkey.json"
  step niah 60 "${EV[@]}" niah_single --lengths 8k,16k,32k --json "$OUT/niah.json"
else
  echo "== passkey, niah: SKIPPED (the default model is not on this machine: $(tail -1 "$OUT/model.txt"))" |
    tee -a "$OUT/summary.txt"
fi
echo "total $(( $(date +%s) - T0 )) s, status $status" | tee -a "$OUT/summary.txt"
exit $status
