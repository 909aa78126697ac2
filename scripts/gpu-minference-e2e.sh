#!/usr/bin/env bash
# gpu-minference-e2e.sh: MInference prefill on the GPU model, end to end, in device calls:
# the GPU tests, then `longctx bench model` on the Llama-3-8B geometry (random weights, all 32
# layers) with dense attention, MInference (the published Llama-3-8B-262K config) and A-shape
# 1024+4096 (the FLOPs target of MInference's kernel-aware search) at each length, then
# optionally the evaluation suite on the GPU with the default model. JSON and logs go to
# $OUT/e2e-all.tgz (plus e2e_summary.json, env.txt, tests.log); a table (prefill time per method
# and length, dense / method ratios) is printed after the benchmarks.
# Recorded: bench/results/gpu-minference-e2e-2026-11-22-cfbccf8.json, docs/benchmarks.md.
#
# Here (no GPU needed), build and pack what travels (stripped binaries as one .tar.xz, the
# shared libraries the GPU machine lacks, optionally one half of the default model):
#   cmake -S . -B build-gpuint -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON -DBLA_STATIC=ON -DLONGCTX_PICTURES=OFF \
#         -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
#   ninja -C build-gpuint -j2 longctx test_gpu
#   CARRY=.carry/e2e1 scripts/gpu-minference-e2e.sh --pack --model-part 1
#   CARRY=.carry/e2e2 scripts/gpu-minference-e2e.sh --pack --model-part 2
# On the device (carry the CARRY folder; the two model halves in two calls made back to back,
# files under /root survive while the machine is warm):
#   CARRY=.carry/e2e1 OUT=$OUT scripts/gpu-minference-e2e.sh --tests '*' --lengths 32k        # tests + smoke
#   CARRY=.carry/e2e2 OUT=$OUT scripts/gpu-minference-e2e.sh --skip-tests --eval --lengths 128k,512k
# Options: --tests FILTER (gtest filter; default all) | --skip-tests; --lengths L,L (default
# 128k,512k; empty = no benchmark); --methods "dense minference ashape" (order run); --eval
# (passkey, passkey --no-chat and niah at 2k/4k/8k, 5 depths, 4 samples, --device cuda; env
# EVAL_ATTN: the --attn list, default dense; EVAL_TASKS: ';'-separated task runs; EVAL_LENGTHS,
# EVAL_SAMPLES: default 2k,4k,8k and 4);
# --synthetic-qk (bench model replaces each layer's Q/K after RoPE by structured synthetic vectors,
# kernels/cuda/structured_qk.h, so MInference's estimate finds realistic lines on random weights).
# --kv-cache fp8 (e4m3 KV cache, layer-major prefill: 1M tokens fit); --layers N (the first N of
# the 32 layers: per-layer work is identical, so ratios hold and time scales by 32/N; for the
# dense baseline at 1M, whose 32 layers would take ~10 minutes); --gpu-chunk N (prefill chunk,
# default 16K: MInference estimates its index once per layer and chunk).
# Each length of each method is one `bench model` process (its own warm-up), so a run killed at
# the time limit keeps what finished; each step has a timeout so a hang cannot eat the budget.
# Time: dense 512K prefill of this geometry takes ~145 s on an H200; 1M needs --kv-cache fp8 (a bf16
# KV cache of 1M tokens is 128 GiB, plus 15 GiB of weights, more than the H200's 139 GiB).
set -uo pipefail
BUILD=${BUILD:-build-gpuint}
CARRY=${CARRY:-.carry/e2e}
. "$(dirname "$0")/gpu-carry.sh"  # carry_pack, carry_unpack, record_env, join_default_model
MINF_CONFIG=configs/minference/Llama-3-8B-Instruct-262k.json

if [ "${1:-}" = "--pack" ]; then
  part=""
  [ "${2:-}" = "--model-part" ] && part="$3"
  carry_pack "$BUILD" "$CARRY" "$part"; exit 0
fi

# What comes back from a device call is at most 8 files: everything is written to a work folder,
# then packed into $OUT/e2e-all.tgz (also when a step times out), with the summary and env beside it.
FINAL=${OUT:-out}
mkdir -p "$FINAL"
OUT=$(mktemp -d /tmp/gpu-e2e-out.XXXXXX)
pack_out() {
  tar -czf "$FINAL/e2e-all.tgz" -C "$OUT" .
  for f in e2e_summary.json env.txt tests.log; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL/"; done
}
trap pack_out EXIT
skip_tests=0; filter="*"; lengths="128k,512k"; methods="ashape minference dense"; do_eval=0; synth=()
kv=(); geometry=llama3-8b; chunk=()
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-tests) skip_tests=1 ;;
    --tests) filter="$2"; shift ;;
    --lengths) lengths="$2"; shift ;;
    --methods) methods="$2"; shift ;;
    --eval) do_eval=1 ;;
    --synthetic-qk) synth=(--synthetic-qk) ;;
    --kv-cache) kv=(--kv-cache "$2"); shift ;;
    --layers) geometry="llama3-8b:$2"; shift ;;
    --gpu-chunk) chunk=(--gpu-chunk "$2"); shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
BIN=/tmp/longctx-gpu-e2e
carry_unpack "$CARRY" "$BIN" || exit 2
export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
COMMIT=${GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
status=0
record_env "$OUT/env.txt" "$COMMIT"

# Default model, in parts (for the eval / golden tests).
join_default_model "$CARRY"

if [ $skip_tests = 0 ]; then
  echo "== test_gpu ($filter)"
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-300} $BIN/test_gpu --gtest_filter="$filter" > "$OUT/tests.log" 2>&1; rc=$?
  grep -E "^\[ (gpu|engine|message)|^\[  (PASSED|FAILED|SKIPPED) |Failure|error|tests ran" "$OUT/tests.log" | head -80
  echo "test_gpu: rc=$rc, $(( $(date +%s) - t0 )) s"
  [ $rc = 0 ] || { echo "TESTS FAILED (rc=$rc)"; tail -30 "$OUT/tests.log"; status=1; }
fi

if [ -n "$lengths" ]; then
  for L in ${lengths//,/ }; do
    for m in $methods; do
      case $m in
        dense) attn=dense; limit=${DENSE_TIMEOUT:-260} ;;
        minference) attn="minference=$MINF_CONFIG"; limit=${MINF_TIMEOUT:-300} ;;
        ashape) attn="a_shape=1024,4096"; limit=${ASHAPE_TIMEOUT:-120} ;;
        *) echo "unknown method $m"; exit 2 ;;
      esac
      echo "== bench model: $geometry geometry, $L, --attn $attn ${kv[*]} ${chunk[*]}"
      t0=$(date +%s)
      timeout $limit $BIN/longctx bench model --device cuda --random-weights $geometry --attn "$attn" --lengths "$L" \
        --decode 2 "${synth[@]}" "${kv[@]}" "${chunk[@]}" --json "$OUT/e2e_${m}_${L}.json" 2> "$OUT/e2e_${m}_${L}.log"; rc=$?
      cat "$OUT/e2e_${m}_${L}.log"
      echo "($m $L: rc=$rc, $(( $(date +%s) - t0 )) s wall)"
      [ $rc = 0 ] || { echo "BENCH FAILED ($m $L, rc=$rc)"; status=1; }
    done
  done
  python3 - "$OUT" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "e2e_*_*.json"))):
    m = os.path.basename(f)[4:-5].rsplit("_", 1)[0]
    j = json.load(open(f))
    for r in j["results"]:
        rows.setdefault(r["length"], {})[m] = r
summary = []
print("\n%-8s %-11s %10s %10s %10s %8s %8s" % ("length", "method", "prefill s", "attn s", "index s", "x dense", "x attn"))
for L in sorted(rows):
    d = rows[L].get("dense")
    for m in ("dense", "minference", "ashape"):
        r = rows[L].get(m)
        if not r:
            continue
        pa = r.get("prefill_attention", {})
        ratio = d["prefill_s"] / r["prefill_s"] if d else None
        aratio = (d["prefill_attention"]["attention_s"] / pa["attention_s"]) if d and pa.get("attention_s") else None
        print("%-8d %-11s %10.2f %10.2f %10.3f %8s %8s" % (L, m, r["prefill_s"], pa.get("attention_s", 0), pa.get("index_s", 0),
              "%.2fx" % ratio if ratio else "-", "%.2fx" % aratio if aratio else "-"))
        summary.append({"length": L, "method": m, "attn": pa.get("attn"), "prefill_s": r["prefill_s"],
                        "attention_s": pa.get("attention_s"), "index_s": pa.get("index_s"),
                        "speedup_vs_dense": ratio, "attention_speedup_vs_dense": aratio,
                        "index_ranges": pa.get("index_ranges"), "index_cols": pa.get("index_cols"),
                        "sparse_gib": pa.get("sparse_gib"), "gpu_memory_gib": r.get("gpu_memory_gib")})
json.dump(summary, open(os.path.join(out, "e2e_summary.json"), "w"), indent=1)
EOF
fi

if [ $do_eval = 1 ]; then
  if [ ! -f "$LONGCTX_CACHE/models/$MODEL_NAME" ]; then
    echo "EVAL SKIPPED: the default model is not on this machine (send both parts)"; status=1
  else
    IFS=';' read -r -a eval_runs <<< "${EVAL_TASKS:-passkey;passkey --no-chat;niah}"
    for run in "${eval_runs[@]}"; do
      name=$(echo "$run" | tr -cd '[:alnum:]' | cut -c1-40)  # a file name: the run's letters and digits
      echo "== eval $run --device cuda (default model, --attn ${EVAL_ATTN:-dense}, ${EVAL_LENGTHS:-2k,4k,8k}, 5 depths, ${EVAL_SAMPLES:-4} samples)"
      t0=$(date +%s)
      timeout ${EVAL_TIMEOUT:-150} $BIN/longctx eval $run --device cuda --attn "${EVAL_ATTN:-dense}" \
        --lengths "${EVAL_LENGTHS:-2k,4k,8k}" --depths 0,0.25,0.5,0.75,1 \
        --samples "${EVAL_SAMPLES:-4}" --quiet --json "$OUT/eval_${name}.json" > "$OUT/eval_${name}.txt" 2> "$OUT/eval_${name}.log"; rc=$?
      cat "$OUT/eval_${name}.txt"; tail -3 "$OUT/eval_${name}.log"
      echo "(eval $run: rc=$rc, $(( $(date +%s) - t0 )) s)"
      [ $rc = 0 ] || { echo "EVAL FAILED ($run, rc=$rc)"; status=1; }
    done
  fi
fi
exit $status
