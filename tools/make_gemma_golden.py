#!/usr/bin/env python3
"""make_gemma_golden.py: golden data for gemma-3-270m (Q4_K_M GGUF) from transformers, fp32 CPU.

What: loads the GGUF that `scripts/fetch-model.sh gemma3-270m` installs in transformers (which
      dequantizes it to fp32 with gguf-py, the same values longctx's dequantizer gives, and
      un-folds Gemma's (1 + w) norms), and writes for each prompt: the token ids (transformers'
      tokenizer built from the GGUF), logits at a few positions (top-32 plus a fixed sample of 256
      vocabulary entries), and the greedy continuation. Prompts run up to ~8K tokens, far past
      the 512-token sliding window of the local layers. The chat prompt is rendered with the
      published Gemma 3 chat template (the GGUF carries none).
      tests/model/test_gemma_golden.cpp checks longctx against this file. Also writes
      tests/data/tokenizer/gemma3_golden.json: the ids of tricky strings (--tokenizer-only: that alone).
Run:  tools/setup_reference_venv.sh; scripts/fetch-model.sh gemma3-270m;
      ~/.cache/longctx/venv/bin/python tools/make_gemma_golden.py
"""
import argparse
import hashlib
import json
import os
import random
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

DEFAULT_MODEL = os.path.expanduser("~/.cache/longctx/models/gemma-3-270m-q4_k_m.gguf")
N_GREEDY = 24       # greedy tokens the tests must reproduce exactly
N_GREEDY_LONG = 8   # for the longest prompts (the CPU test time is the prefill)
N_TOP = 32
N_SAMPLE = 256

# The published Gemma 3 chat template (the chat golden data's copy).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_golden import GEMMA3_TEMPLATE  # noqa: E402

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
PROMPTS = [
    ("plain", "The capital of France is", False),
    ("story", "Once upon a time, in a small village by the sea, there lived an old fisherman who", False),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", False),
    ("unicode", "Zürich, Kraków and 東京 are cities; naïve café — “quotes” and emoji 🚀.\n\tTabs  and   spaces.", False),
    ("chat", "What is the boiling point of water at sea level, in Celsius?", True),
    # ~2K and ~8K tokens: the sliding window (512) matters, the global layers see everything.
    ("passkey2k", "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                  "I will quiz you about the important information there.\n\n" + FILLER * 45
                  + "The pass key is 3821679. Remember it. 3821679 is the pass key. " + FILLER * 45
                  + "\n\nWhat is the pass key? The pass key is", False),
    ("passkey8k", "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                  "I will quiz you about the important information there.\n\n" + FILLER * 200
                  + "The pass key is 58214. Remember it. 58214 is the pass key. " + FILLER * 160
                  + "\n\nWhat is the pass key? The pass key is", False),
]


# Tokenizer cases: whitespace runs and newlines (Gemma has user-defined tokens for them), byte
# fallback, special tokens, HTML-like pieces, scripts.
TOKENIZER_CASES = [
    "Hello world", " leading space", "trailing space ", "two  spaces", "many          spaces",
    "line1\nline2\n\nline3\n\n\n\nend", "tabs\tand\t\ttabs", "\r\n windows \r\n",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<bos>not special in plain text",
    "<table><tr><td>cell</td></tr></table>", "**bold** and __under__ and `code`",
    "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦", "中文测试：你好，世界！", "日本語のテキスト", "한국어 텍스트", "Ελληνικά και русский",
    "\u0000\u0001 control \u007f", "naïve café Zürich", "1234567890 3.14159 1,000,000",
    "def f(x):\n    return x ** 2  # square\n", "a" * 300,
]


def tokenizer_golden(tok):
    """ids of each case (text encoding: no special-token parsing, as tok(text) does)."""
    return [{"text": t, "ids": tok(t, add_special_tokens=False)["input_ids"],
             "ids_bos": tok(t)["input_ids"]} for t in TOKENIZER_CASES]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def greedy(model, x, n):
    """Plain argmax decoding with the KV cache, EOS not special."""
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
    ap.add_argument("--out", default="tests/data/golden/gemma-3-270m-q4_k_m.json")
    ap.add_argument("--tokenizer-out", default="tests/data/tokenizer/gemma3_golden.json")
    ap.add_argument("--tokenizer-only", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    d, f = os.path.split(args.model)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    with open(args.tokenizer_out, "w") as fo:
        json.dump({"model_file": f, "reference": f"transformers {__import__('transformers').__version__} "
                   "tokenizer from the GGUF", "cases": tokenizer_golden(tok)}, fo, ensure_ascii=False, indent=1)
    if args.tokenizer_only:
        return
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size
    sample_ids = sorted(random.Random(1234).sample(range(vocab), N_SAMPLE))
    out = {
        "model_file": f,
        "model_sha256": sha256(args.model),
        "reference": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, fp32 CPU",
        "chat_template": GEMMA3_TEMPLATE,
        "sample_ids": sample_ids,
        "prompts": [],
    }
    for name, text, chat in PROMPTS:
        if chat:
            rendered = tok.apply_chat_template([{"role": "user", "content": text}], chat_template=GEMMA3_TEMPLATE,
                                               tokenize=False, add_generation_prompt=True)
            ids = tok(rendered, add_special_tokens=False)["input_ids"]
        else:
            rendered = text
            ids = tok(text)["input_ids"]
        n_greedy = N_GREEDY if len(ids) < 1000 else N_GREEDY_LONG
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(x).logits[0].float()
            gen = greedy(model, x, n_greedy)
        positions = sorted(set([0, 1, min(2, len(ids) - 1), len(ids) // 2, len(ids) - 1]))
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
        out["prompts"].append({"name": name, "text": text, "chat": chat, "rendered": rendered, "ids": ids,
                               "logits": checks, "greedy": gen[0, len(ids):].tolist()})
        print(f"{name}: {len(ids)} tokens, greedy: {tok.decode(gen[0, len(ids):])!r}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fo:
        json.dump(out, fo, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
