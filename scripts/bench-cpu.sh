#!/usr/bin/env bash
# bench-cpu.sh: longctx vs HF transformers on this CPU, same model, same prompts, in alternating
# rounds (longctx, transformers, longctx, transformers, ...) so that a change in machine load
# hits both; the best time of each engine is kept. Written to bench/results/cpu-DATE-COMMIT.json
# with the ratios printed last.
# Needs torch + transformers + gguf + accelerate (pip); not part of the tests.
# Run: scripts/bench-cpu.sh [lengths=512,4096] [decode=32] [rounds=2]
set -euo pipefail
cd "$(dirname "$0")/.."
lengths=${1:-512,4096}
decode=${2:-32}
rounds=${3:-2}
threads=$(nproc)
commit=$(git rev-parse --short HEAD)
out="bench/results/cpu-$(date -u +%Y-%m-%d)-$commit.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hf_lengths=$(echo "$lengths" | sed 's/k/*1024/g' | python3 -c 'import sys; print(",".join(str(eval(x)) for x in sys.stdin.read().strip().split(",")))')
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: longctx" >&2
  ./build/src/cli/longctx bench model --lengths "$lengths" --decode "$decode" --threads "$threads" \
    --json "$tmp/longctx-$r.json"
  echo "round $r/$rounds: transformers" >&2
  python3 bench/cpu_transformers_baseline.py --lengths "$hf_lengths" --decode "$decode" --threads "$threads" \
    >"$tmp/hf-$r.json" 2>/dev/null
done
python3 - "$tmp" "$out" "$commit" "$lengths" "$decode" "$rounds" <<'PY'
import json, sys, platform, datetime, glob
tmp, out, commit, lengths, decode, rounds = sys.argv[1:]

def best(files):
    """Merge rounds: per length, the fastest prefill and the fastest decode."""
    runs = [json.load(open(f)) for f in sorted(files)]
    merged = dict(runs[0])
    merged["results"] = []
    for i, r0 in enumerate(runs[0]["results"]):
        rows = [r["results"][i] for r in runs]
        m = dict(r0)
        m["prefill_s"] = min(x["prefill_s"] for x in rows)
        m["prefill_tokens_per_s"] = max(x["prefill_tokens_per_s"] for x in rows)
        m["decode_s"] = min(x["decode_s"] for x in rows)
        m["decode_tokens_per_s"] = max(x["decode_tokens_per_s"] for x in rows)
        merged["results"].append(m)
    merged["rounds"] = runs
    return merged

lc, hf = best(glob.glob(tmp + "/longctx-*.json")), best(glob.glob(tmp + "/hf-*.json"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
rows = []
for a, b in zip(lc["results"], hf["results"]):
    rows.append({"length": a["length"],
                 "longctx_prefill_tok_s": a["prefill_tokens_per_s"], "transformers_prefill_tok_s": b["prefill_tokens_per_s"],
                 "prefill_ratio": a["prefill_tokens_per_s"] / b["prefill_tokens_per_s"],
                 "longctx_decode_tok_s": a["decode_tokens_per_s"], "transformers_decode_tok_s": b["decode_tokens_per_s"],
                 "decode_ratio": a["decode_tokens_per_s"] / b["decode_tokens_per_s"]})
rec = {"name": "cpu-model-vs-transformers", "device": f"CPU: {cpu}, {lc['threads']} threads", "commit": commit,
       "date": datetime.datetime.utcnow().strftime("%Y-%m-%d"), "model": lc["model"],
       "command": f"scripts/bench-cpu.sh {lengths} {decode} {rounds}", "baseline": hf["engine"], "rows": rows,
       "raw": {"longctx": lc, "transformers": hf}}
json.dump(rec, open(out, "w"), indent=2)
print(f"{'length':>7} {'prefill tok/s':>14} {'hf':>9} {'ratio':>6} {'decode tok/s':>13} {'hf':>7} {'ratio':>6}")
for r in rows:
    print(f"{r['length']:>7} {r['longctx_prefill_tok_s']:>14.1f} {r['transformers_prefill_tok_s']:>9.1f} {r['prefill_ratio']:>6.2f}"
          f" {r['longctx_decode_tok_s']:>13.1f} {r['transformers_decode_tok_s']:>7.1f} {r['decode_ratio']:>6.2f}")
print("written", out)
PY
