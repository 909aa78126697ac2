#!/usr/bin/env bash
# gpu-search-gemma.sh: MInference's per-head pattern search for gemma-3-270m on the GPU (issue 19),
# then passkey with the searched configs beside dense and the uniform vertical-slash config.
#
# Here (no GPU): build longctx with CUDA for a foreign host (as scripts/gpu-eval.sh), then pack:
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DBLA_STATIC=ON \
#         -DLONGCTX_PICTURES=OFF -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
#   ninja -C build-gpu -j2 longctx
#   scripts/gpu-search-gemma.sh --pack build-gpu /work/main/.carry/search-gemma
# which writes g1..g4 (gemma's GGUF in 54 MiB parts, the same bytes as gpu-eval.sh's g1..g4) and
# g5 (the last part, the stripped binary and its libraries as one .tar.xz, the search samples,
# this script and gpu-carry.sh). The samples are made here by tools/make_search_samples.py and
# fitted to SAMPLE_TOKENS gemma tokens (default 30000, the paper's ~30K) by counting them with
# the packed longctx (its refusal of a too-long prompt names the count; no transformers needed).
# On the device, one chain of calls made back to back (files under /root survive while warm):
#   mkdir -p /root/longctx-cache/models && cp .carry/search-gemma/gK/* /root/longctx-cache/models/   (K = 1..4)
#   OUT=$OUT bash .carry/search-gemma/g5/gpu-search-gemma.sh
# The last call: joins the model (SHA-256 checked), then
#   search_kv    the paper's settings (docs/minference.md; /work/shared/notes/minference.md 5.1):
#                one ~30K-token KV-retrieval sample, Table 4 candidates FLOPs-matched to A-shape
#                (1024, 4096) (r = S / 30720 ~ 1: the budgets as printed), the lowest output error
#                per head, no dense fallback -> gemma-searched-kv.json;
#   search_mix   the recipe that made the default model's config equal dense (docs/minference.md
#                "Quality on the default model"): four ~30K samples (kv, passkey at 40% and 80%,
#                prose at 60%), errors averaged, heads above 5% error written dense
#                (--dense-above 0.05) -> gemma-searched-mix.json;
#   passkey_N    `longctx eval passkey --no-chat` at 16K, 32K, 8K, 4K, 5 depths x PASSKEY_SAMPLES (default
#                8: 40 prompts per cell), seed 42, methods side by side in one process: dense, the
#                uniform config, the config search_kv's settings gave on the CPU (committed:
#                configs/minference/gemma-3-270m-searched-kv30k.json, the same sample), the two
#                searched here (the earlier run: docs/evaluation.md "Sparse methods on
#                gemma-3-270m's global layers, on the GPU", 4 of 40 lost at 16K).
# Only the 3 global layers (5, 11, 17) are searched; the 15 sliding-window layers keep their
# window (written stream_llm with 0 sinks and window 512; the engine runs them dense).
# Each step under a timeout cut to what is left of BUDGET_S (default 540 s: call with timeout_s
# 600); everything in $OUT/search-gemma.tgz, the configs, summary and env beside it.
# DEVICE=cpu BUDGET_S=60 runs the same steps on the CPU here (cut by their limits): a dry run of
# the script's mechanics after --pack, with LONGCTX_CACHE pointing at a folder with the parts.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # carry_split, join_model, carry_libs, record_env
GEMMA_NAME=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  # scripts/fetch-model.sh
UNIFORM=gemma-3-270m-uniform-vs.json  # configs/minference/: every head vertical_and_slash
CPU_SEARCHED=gemma-3-270m-searched-kv30k.json  # configs/minference/: search_kv's settings, on the CPU
# Sample kinds of the mixed search: kind depth seed (tools/make_search_samples.py).
MIX_SAMPLES=("kv 0 11" "passkey 0.4 12" "passkey 0.8 13" "prose 0.6 14")

# fit_sample BIN MODEL KIND DEPTH SEED TARGET FILE: the longest sample of KIND with at most TARGET
# tokens of MODEL's tokenizer. make_search_samples.py without transformers guesses 4 characters
# per token (gemma spends ~1.2 characters per token on UUIDs); the real count (longctx generate's
# up-front refusal of a prompt + new tokens beyond the context names it, after loading the model:
# ~10 s) rescales the request, a few rounds, keeping the best fit under TARGET.
fit_sample() {
  local bin=$1 model=$2 kind=$3 depth=$4 seed=$5 target=$6 file=$7 ask=$6 n best=0 round
  for round in 1 2 3 4; do
    python3 "$REPO/tools/make_search_samples.py" --kind "$kind" --depth "$depth" --seed "$seed" --tokens "$ask" \
      --model "$model" > "$file.try" || return 1
    n=$("$bin" generate -m "$model" -f "$file.try" -n 1000000 --device cpu -q 2>&1 | sed -En 's/.*prompt (has |\()([0-9]+) tokens.*/\2/p')
    [ -n "$n" ] || { echo "fit_sample: no token count for $kind"; return 1; }
    echo "fit_sample $kind: asked $ask, got $n tokens (target $target)"
    if [ "$n" -le "$target" ] && [ "$n" -gt "$best" ]; then best=$n; cp "$file.try" "$file"; fi
    [ "$n" -le "$target" ] && [ $(( target - n )) -lt $(( target / 100 )) ] && break
    ask=$(( ask * target / n * 995 / 1000 ))
  done
  rm -f "$file.try"
  [ "$best" -gt 0 ] || { echo "fit_sample: no $kind sample under $target tokens"; return 1; }
  echo "$kind: $best tokens -> $file"
}

if [ "${1:-}" = "--pack" ]; then
  build=${2:?--pack BUILD CARRY} carry=${3:?--pack BUILD CARRY} tmp=/tmp/gpu-search-gemma-pack
  REPO=$(cd "$HERE/.." && pwd)
  models=${LONGCTX_CACHE:-$HOME/.cache/longctx}/models target=${SAMPLE_TOKENS:-30000}
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp/samples"
  i=0
  for s in "${MIX_SAMPLES[@]}"; do
    read -r kind depth seed <<< "$s"
    fit_sample "$build/src/cli/longctx" "$models/$GEMMA_NAME" "$kind" "$depth" "$seed" "$target" \
      "$tmp/samples/s$i-$kind.txt" || exit 2
    i=$((i + 1))
  done
  carry_split "$models/$GEMMA_NAME" 5 "$carry/g" || exit 2
  cp "$build/src/cli/longctx" "$tmp/" && strip "$tmp/longctx"
  carry_libs "$tmp/lib" "$build/src/cli/longctx"
  tar -C "$tmp" -cJf "$tmp/bin.tar.xz" longctx lib samples
  git -C "$REPO" rev-parse --short HEAD > "$tmp/commit.txt"
  cp "$0" "$HERE/gpu-carry.sh" "$REPO/configs/minference/$UNIFORM" "$REPO/configs/minference/$CPU_SEARCHED" \
    "$tmp/commit.txt" "$tmp/bin.tar.xz" "$carry/g5/"
  du -sb "$carry"/*
  exit 0
fi

export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
BIN=/tmp/longctx-search-bin
# Logs in a fresh $OUT; on exit all of it in $FINAL/search-gemma.tgz, and beside it:
out_archive gpu-search-out search-gemma.tgz env.txt summary.txt gemma-searched-kv.json gemma-searched-mix.json \
  passkey-16k.json passkey-32k.json
unpack_bin "$HERE/bin.tar.xz" "$BIN"
record_env "$OUT/env.txt" "$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)"
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
DEVICE=${DEVICE:-cuda}
status=0

# step (gpu-carry.sh): stdout in $OUT/NAME.txt, stderr in NAME.log, each limit cut to what is
# left of BUDGET_S; the digest below after each step.
STEP_SPLIT=1 STEP_BUDGET_S=$BUDGET_S STEP_T0=$T0
step_show() { cat "$OUT/$1.txt"; grep -m3 "longctx:\|search-patterns: wrote" "$OUT/$1.log"; }

join_model "$HERE" "$GEMMA_NAME" "$GEMMA_SHA" | tee -a "$OUT/summary.txt"
GEMMA="$LONGCTX_CACHE/models/$GEMMA_NAME"
[ -f "$GEMMA" ] || { echo "GEMMA NOT HERE: copy the parts g1..g4 first" | tee -a "$OUT/summary.txt"; exit 1; }
S="$BIN/samples"
step search_kv 120 "$BIN/longctx" search-patterns -m "$GEMMA" --device "$DEVICE" --sample "$S/s0-kv.txt" \
  -o "$OUT/gemma-searched-kv.json" --report "$OUT/report-kv.json"
step search_mix 180 "$BIN/longctx" search-patterns -m "$GEMMA" --device "$DEVICE" --sample "$S/s0-kv.txt" \
  --sample "$S/s1-passkey.txt" --sample "$S/s2-passkey.txt" --sample "$S/s3-prose.txt" --dense-above 0.05 \
  -o "$OUT/gemma-searched-mix.json" --report "$OUT/report-mix.json"
methods="dense,minference=$HERE/$UNIFORM,minference=$HERE/$CPU_SEARCHED"
for c in kv mix; do [ -s "$OUT/gemma-searched-$c.json" ] && methods+=",minference=$OUT/gemma-searched-$c.json"; done
# One process per length, all four in parallel on the one GPU (each is small and latency bound),
# so a step cut at its limit loses one length, not all.
for len in 16k 32k 8k 4k; do
  step "passkey_$len" 200 "$BIN/longctx" eval passkey -m "$GEMMA" --no-chat --device "$DEVICE" --lengths $len \
    --depths 0,0.25,0.5,0.75,1 --samples "${PASSKEY_SAMPLES:-8}" --attn "$methods" --json "$OUT/passkey-$len.json" &
done
wait
exit $status
