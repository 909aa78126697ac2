#!/usr/bin/env bash
# gpu-eval.sh: quality on the GPU: gemma-3-270m (head_dim 256, 32K context) and the default model
# (SmolLM2-135M) through `longctx eval --device cuda`, with models that do not fit one device call.
#
# Here (no GPU): build longctx with CUDA for a foreign host, then pack seven carry folders:
#   cmake -S . -B build-gpuint -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DBLA_STATIC=ON \
#         -DLONGCTX_PICTURES=OFF -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
#   ninja -C build-gpuint -j2 longctx
#   scripts/gpu-eval.sh --pack build-gpuint /work/main/.carry/quality
# which writes g1..g5 (gemma's GGUF in five parts: 4 x 54 MiB, then the rest beside the stripped
# binary with its shared libraries as one .tar.xz and these scripts), d1 and d2 (the default
# model's two parts, the binary and scripts beside the second). On the device, two chains of calls
# made back to back (the machine keeps /root while it stays warm, 30 s idle; each chain may start a
# fresh machine, since a machine goes back after 30 minutes held):
#   mkdir -p /root/longctx-cache/models && cp .carry/quality/gK/* /root/longctx-cache/models/   (K = 1..4)
#   OUT=$OUT bash .carry/quality/g5/gpu-eval.sh gemma      # joins gemma, greedy check, evals
#   mkdir -p /root/longctx-cache/models && cp .carry/quality/d1/* /root/longctx-cache/models/
#   OUT=$OUT bash .carry/quality/d2/gpu-eval.sh default    # joins the default model, the method grid
# Each call's reply says `warm`: a call that found no warm machine lost the parts before it.
#
# gemma: greedy continuations of the 7 golden prompts (tests/data/golden/gemma-3-270m-q4_k_m.json,
# transformers fp32 greedy tokens) on the GPU (bf16), 4 of them on the CPU engine too (fp32
# weights, --cpu-weights fp32: its exact path): tokens equal or the first divergence; then passkey
# and niah_single (--no-chat) at 4K-32K, 5 depths x 10 samples, dense and A-shape (the one sparse
# method the GPU runs at head_dim 256: the default 1024+4096 and 64+1024), and one TokenSelect run
# to record its refusal; then the default grid below when the default model is on the machine.
# default: passkey --no-chat and niah at 2K/4K/8K, 5 depths x 4 samples, dense and MInference (its
# config for this model) with the bf16 and the fp8 KV cache, HiP alone (it refuses fp8), one
# TokenSelect run to record its refusal; then passkey --no-chat and niah at 16K/32K (past the
# trained 8K, -c 33000 --extrapolate), dense, 5 depths x 2 samples.
# gemma-prerope: TokenSelect and InfiniteHiP (global layers; local layers dense over their window)
# beside dense on gemma, 4K-32K and 48K/64K past its 32K, every process in parallel (see below).
# Recorded: bench/results/gpu-eval-gemma3-270m-2026-11-26-6871021.json,
# gpu-eval-methods-2026-11-26-6871021.json; docs/evaluation.md (H100).
# Steps run in that order, each under a timeout cut to what is left of BUDGET_S (default 280 s, the
# calls run with timeout_s 300). Progress lines go to the logs (not --quiet), so a step killed at
# its limit still shows each finished sample's score. Everything lands in $OUT/eval-all.tgz, the
# summaries and env beside it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # carry_split, join_model, carry_libs, record_env
GEMMA_NAME=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  # scripts/fetch-model.sh
MINF_CONFIG=configs/minference/SmolLM2-135M-Instruct.json  # the default model's MInference config
GEMMA_MINF_CONFIG=configs/minference/gemma-3-270m-uniform-vs.json  # uniform vertical-slash, global layers
GOLDEN=tests/data/golden/gemma-3-270m-q4_k_m.json

if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 models=${LONGCTX_CACHE:-$HOME/.cache/longctx}/models tmp=/tmp/gpu-eval-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp"
  carry_split "$models/$GEMMA_NAME" 5 "$carry/g" || exit 2
  carry_split "$models/$MODEL_NAME" 2 "$carry/d" || exit 2
  cp "$build/src/cli/longctx" "$tmp/" && strip "$tmp/longctx"
  carry_libs "$tmp/lib" "$build/src/cli/longctx"
  tar -C "$tmp" -cJf "$tmp/bin.tar.xz" longctx lib  # the binary and its libraries, ~6 MB
  git -C "$HERE" rev-parse --short HEAD > "$tmp/commit.txt"
  for d in g5 d2; do cp "$0" "$HERE/gpu-carry.sh" "$tmp/commit.txt" "$tmp/bin.tar.xz" "$carry/$d/"; done
  du -sb "$carry"/*
  exit 0
fi

what=${1:?usage: gpu-eval.sh --pack BUILD CARRY | gemma | gemma-methods | gemma-prerope | default | extrap}
export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
BIN=/tmp/longctx-eval-bin
# Logs in a fresh $OUT; on exit all of it in $FINAL/eval-all.tgz, and beside it:
out_archive gpu-eval-out eval-all.tgz env.txt greedy.json summary.txt
unpack_bin "$HERE/bin.tar.xz" "$BIN"
COMMIT=$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)
record_env "$OUT/env.txt" "$COMMIT"
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-285}
status=0

# step (gpu-carry.sh): stdout in $OUT/NAME.txt, stderr in NAME.log, each limit cut to what is
# left of BUDGET_S; the digest below after each step.
STEP_SPLIT=1 STEP_BUDGET_S=$BUDGET_S STEP_T0=$T0
step_show() { cat "$OUT/$1.txt"; grep -m3 -i "longctx:\|error" "$OUT/$1.log"; }

# greedy.py (a file, so that `step` can time it): each golden prompt's greedy continuation on the
# GPU and the CPU engine against transformers' greedy tokens, into greedy.json.
cat > "$OUT/greedy.py" <<'EOF'
import json, subprocess, sys
exe, model, golden, out = sys.argv[1:5]
g = json.load(open(golden))
CPU_PROMPTS = {"plain", "story", "code", "passkey2k"}  # the CPU engine's share (16 cores, seconds each)
rows = []
for p in g["prompts"]:
    text = p["rendered"]
    chat = text.startswith("<bos>")  # the chat rendering spells BOS; the engine adds its own
    if chat:
        text = text[len("<bos>"):]
    path = f"{out}/prompt_{p['name']}.txt"
    open(path, "w").write(text)
    row = {"name": p["name"], "prompt_tokens_golden": len(p["ids"]), "golden": p["greedy"]}
    for dev in ("cuda", "cpu"):
        if dev == "cpu" and p["name"] not in CPU_PROMPTS:
            continue
        cmd = [exe, "generate", "-m", model, "-f", path, "--temp", "0", "-n", str(len(p["greedy"])),
               "--ignore-eos", "--json", "-q", "--device", dev] + (["--special"] if chat else []) + \
              (["--cpu-weights", "fp32"] if dev == "cpu" else [])  # the CPU's exact path, not its 8-bit one
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            row[dev] = {"error": r.stderr.strip()[-300:]}
            continue
        j = json.loads(r.stdout)
        toks = j["tokens"]
        first = next((i for i, (a, b) in enumerate(zip(toks, p["greedy"])) if a != b), None)
        row[dev] = {"tokens": toks, "text": j["text"], "prompt_tokens": j["prompt_tokens"],
                    "equal_to_golden": toks == p["greedy"], "first_divergence": first}
    if "tokens" in row.get("cuda", {}) and "tokens" in row.get("cpu", {}):
        a, b = row["cuda"]["tokens"], row["cpu"]["tokens"]
        row["cuda_equals_cpu"] = a == b
        row["cuda_vs_cpu_first_divergence"] = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    rows.append(row)
    short = {d: (row[d].get("equal_to_golden"), row[d].get("first_divergence"), row[d].get("prompt_tokens"))
             if "tokens" in row.get(d, {}) else row.get(d, {}).get("error") for d in ("cuda", "cpu")}
    print(p["name"], "golden tokens", len(p["ids"]), "(equal, first divergence, prompt tokens):", short, flush=True)
    # written after every prompt: a step killed at its limit keeps the rows it finished
    json.dump({"golden": golden, "reference": g["reference"], "rows": rows}, open(f"{out}/greedy.json", "w"), indent=1)
EOF

GEMMA="$LONGCTX_CACHE/models/$GEMMA_NAME"
EV=("$BIN/longctx" eval)
DEPTHS=0,0.25,0.5,0.75,1
# The default model's grid, one method list per process where a method may refuse (a refusal ends
# the whole process): HiP and TokenSelect refuse the fp8 KV cache on the GPU, TokenSelect's GPU
# side takes GQA groups of 1, 2, 4, 7, 8 (the default model has 3), so they run alone.
default_grid() {
  local kv task name
  for kv in bf16 fp8; do
    for task in "passkey --no-chat" niah; do
      name="default_$(echo "$task" | tr -cd '[:alnum:]')_$kv"
      step "$name" 45 "${EV[@]}" $task --device cuda --kv-cache $kv --lengths 2k,4k,8k --depths $DEPTHS --samples 4 \
        --attn "dense,minference=$MINF_CONFIG" --json "$OUT/$name.json"
      step "${name}_hip" 30 "${EV[@]}" $task --device cuda --kv-cache $kv --lengths 2k,4k,8k --depths $DEPTHS \
        --samples 4 --attn hip --json "$OUT/${name}_hip.json"
    done
  done
  step default_tokenselect 20 "${EV[@]}" passkey --no-chat --device cuda --lengths 2k --depths 0.5 --samples 1 \
    --attn tokenselect --json "$OUT/default_tokenselect.json"
  for task in "passkey --no-chat" niah; do
    name="default_$(echo "$task" | tr -cd '[:alnum:]')_long"
    step "$name" 60 "${EV[@]}" $task --device cuda -c 33000 --extrapolate --lengths 16k,32k --depths $DEPTHS \
      --samples 2 --attn dense --json "$OUT/$name.json"
  done
}

# Past the default model's trained 8K (issues 15, 16): niah (chat template) and passkey --no-chat
# at 16K/32K/64K, dense (plain RoPE past its range), TokenSelect (pre-RoPE keys re-numbered over
# the selection) and InfiniteHiP (3K preset, its RoPE extrapolation on), 5 depths x EXTRAP_SAMPLES
# (default 4) samples, one method per process (a refusal ends only its own step); dense at 4K on
# the same task as the bar (issue 15: InfiniteHiP past 8K at least as accurate as dense at 4K).
extrap_grid() {
  local task name m n=${EXTRAP_SAMPLES:-4}
  for task in niah "passkey --no-chat"; do
    name="extrap_$(echo "$task" | tr -cd '[:alnum:]')"
    step "${name}_dense4k" 30 "${EV[@]}" $task --device cuda --lengths 4k --depths $DEPTHS --samples $n \
      --attn dense --json "$OUT/${name}_dense4k.json"
    for m in infinitehip tokenselect dense; do
      step "${name}_$m" 70 "${EV[@]}" $task --device cuda -c 66000 --extrapolate --lengths 16k,32k,64k \
        --depths $DEPTHS --samples $n --attn $m --json "$OUT/${name}_$m.json"
    done
  done
}

# gemma-3-270m's global layers under each sparse method that takes head_dim 256 on the GPU
# (issue 19: within 1 point of dense where dense succeeds): passkey and niah_single (--no-chat) at
# 4K-32K, 5 depths x GEMMA_SAMPLES (default 4), dense then MInference (its uniform vertical-slash
# config for this model) then HiP, one method per process.
gemma_methods() {
  local task m n=${GEMMA_SAMPLES:-4}
  for task in passkey niah_single; do
    for m in dense "minference=$GEMMA_MINF_CONFIG" hip; do
      step "gemma_${task}_${m%%=*}" 80 "${EV[@]}" "$task" -m "$GEMMA" --no-chat --device cuda \
        --lengths 4k,8k,16k,32k --depths $DEPTHS --samples $n --attn "$m" --json "$OUT/gemma_${task}_${m%%=*}.json"
    done
  done
}

# gemma-3-270m under the pre-RoPE methods (TokenSelect, InfiniteHiP: global layers only, the
# sliding-window layers dense over their window) beside dense, at 4K-32K and past the trained
# 32K (48K, 64K with --extrapolate): passkey (5 depths x GEMMA_SAMPLES, default 8) and niah_single
# (GEMMA_SAMPLES x 2 samples, one depth each). One process per (task, method), all in parallel on
# the one GPU (each is small and latency bound), each under PAR_LIMIT_S (default 240 s).
gemma_prerope() {
  local task m tag n=${GEMMA_SAMPLES:-8} lim=${PAR_LIMIT_S:-240}
  par() {  # par NAME ARGS...: one eval process in the background, its rc and time in summary.txt
    local name=$1; shift
    ( t=$(date +%s); timeout "$lim" "${EV[@]}" "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log"
      echo "== $name: rc=$?, $(( $(date +%s) - t )) s" >> "$OUT/summary.txt" ) &
  }
  for m in dense tokenselect infinitehip; do
    par "gemma_passkey_$m" passkey -m "$GEMMA" --no-chat --device cuda --lengths 4k,8k,16k,32k --depths $DEPTHS \
      --samples "$n" --attn "$m"
    par "gemma_niahsingle_$m" niah_single -m "$GEMMA" --no-chat --device cuda --lengths 4k,8k,16k,32k \
      --samples $(( 2 * n )) --attn "$m"
    par "gemma_passkey_long_$m" passkey -m "$GEMMA" --no-chat --device cuda -c 66000 --extrapolate \
      --lengths 48k,64k --depths $DEPTHS --samples $(( n / 2 )) --attn "$m"
  done
  wait
  for f in "$OUT"/gemma_*.txt; do echo "== $f"; cat "$f"; done
}

case $what in
  gemma-prerope)
    join_model "$HERE" "$GEMMA_NAME" "$GEMMA_SHA" | tee -a "$OUT/summary.txt" || { echo "GEMMA NOT HERE"; exit 1; }
    gemma_prerope
    ;;
  gemma-methods)
    join_model "$HERE" "$GEMMA_NAME" "$GEMMA_SHA" | tee -a "$OUT/summary.txt" || { echo "GEMMA NOT HERE"; exit 1; }
    gemma_methods
    ;;
  extrap)
    join_model "$HERE" "$MODEL_NAME" "$MODEL_SHA" | tee -a "$OUT/summary.txt" || { echo "DEFAULT MODEL NOT HERE"; exit 1; }
    extrap_grid
    ;;
  gemma)
    join_model "$HERE" "$GEMMA_NAME" "$GEMMA_SHA" | tee -a "$OUT/summary.txt" || { echo "GEMMA NOT HERE"; exit 1; }
    [ -f "$LONGCTX_CACHE/models/$MODEL_NAME" ] && echo "the default model is here already" | tee -a "$OUT/summary.txt"
    step greedy 75 python3 "$OUT/greedy.py" "$BIN/longctx" "$GEMMA" "$GOLDEN" "$OUT"
    for task in passkey niah_single; do
      step "gemma_${task}" 80 "${EV[@]}" "$task" -m "$GEMMA" --no-chat --device cuda --lengths 4k,8k,16k,32k \
        --depths $DEPTHS --samples 10 --attn dense,a_shape,a_shape=64,1024 --json "$OUT/gemma_${task}.json"
    done
    step gemma_tokenselect 20 "${EV[@]}" passkey -m "$GEMMA" --no-chat --device cuda --lengths 4k --depths 0.5 \
      --samples 1 --attn tokenselect --json "$OUT/gemma_tokenselect.json"
    # the default model's grid too when an earlier call left it here (skips what the budget does not allow)
    [ -f "$LONGCTX_CACHE/models/$MODEL_NAME" ] && default_grid
    ;;
  default)
    join_model "$HERE" "$MODEL_NAME" "$MODEL_SHA" | tee -a "$OUT/summary.txt" || { echo "DEFAULT MODEL NOT HERE"; exit 1; }
    default_grid
    ;;
  *) echo "unknown: $what (gemma | gemma-methods | gemma-prerope | default | extrap)" >&2; exit 2 ;;
esac
echo "total $(( $(date +%s) - T0 )) s"
exit $status
