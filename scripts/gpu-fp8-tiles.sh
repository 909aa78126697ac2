#!/usr/bin/env bash
# gpu-fp8-tiles.sh: fp8 e4m3 K/V tiles in the sparse prefill attention (--attn-tiles fp8, issue 15
# item 5) on the device, in two calls made back to back (the default model travels in two parts;
# /root survives between calls while the machine stays warm, 30 s idle).
#
# Here (no GPU): build test_cuda in build/ (as gpu-suite.sh) and longctx in build-dev/, configured
# as build/ plus -DBLA_STATIC=ON -DLONGCTX_PICTURES=OFF
# -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" (no OpenBLAS / cairo .so to carry),
# then
#   scripts/gpu-fp8-tiles.sh --pack build build-dev /work/main/.carry/fp8-engine
# which writes a/ (part 1 of the xz-compressed model, test_cuda) and b/ (part 2, longctx, the
# perplexity text), each with this script and gpu-carry.sh. On the device, back to back:
#   call 1: OUT=$OUT bash .carry/fp8-engine/a/gpu-fp8-tiles.sh tests
#   call 2: OUT=$OUT bash .carry/fp8-engine/b/gpu-fp8-tiles.sh eval
# tests: stores model part 1 under /root/longctx-cache/models, then the generic sparse kernel's
#   tests (bf16 and fp8 tiles vs the fp64 oracle, perf lines bf16 vs fp8). (test_gpu does not fit
#   the two calls with the model: its AttnTiles cases run in scripts/gpu-suite.sh.)
# eval: joins the model, then on the default model with --kv-cache fp8, every process in
#   parallel on the one GPU: perplexity (ppl, paradise_lost, 2K/4K/8K) and passkey --no-chat
#   (2K/4K/8K, 5 depths x 4 samples) for dense, MInference (its config for this model) and
#   prefill-only HiP, each sparse method with --attn-tiles bf16 and fp8; then, if time is left,
#   bench model --random-weights llama3-8b --kv-cache fp8 --synthetic-qk at 128K (all 32 layers)
#   with MInference, bf16 vs fp8 tiles.
# Everything lands in $OUT/fp8tiles-all.tgz, summary.txt and env.txt beside it. Each step has a
# timeout cut to what is left of BUDGET_S (default 285 s; the calls run with timeout_s 300).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # carry_split, join_model, carry_libs, unpack_bin, out_archive, step, record_env
MINF_CONFIG=configs/minference/SmolLM2-135M-Instruct.json
LLAMA_MINF_CONFIG=configs/minference/Llama-3-8B-Instruct-262k.json

# The default model (98 MB) and the binaries exceed two calls' 64 MiB less the checkout (~12 MB),
# so the model travels xz-compressed (90.5 MB) in two parts: a/ part 1 with test_cuda, b/ the
# rest with longctx (a build with static OpenBLAS and libstdc++, no cairo: build-dev, see the
# report). MODEL_XZ_PART1 bytes of the .xz go with a/ (default: what leaves A_MAX for a/).
A_MAX=${A_MAX:-$((53500 * 1000))}
if [ "${1:-}" = "--pack" ]; then
  build_tests=$2 build_cli=$3 carry=$4 tmp=/tmp/gpu-fp8-tiles-pack models=${LONGCTX_CACHE:-$HOME/.cache/longctx}/models
  rm -rf "$carry" "$tmp" && mkdir -p "$carry/a" "$carry/b" "$tmp/a" "$tmp/b/lib"
  xzm=/tmp/gpu-fp8-tiles-model.xz  # kept between packs: compressing takes a minute or two
  [ -s "$xzm" ] || xz -T2 -6 -k -c "$models/$MODEL_NAME" > "$xzm" || exit 2
  cp "$build_tests/tests/cuda/test_cuda" "$tmp/a/" && strip "$tmp/a/test_cuda"
  tar -C "$tmp/a" -cJf "$carry/a/bin.tar.xz" test_cuda
  cp "$build_cli/src/cli/longctx" "$tmp/b/" && strip "$tmp/b/longctx"
  carry_libs "$tmp/b/lib" "$build_cli/src/cli/longctx"
  tar -C "$tmp/b" -cJf "$carry/b/bin.tar.xz" longctx lib
  xz -T2 -c "${LONGCTX_CACHE:-$HOME/.cache/longctx}/texts/paradise_lost.txt" > "$carry/b/paradise_lost.txt.xz"
  git -C "$HERE" rev-parse --short HEAD > "$tmp/commit.txt"
  for d in a b; do cp "$0" "$HERE/gpu-carry.sh" "$tmp/commit.txt" "$carry/$d/"; done
  p1=$(( A_MAX - $(du -sb "$carry/a" | cut -f1) ))
  head -c "$p1" "$xzm" > "$carry/a/model.xz.part1"
  tail -c +$(( p1 + 1 )) "$xzm" > "$carry/b/model.xz.part2"
  du -sb "$carry"/*
  exit 0
fi

# join_xz_model CARRY: store the .xz part(s) found in CARRY under $LONGCTX_CACHE/models; once both
# are there, decompress into the default model and check its SHA-256.
join_xz_model() {
  local mdir="$LONGCTX_CACHE/models" p
  mkdir -p "$mdir"
  for p in "$1"/model.xz.part*; do [ -f "$p" ] && cp "$p" "$mdir/" && echo "$(basename "$p") stored"; done
  [ -f "$mdir/$MODEL_NAME" ] && { echo "default model: already here"; return 0; }
  [ -f "$mdir/model.xz.part1" ] && [ -f "$mdir/model.xz.part2" ] || { echo "default model: a part is not here yet"; return 1; }
  cat "$mdir/model.xz.part1" "$mdir/model.xz.part2" | xz -d > "$mdir/$MODEL_NAME.tmp"
  if [ "$(sha256sum "$mdir/$MODEL_NAME.tmp" | cut -d' ' -f1)" = "$MODEL_SHA" ]; then
    mv "$mdir/$MODEL_NAME.tmp" "$mdir/$MODEL_NAME"; echo "default model joined, SHA-256 ok"
  else
    rm -f "$mdir/$MODEL_NAME.tmp"; echo "default model: the joined parts do not match the SHA-256"; return 1
  fi
}

what=${1:?usage: gpu-fp8-tiles.sh --pack BUILD CARRY | tests | eval}
export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
BIN=/tmp/fp8-tiles-bin
out_archive gpu-fp8-tiles-out fp8tiles-all.tgz env.txt summary.txt
unpack_bin "$HERE/bin.tar.xz" "$BIN"
COMMIT=$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)
record_env "$OUT/env.txt" "$COMMIT"
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-285}
STEP_BUDGET_S=$BUDGET_S STEP_T0=$T0
status=0
step_show() { tail -n 25 "$OUT/$1.log" | grep -v "^\[ *RUN\|^\[ *OK" | tail -n 12; }

# par NAME LIMIT ARGS...: one `longctx eval` process in the background (the evals are small and
# latency bound: all of them share the GPU), its rc and time appended to summary.txt.
par() {
  local name=$1 lim=$2
  shift 2
  ( t=$(date +%s); timeout "$lim" "$BIN/longctx" eval "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log"
    echo "== $name: rc=$?, $(( $(date +%s) - t )) s" >> "$OUT/summary.txt" ) &
}

case $what in
  tests)
    join_xz_model "$HERE" | tee -a "$OUT/summary.txt"  # part 1: "not here yet" is expected
    step sparse_generic 240 "$BIN/test_cuda" --gtest_filter='SparseGeneric*'
    ;;
  eval)
    join_xz_model "$HERE" | tee -a "$OUT/summary.txt"
    [ -f "$LONGCTX_CACHE/models/$MODEL_NAME" ] || { echo "DEFAULT MODEL NOT HERE"; exit 1; }
    TEXT="$OUT/paradise_lost.txt"
    xz -d -c "$HERE/paradise_lost.txt.xz" > "$TEXT"
    DEPTHS=0,0.25,0.5,0.75,1
    lim=${EVAL_LIMIT_S:-150}
    common=(--device cuda --kv-cache fp8 --lengths 2k,4k,8k)
    par ppl_dense "$lim" ppl "${common[@]}" --samples 2 --text "$TEXT" --attn dense
    par passkey_dense "$lim" passkey --no-chat "${common[@]}" --depths $DEPTHS --samples 4 --attn dense
    for tiles in bf16 fp8; do
      for m in "minference=$MINF_CONFIG" "prefill:hip"; do
        tag="$(echo "${m%%=*}" | tr -cd '[:alnum:]')_$tiles"
        par "ppl_$tag" "$lim" ppl "${common[@]}" --samples 2 --text "$TEXT" --attn "$m" --attn-tiles $tiles
        par "passkey_$tag" "$lim" passkey --no-chat "${common[@]}" --depths $DEPTHS --samples 4 --attn "$m" \
          --attn-tiles $tiles
      done
    done
    wait
    for f in "$OUT"/ppl_*.txt "$OUT"/passkey_*.txt; do echo "== $f"; cat "$f"; grep -m2 "longctx:" "${f%.txt}.log"; done
    # Prefill time at 128K on the Llama-3-8B geometry (its MInference config needs all 32 layers), fp8 cache.
    for tiles in bf16 fp8; do
      step "bench_minf_$tiles" 60 "$BIN/longctx" bench model --device cuda --random-weights llama3-8b --synthetic-qk \
        --kv-cache fp8 --attn "minference=$LLAMA_MINF_CONFIG" --attn-tiles $tiles --lengths 128k --decode 2 \
        --json "$OUT/bench_minf_$tiles.json"
    done
    ;;
  *) echo "unknown: $what (tests | eval)" >&2; exit 2 ;;
esac
echo "total $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
exit $status
