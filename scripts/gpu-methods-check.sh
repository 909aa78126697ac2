#!/usr/bin/env bash
# gpu-methods-check.sh: one device call that checks the method framework on the GPU: the GPU tests
# of the new tree, then old (before the framework) vs new binaries side by side on the same GPU
# (dense and MInference prefill at 128K, MInference at 512K, dense at 1M: the no-regression target), then sparse decode end
# to end (A-shape decode vs dense decode, decode tokens/s at 128K and 1M).
# Here (no GPU needed):
#   OLD=/path/to/old/build NEW=build CARRY=.carry/methods [EXTRA_TESTS=tests/kv/test_kv] \
#     scripts/gpu-methods-check.sh --pack [--model-part 1|2]
# There (carry the CARRY folder):
#   CARRY=.carry/methods OUT=$OUT scripts/gpu-methods-check.sh [--tests FILTER] [--steps "tests ab128 decode ab1m"]
#   (also "abdecode": old vs new decode tokens/s at 128K, dense and sparse)
# Everything lands in $OUT (logs, bench JSON as methods-all.tgz) and a summary table is printed last.
# Geometry: Llama-3-8B with random weights; "llama3-8b:N" keeps N of its 32 layers where a full
# model would not fit the 10-minute call (per-layer work is identical: ratios hold).
set -uo pipefail
CARRY=${CARRY:-.carry/methods}
MODEL_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
MINF=configs/minference/Llama-3-8B-Instruct-262k.json

if [ "${1:-}" = "--pack" ]; then
  tmp=/tmp/methods-pack; rm -rf "$tmp" "$CARRY"; mkdir -p "$tmp/old" "$tmp/new" "$tmp/lib" "$CARRY"
  cp "$OLD/src/cli/longctx" "$tmp/old/"
  for b in src/cli/longctx tests/gpu/test_gpu tests/cuda/test_cuda ${EXTRA_TESTS:-}; do cp "$NEW/$b" "$tmp/new/"; done
  strip "$tmp"/old/* "$tmp"/new/*
  for lib in $(ldd "$tmp"/old/* "$tmp"/new/* | awk '/=> \// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|ld-linux*|libcublas*|libcuda*) ;;
      *) cp -L "$lib" "$tmp/lib/" ;;
    esac
  done
  XZ_OPT=-9 tar -C "$tmp" -cJf "$CARRY/bin.tar.xz" old new lib
  if [ "${2:-}" = "--model-part" ]; then
    m=${LONGCTX_CACHE:-$HOME/.cache/longctx}/models/$MODEL_NAME; half=$(( ($(stat -c %s "$m") + 1) / 2 ))
    if [ "$3" = 1 ]; then head -c $half "$m" > "$CARRY/model.part1"; else tail -c +$((half + 1)) "$m" > "$CARRY/model.part2"; fi
  fi
  du -sh "$CARRY"/*; exit 0
fi

FINAL=${OUT:-out}; mkdir -p "$FINAL"
W=$(mktemp -d /tmp/methods-out.XXXXXX)
trap 'tar -czf "$FINAL/methods-all.tgz" -C "$W" .; cp "$W"/summary.txt "$FINAL/" 2>/dev/null' EXIT
filter='*'; steps="tests ab128 decode ab1m"
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) filter="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
BIN=/root/methods-bin; rm -rf "$BIN"; mkdir -p "$BIN"
tar -C "$BIN" -xJf "$CARRY/bin.tar.xz" || { echo "no $CARRY/bin.tar.xz"; exit 2; }
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LONGCTX_CACHE=/root/longctx-cache; mkdir -p "$LONGCTX_CACHE/models"
for p in 1 2; do [ -f "$CARRY/model.part$p" ] && cp "$CARRY/model.part$p" "$LONGCTX_CACHE/models/$MODEL_NAME.part$p"; done
mm="$LONGCTX_CACHE/models/$MODEL_NAME"
if [ ! -f "$mm" ] && [ -f "$mm.part1" ] && [ -f "$mm.part2" ]; then
  cat "$mm.part1" "$mm.part2" > "$mm.tmp"
  [ "$(sha256sum "$mm.tmp" | cut -d' ' -f1)" = "$MODEL_SHA" ] && mv "$mm.tmp" "$mm" && echo "default model joined, SHA-256 ok"
fi
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv; date -u; } | tee "$W/env.txt"

bench() {  # bench NAME BINARY(old|new) LIMIT_S ARGS...: one `bench model` process, JSON kept
  local name=$1 which=$2 limit=$3; shift 3
  local t0=$(date +%s)
  timeout "$limit" "$BIN/$which/longctx" bench model --device cuda "$@" --json "$W/$name.json" 2> "$W/$name.log"
  echo "$name: rc=$? $(( $(date +%s) - t0 )) s"; tail -n 2 "$W/$name.log"
}

for step in $steps; do
  case "$step" in
    tests)
      timeout 420 "$BIN/new/test_gpu" --gtest_filter="$filter" > "$W/test_gpu.log" 2>&1; echo "test_gpu rc=$?"
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|\[ gpu" "$W/test_gpu.log" | tail -n 25
      timeout 300 "$BIN/new/test_cuda" > "$W/test_cuda.log" 2>&1; echo "test_cuda rc=$?"; tail -n 3 "$W/test_cuda.log"
      if [ -x "$BIN/new/test_kv" ]; then
        timeout 120 "$BIN/new/test_kv" > "$W/test_kv.log" 2>&1; echo "test_kv rc=$?"; tail -n 3 "$W/test_kv.log"
      fi
      ;;
    ab128)  # old vs new, alternated, full model at 128K (bf16 cache, 16K chunks, structured Q/K)
      for w in old new new old; do
        bench "ab128_dense_$w$RANDOM" $w 120 --random-weights llama3-8b --lengths 128k --decode 2 --attn dense
        bench "ab128_minf_$w$RANDOM" $w 120 --random-weights llama3-8b --lengths 128k --decode 2 --synthetic-qk \
          --attn "minference=$MINF"
      done ;;
    decode)  # decode tokens/s, sparse (sinks 128 + window 4K) vs dense decode; A-shape prefill fills the cache
      for L in 128k 1m; do
        for d in dense sparse; do
          attn="a_shape=1024,4096"; [ $d = sparse ] && attn="prefill:a_shape=1024,4096;decode:a_shape=128,4096"
          bench "decode_${d}_$L" new 150 --random-weights llama3-8b:8 --lengths $L --decode 65 --kv-cache fp8 --attn "$attn"
        done
      done ;;
    abdecode)  # old vs new decode tokens/s at 128K, dense and sparse (8 of 32 layers, fp8 cache)
      for w in old new new old; do
        bench "abdecode_dense_$w$RANDOM" $w 100 --random-weights llama3-8b:8 --lengths 128k --decode 129 --kv-cache fp8 \
          --attn a_shape=1024,4096
        bench "abdecode_sparse_$w$RANDOM" $w 100 --random-weights llama3-8b:8 --lengths 128k --decode 129 --kv-cache fp8 \
          --attn "prefill:a_shape=1024,4096;decode:a_shape=128,4096"
      done ;;
    ab1m)  # old vs new: MInference at 512K on all 32 layers (its config names 32; 1M would need 80 GB with
           # the fp8 cache: more than an H100), dense at 1M on 2 layers (fp8 cache, layer-major)
      for w in old new; do
        bench "ab512k_minf_$w" $w 150 --random-weights llama3-8b --lengths 512k --decode 2 --synthetic-qk --kv-cache fp8 \
          --attn "minference=$MINF"
      done
      for w in old new; do
        bench "ab1m_dense_$w" $w 200 --random-weights llama3-8b:2 --lengths 1m --decode 2 --kv-cache fp8 --attn dense
      done ;;
  esac
done

python3 - "$W" <<'PY' | tee "$W/summary.txt"
import glob, json, os, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    d = json.load(open(f))
    for r in d.get("results", []):
        pa = r.get("prefill_attention", {})
        rows.append((os.path.basename(f)[:-5], r["length"], r["prefill_s"], pa.get("attention_s", 0), r["decode_tokens_per_s"]))
print(f"{'run':28s} {'length':>8s} {'prefill s':>10s} {'attn s':>8s} {'decode tok/s':>13s}")
for n, L, p, a, dt in rows:
    print(f"{n:28s} {L:8d} {p:10.3f} {a:8.3f} {dt:13.1f}")
PY
