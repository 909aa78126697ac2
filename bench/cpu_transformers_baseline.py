#!/usr/bin/env python3
"""cpu_transformers_baseline.py: HF transformers on the CPU, the baseline for `longctx bench model`.

What: loads the same GGUF in transformers (dequantized to fp32, SDPA attention), builds the
      same prompts as longctx (the filler paragraph repeated, cut to L tokens), and times prefill
      (one forward over L tokens) and greedy decode of N tokens with the KV cache (generate(),
      timed between its first and last logits-processor calls: N-1 decode steps).
Run:  python3 bench/cpu_transformers_baseline.py --lengths 512,4096 --decode 32 --threads 2
      (scripts/bench-cpu.sh runs it next to longctx and writes bench/results/)
"""
import argparse
import json
import os
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

FILLER = ("The history of the city begins with a small settlement on the river bank. Traders came by boat, "
          "and over the centuries the market grew into a town with walls, churches and a university. ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/longctx/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--lengths", default="512,4096")
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    d, f = os.path.split(args.model)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    unit = tok(FILLER, add_special_tokens=False)["input_ids"]
    results = []
    for L in [int(x) for x in args.lengths.split(",")]:
        ids = (unit * (L // len(unit) + 1))[:L]
        x = torch.tensor([ids])
        best_p, best_d = 1e30, 1e30
        for _ in range(args.repeats):
            with torch.inference_mode():
                t0 = time.perf_counter()
                out = model(x, use_cache=True)
                t1 = time.perf_counter()
                # Decode as users run it: generate() with the KV cache. A logits processor stamps
                # the time at each step; steps 1..N-1 after the first are pure decode.
                stamps = []

                def stamp(input_ids, scores):
                    stamps.append(time.perf_counter())
                    return scores
                model.generate(x, max_new_tokens=args.decode, min_new_tokens=args.decode, do_sample=False,
                               pad_token_id=tok.eos_token_id, logits_processor=LogitsProcessorList([stamp]))
            best_p, best_d = min(best_p, t1 - t0), min(best_d, stamps[-1] - stamps[0])
        results.append({"length": L, "prefill_s": best_p, "prefill_tokens_per_s": L / best_p,
                        "decode_tokens": args.decode, "decode_s": best_d,
                        "decode_tokens_per_s": (args.decode - 1) / best_d if args.decode > 1 else 0})
    print(json.dumps({"benchmark": "model", "engine": f"transformers {__import__('transformers').__version__} "
                      f"(torch {torch.__version__}, fp32, sdpa)", "threads": args.threads, "results": results},
                     indent=2))


if __name__ == "__main__":
    main()
