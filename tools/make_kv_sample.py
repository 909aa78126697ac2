#!/usr/bin/env python3
"""make_kv_sample.py: a deterministic key-value retrieval prompt, the kind of sample MInference's
offline pattern search uses (the paper searches on one InfiniteBench KV-retrieval example).

What: N lines of "key": "value" pairs with random hexadecimal UUID-like strings from a seeded
      generator, then a question about one key. Same seed -> same text.
Run:  python3 tools/make_kv_sample.py --pairs 100 --seed 0 > kv.txt
      longctx search-patterns --sample kv.txt -o configs/minference/<model>.json --sample-tokens 4096
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    uid = lambda: "-".join("".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12))
    pairs = [(uid(), uid()) for _ in range(a.pairs)]
    print("Extract the value corresponding to the specified key in the JSON object below.\n")
    print("{" + ", ".join(f'"{k}": "{v}"' for k, v in pairs) + "}\n")
    k, _ = pairs[rng.randrange(len(pairs))]
    print(f'Key: "{k}"\nThe value associated with the specified key is:')


if __name__ == "__main__":
    main()
