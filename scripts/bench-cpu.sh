#!/usr/bin/env bash
# bench-cpu.sh: longctx vs HF transformers on this CPU, same model, same prompts, one after the
# other, written to bench/results/cpu-DATE-COMMIT.json with the ratios printed last.
# Needs torch + transformers + gguf + accelerate (pip); not part of the tests.
# Run: scripts/bench-cpu.sh [lengths=512,4096] [decode=32]
set -euo pipefail
cd "$(dirname "$0")/.."
lengths=${1:-512,4096}
decode=${2:-32}
threads=$(nproc)
commit=$(git rev-parse --short HEAD)
out="bench/results/cpu-$(date -u +%Y-%m-%d)-$commit.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./build/src/cli/longctx bench model --lengths "$lengths" --decode "$decode" --threads "$threads" --repeats 2 \
  --json "$tmp/longctx.json"
python3 bench/cpu_transformers_baseline.py --lengths "$(echo "$lengths" | sed 's/k/*1024/g' | python3 -c 'import sys; print(",".join(str(eval(x)) for x in sys.stdin.read().strip().split(",")))')" \
  --decode "$decode" --threads "$threads" --repeats 2 >"$tmp/hf.json"
python3 - "$tmp/longctx.json" "$tmp/hf.json" "$out" "$commit" "$lengths" "$decode" <<'PY'
import json, sys, platform, datetime, subprocess
lc, hf, out, commit, lengths, decode = sys.argv[1:]
lc, hf = json.load(open(lc)), json.load(open(hf))
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
       "command": f"scripts/bench-cpu.sh {lengths} {decode}", "baseline": hf["engine"], "rows": rows,
       "raw": {"longctx": lc, "transformers": hf}}
json.dump(rec, open(out, "w"), indent=2)
print(f"{'length':>7} {'prefill tok/s':>14} {'hf':>9} {'ratio':>6} {'decode tok/s':>13} {'hf':>7} {'ratio':>6}")
for r in rows:
    print(f"{r['length']:>7} {r['longctx_prefill_tok_s']:>14.1f} {r['transformers_prefill_tok_s']:>9.1f} {r['prefill_ratio']:>6.2f}"
          f" {r['longctx_decode_tok_s']:>13.1f} {r['transformers_decode_tok_s']:>7.1f} {r['decode_ratio']:>6.2f}")
print("written", out)
PY
