#!/usr/bin/env python3
"""make_search_samples.py: deterministic sample prompts for MInference's offline pattern search
(`longctx search-patterns --sample A.txt --sample B.txt ...`), closer to long-context retrieval
prompts than the paper's single key-value sample.

What: one prompt per call, of about --tokens tokens of the model's tokenizer, of one kind:
  passkey  the classic repeated filler ("The grass is green. The sky is blue. ...") with a pass
           key sentence at --depth and the question at the end (the passkey task's format);
  prose    consecutive lines of a book (--text, default: Paradise Lost from
           scripts/fetch-text.sh) with a "special magic number" sentence at --depth and the
           question at the end (a needle-in-a-haystack prompt over prose);
  kv       a JSON object of UUID key/value pairs and a question about one key (the paper's
           sample kind; tools/make_kv_sample.py with a token target).
Keys, numbers, book offset and the asked key come from --seed (Python's random.Random), not from
`longctx eval`'s generator, so a search sample is never one of the evaluation's prompts; the
prose haystack is a real book, not the evaluation's synthetic essay.
Length: the number of filler units is bisected on real token counts (the GGUF's tokenizer through
transformers, as tools/make_golden.py loads it) so the prompt is the longest one with at most
--tokens tokens (BOS not counted). Without transformers, 4 characters per token are assumed.
Run:  python3 tools/make_search_samples.py --kind passkey --depth 0.4 --seed 1 --tokens 7900 > s1.txt
"""
import argparse
import os
import random

DEFAULT_MODEL = os.path.expanduser("~/.cache/longctx/models/SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_TEXT = os.path.expanduser("~/.cache/longctx/texts/paradise_lost.txt")
FILLER = ["The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ",
          "There and back again. "]
NAMES = ["Lisbon", "Nairobi", "Osaka", "Quito", "Tallinn", "Hobart", "Recife", "Bergen", "Cusco", "Dakar"]


def counter(model):
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(os.path.dirname(model), gguf_file=os.path.basename(model))
        return lambda s: len(tok.encode(s, add_special_tokens=False))
    except Exception:  # no transformers / no model: a rough estimate
        return lambda s: (len(s) + 3) // 4


def with_needle(units, n, depth, needle):
    body = units[:n]
    at = round(depth * len(body))
    return "".join(body[:at]) + needle + " " + "".join(body[at:])


def build(kind, rng, text_path):
    """Returns (units, make(n) -> prompt text with n filler units)."""
    if kind == "passkey":
        key = str(rng.randrange(10000, 10000000))
        needle = f"The pass key is {key}. Remember it. {key} is the pass key."
        units = [FILLER[i % 5] for i in range(20000)]
        head = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                "I will quiz you about the important information there.\n\n")
        tail = "\n\nWhat is the pass key? The pass key is"
        return units, lambda n, d: head + with_needle(units, n, d, needle) + tail
    if kind == "prose":
        lines = [l for l in open(text_path, encoding="utf-8", errors="replace").read().splitlines() if l.strip()]
        start = rng.randrange(len(lines))
        units = [lines[(start + i) % len(lines)] + "\n" for i in range(len(lines))]
        name, value = rng.choice(NAMES), str(rng.randrange(1000000, 10000000))
        needle = f"The special magic {name} number is: {value}."
        head = ("A special magic number is hidden within the following text. Make sure to memorize it. "
                "I will quiz you about the number afterwards.\n\n")
        tail = f"\n\nWhat is the special magic {name} number? The special magic {name} number is:"
        return units, lambda n, d: head + with_needle(units, n, d, needle) + tail
    if kind == "kv":
        uid = lambda: "-".join("".join(rng.choice("0123456789abcdef") for _ in range(k)) for k in (8, 4, 4, 4, 12))
        pairs = [(uid(), uid()) for _ in range(2000)]
        units = [f'"{k}": "{v}", ' for k, v in pairs]
        pick = rng.random()

        def make(n, _d):
            k = pairs[min(n - 1, int(pick * n))][0]
            return ("Extract the value corresponding to the specified key in the JSON object below.\n\n{"
                    + "".join(units[:n]).rstrip(", ") + "}\n\n" + f'Key: "{k}"\nThe value associated with the specified key is:')
        return units, make
    raise SystemExit(f"unknown --kind {kind}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["passkey", "prose", "kv"], required=True)
    ap.add_argument("--tokens", type=int, default=7900)
    ap.add_argument("--depth", type=float, default=0.5, help="needle position, 0 (start) .. 1 (end)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=DEFAULT_MODEL, help="GGUF whose tokenizer counts the tokens")
    ap.add_argument("--text", default=DEFAULT_TEXT, help="book for --kind prose")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    units, make = build(a.kind, rng, a.text)
    count = counter(a.model)
    lo, hi = 1, len(units)  # count(make(lo)) <= tokens assumed; find the largest n that fits
    if count(make(hi, a.depth)) <= a.tokens:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(make(mid, a.depth)) <= a.tokens:
            lo = mid
        else:
            hi = mid
    print(make(lo, a.depth), end="")


if __name__ == "__main__":
    main()
