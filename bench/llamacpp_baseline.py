"""llamacpp_baseline.py: llama.cpp (through llama-cpp-python) timed like `longctx bench model`.

Same GGUF, a prompt of L tokens (a paragraph repeated, cut to L), prefill in one batch with
logits for the last position only, then `decode` greedy single-token steps; best of `repeats`
runs in this process. Prints one JSON object (the fields of `longctx bench model --json`).
Run (scripts/bench-llamacpp.sh does): python bench/llamacpp_baseline.py MODEL.gguf --length 512
"""
import argparse
import json
import time

import llama_cpp
import numpy as np

PARAGRAPH = ("The quick brown fox jumps over the lazy dog while the river runs past the old mill. "
             "Long documents are read one chunk at a time, and each new token looks back at all of them. ")


def greedy(llm):
    """The argmax of the last position's logits (llama.cpp keeps them; Llama.scores does not)."""
    return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=a.length + a.decode + 16, n_batch=a.length, n_ubatch=a.length,
                          n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    unit = llm.tokenize(PARAGRAPH.encode(), add_bos=False)
    prompt = [llm.token_bos()] if llm.metadata.get("tokenizer.ggml.add_bos_token", "true") != "false" else []
    while len(prompt) < a.length:
        prompt += unit
    prompt = prompt[:a.length]
    best_prefill, best_decode = 1e30, 1e30
    for _ in range(a.repeats):
        llm.reset()  # n_tokens = 0: eval() then drops the cached positions
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        tok = greedy(llm)
        t2 = time.perf_counter()
        for _ in range(a.decode - 1):  # the first token comes from the prefill, as in longctx
            llm.eval([tok])
            tok = greedy(llm)
        t3 = time.perf_counter()
        best_prefill = min(best_prefill, t1 - t0)
        best_decode = min(best_decode, t3 - t2)
    print(json.dumps({"engine": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}", "threads": a.threads,
                      "results": [{"length": a.length, "prefill_s": best_prefill,
                                   "prefill_tokens_per_s": a.length / best_prefill, "decode_tokens": a.decode,
                                   "decode_s": best_decode,
                                   "decode_tokens_per_s": (a.decode - 1) / best_decode}]}))


if __name__ == "__main__":
    main()
