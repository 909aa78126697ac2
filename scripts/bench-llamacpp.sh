#!/usr/bin/env bash
# bench-llamacpp.sh: longctx's CPU path vs llama.cpp on this CPU, same GGUF files, same prompt
# length, 2 threads, runs alternated (longctx, llama.cpp, next file, ...) for `rounds` rounds so
# that changes in machine load hit both; the medians over rounds are compared. Files: the default
# model (SmolLM2-135M-Instruct Q4_1) and Q4_0 / Q8_0 copies made by llama.cpp's own quantizer.
# llama.cpp comes from PyPI (llama-cpp-python, built from source on first use, ~10 min on 2
# cores) into a venv under $LONGCTX_CACHE (default ~/.cache/longctx); nothing here runs in CI.
# longctx also runs its exact fp32 path on the Q4_1 file (--cpu-weights fp32), as the before.
# Writes bench/results/cpu-llamacpp-DATE-COMMIT.json and prints a docs/benchmarks.md table.
# Run: scripts/bench-llamacpp.sh [rounds=5] [decode=64] [length=512]   (after building longctx)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
decode=${2:-64}
length=${3:-512}
threads=2
cache="${LONGCTX_CACHE:-$HOME/.cache/longctx}"
venv="$cache/llamacpp-venv"
py="$venv/bin/python"
longctx=./build/src/cli/longctx
[ -x "$longctx" ] || { echo "bench-llamacpp: build longctx first (cmake --build build --target longctx)" >&2; exit 1; }
if ! "$py" -c "import llama_cpp, numpy" 2>/dev/null; then
  echo "bench-llamacpp: installing llama-cpp-python into $venv (compiles llama.cpp)" >&2
  python3 -m venv "$venv"
  CMAKE_BUILD_PARALLEL_LEVEL=2 "$venv/bin/pip" install --quiet llama-cpp-python numpy
fi
src="$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$src" ] || { echo "bench-llamacpp: $src is missing (scripts/fetch-model.sh)" >&2; exit 1; }
copies="$cache/bench-models"
mkdir -p "$copies"
declare -A files=([Q4_1]="$src")
for t in Q4_0 Q8_0; do
  files[$t]="$copies/SmolLM2-135M-Instruct.$t.gguf"
  [ -f "${files[$t]}" ] || "$py" bench/llamacpp_quantize.py "$src" "${files[$t]}" "$t"
done
commit=$(git rev-parse --short HEAD)
out="bench/results/cpu-llamacpp-$(date -u +%Y-%m-%d)-$commit.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for t in Q4_1 Q4_0 Q8_0; do
    echo "round $r/$rounds $t: longctx, llama.cpp ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
    cut -d' ' -f1 /proc/loadavg >"$tmp/load-$t-$r"
    "$longctx" bench model -m "${files[$t]}" --lengths "$length" --decode "$decode" --threads "$threads" --repeats 2 \
      --json "$tmp/longctx-$t-$r.json" 2>/dev/null
    "$py" bench/llamacpp_baseline.py "${files[$t]}" --length "$length" --decode "$decode" --threads "$threads" \
      >"$tmp/llama-$t-$r.json"
    if [ "$t" = Q4_1 ]; then  # the exact path too (what the CPU engine did before the quantized one)
      "$longctx" bench model -m "${files[$t]}" --lengths "$length" --decode "$decode" --threads "$threads" --repeats 2 \
        --cpu-weights fp32 --json "$tmp/fp32-$t-$r.json" 2>/dev/null
    fi
  done
done
"$py" - "$tmp" "$out" "$commit" "$rounds" "$decode" "$length" <<'PY'
import datetime, glob, json, platform, statistics, sys
tmp, out, commit, rounds, decode, length = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
rows, raw = [], {}
for t in ["Q4_1", "Q4_0", "Q8_0"]:
    lc = [json.load(open(f)) for f in sorted(glob.glob(f"{tmp}/longctx-{t}-*.json"))]
    ll = [json.load(open(f)) for f in sorted(glob.glob(f"{tmp}/llama-{t}-*.json"))]
    loads = [float(open(f).read()) for f in sorted(glob.glob(f"{tmp}/load-{t}-*"))]
    med = lambda runs, k: statistics.median(r["results"][0][k] for r in runs)
    row = {"type": t, "load_avg_1min": [min(loads), max(loads)]}
    for k, name in [("prefill_tokens_per_s", "prefill"), ("decode_tokens_per_s", "decode")]:
        row[f"longctx_{name}_tok_s"], row[f"llamacpp_{name}_tok_s"] = med(lc, k), med(ll, k)
        row[f"{name}_ratio"] = row[f"longctx_{name}_tok_s"] / row[f"llamacpp_{name}_tok_s"]
        # per-round ratios (each round's two runs were back to back)
        row[f"{name}_round_ratios"] = [a["results"][0][k] / b["results"][0][k] for a, b in zip(lc, ll)]
    rows.append(row)
    raw[t] = {"longctx": lc, "llamacpp": ll}
    fp = [json.load(open(f)) for f in sorted(glob.glob(f"{tmp}/fp32-{t}-*.json"))]
    if fp:
        raw[t]["longctx_fp32"] = fp
        row["longctx_fp32_prefill_tok_s"] = med(fp, "prefill_tokens_per_s")
        row["longctx_fp32_decode_tok_s"] = med(fp, "decode_tokens_per_s")
engine = raw["Q4_1"]["llamacpp"][0]["engine"]
rec = {"name": "cpu-longctx-vs-llamacpp", "device": f"CPU: {cpu}, 2 threads", "commit": commit,
       "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "baseline": engine,
       "command": f"scripts/bench-llamacpp.sh {rounds} {decode} {length}", "prompt_tokens": int(length),
       "decode_tokens": int(decode), "statistic": "median over rounds of each engine's best of 2 in-process runs",
       "rows": rows, "raw": raw}
json.dump(rec, open(out, "w"), indent=2)
print(f"| file | longctx prefill tok/s | llama.cpp | ratio | longctx decode tok/s | llama.cpp | ratio | load avg |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['type']} | {r['longctx_prefill_tok_s']:.0f} | {r['llamacpp_prefill_tok_s']:.0f} | {r['prefill_ratio']:.2f} "
          f"| {r['longctx_decode_tok_s']:.1f} | {r['llamacpp_decode_tok_s']:.1f} | {r['decode_ratio']:.2f} "
          f"| {r['load_avg_1min'][0]:.1f}-{r['load_avg_1min'][1]:.1f} |")
for r in rows:
    if "longctx_fp32_prefill_tok_s" in r:
        print(f"| {r['type']}, longctx --cpu-weights fp32 | {r['longctx_fp32_prefill_tok_s']:.0f} | {r['llamacpp_prefill_tok_s']:.0f} "
              f"| {r['longctx_fp32_prefill_tok_s'] / r['llamacpp_prefill_tok_s']:.2f} | {r['longctx_fp32_decode_tok_s']:.1f} "
              f"| {r['llamacpp_decode_tok_s']:.1f} | {r['longctx_fp32_decode_tok_s'] / r['llamacpp_decode_tok_s']:.2f} | |")
print("per-round ratios (prefill, decode):")
for r in rows:
    print(f"  {r['type']}: " + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(r["prefill_round_ratios"], r["decode_round_ratios"])))
print("written", out)
PY
