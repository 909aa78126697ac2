#!/usr/bin/env python3
"""make_golden.py: golden data from the reference implementation (HF transformers, CPU, fp32).

What: loads the default model's GGUF in transformers (which dequantizes it to fp32, the same
      weights longctx uses), and writes for each prompt: the token ids, logits at a few
      positions (top-32 entries plus a fixed sample of 256 vocabulary entries), and the 32-token
      greedy continuation. tests/model/test_golden.cpp checks longctx against this file.
Why:  "correct" means "what the reference implementation computes", token for token.
Run:  by hand, not in CI (needs torch + transformers):
      python3 tools/make_golden.py [--model PATH] [--out tests/data/golden/smollm2-135m-q4_1.json]
"""
import argparse
import hashlib
import json
import os
import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

DEFAULT_MODEL = os.path.expanduser("~/.cache/longctx/models/SmolLM2-135M-Instruct.Q4_1.gguf")
N_GREEDY = 32       # greedy continuation length the tests must reproduce exactly
N_TOP = 32          # top logits stored per checked position
N_SAMPLE = 256      # fixed vocabulary sample stored per checked position
PROMPTS = [
    ("plain", "The capital of France is", False),
    ("story", "Once upon a time, in a small village by the sea, there lived an old fisherman who", False),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", False),
    ("unicode", "Zürich, Kraków and 東京 are cities; naïve café — “quotes” and emoji 🚀.", False),
    ("chat", "What is the boiling point of water at sea level, in Celsius?", True),
    ("long", " ".join(f"Item {i}: the key for box {i} is {1000 + 37 * i}." for i in range(60))
             + " Question: what is the key for box 42? Answer:", False),
    # ~2K tokens: positions far beyond the other prompts (the passkey prompt of `longctx eval`).
    ("passkey", "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                "I will quiz you about the important information there.\n\n"
                + "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. " * 90
                + "The pass key is 3821679. Remember it. 3821679 is the pass key. "
                + "\n\nWhat is the pass key? The pass key is", False),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def greedy(model, x, n):
    """Plain argmax decoding with the KV cache, EOS not special (generate() with
    min_new_tokens would mask EOS logits and change the argmax)."""
    out = model(x, use_cache=True)
    past, ids = out.past_key_values, x
    for _ in range(n):
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        out = model(nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default="tests/data/golden/smollm2-135m-q4_1.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    d, f = os.path.split(args.model)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size
    sample_ids = sorted(random.Random(1234).sample(range(vocab), N_SAMPLE))
    out = {
        "model_file": f,
        "model_sha256": sha256(args.model),
        "reference": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, fp32 CPU",
        "sample_ids": sample_ids,
        "prompts": [],
    }
    for name, text, chat in PROMPTS:
        if chat:
            rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                               add_generation_prompt=True)
            ids = tok(rendered, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(text)["input_ids"]
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(x).logits[0].float()
            gen = greedy(model, x, N_GREEDY)
        positions = sorted(set([0, 1, min(2, len(ids) - 1), len(ids) - 1]))
        checks = []
        for p in positions:
            row = logits[p]
            top = torch.topk(row, N_TOP)
            checks.append({
                "position": p,
                "top_ids": top.indices.tolist(),
                "top_logits": [round(v, 5) for v in top.values.tolist()],
                "sample_logits": [round(row[i].item(), 5) for i in sample_ids],
            })
        out["prompts"].append({
            "name": name,
            "text": text,
            "chat": chat,
            "rendered": rendered if chat else text,
            "ids": ids,
            "logits": checks,
            "greedy": gen[0, len(ids):].tolist(),
        })
        print(f"{name}: {len(ids)} tokens, greedy: {tok.decode(gen[0, len(ids):])!r}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fo:
        json.dump(out, fo, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
