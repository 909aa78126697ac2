#!/usr/bin/env python3
"""serve_load.py: load benchmark of `longctx serve` with the official `openai` client.

What: for each concurrency level C, C clients each stream R completions (greedy, fixed prompt and
      max_tokens, ignore_eos so every request generates exactly max_tokens) at once; reports
      time to first token (TTFT) and inter-token latency (ITL) percentiles, and output tokens/s of
      the whole server. Starts the server itself (--longctx BIN) or uses a running one (--url).
      --long-prompt N: at each level one more client sends a prompt of about N tokens (max_tokens 1)
      while the others stream, so TTFT/ITL show what a long prefill does to them (chunked prefill
      keeps it to a chunk per step); its own TTFT is reported as long_ttft_ms.
Run:  ~/.cache/longctx/test-venv/bin/python bench/serve_load.py --longctx build/src/cli/longctx \\
          --concurrency 1,4,16 --max-tokens 32 [--json bench/results/serve-cpu.json]
      GPU, random weights with the default model's tokenizer (scripts/gguf-tokenizer-only.py):
      ... --longctx longctx --serve-args "-m tok.gguf --random-weights smollm2-135m --device cuda --max-seqs 64"
"""
import argparse
import concurrent.futures as cf
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import openai


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, proc):
    for _ in range(600):
        if proc and proc.poll() is not None:
            sys.exit("serve_load: the server exited")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    sys.exit("serve_load: the server did not become healthy")


def one_request(client, model, prompt, max_tokens):
    t0 = time.perf_counter()
    times = []
    for ch in client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
                                        extra_body={"ignore_eos": True}):
        if ch.choices and ch.choices[0].text:
            times.append(time.perf_counter())
    return t0, times


def level(client, model, prompt, max_tokens, conc, rounds, long_prompt=None):
    def client_loop(_):
        return [one_request(client, model, prompt, max_tokens) for _ in range(rounds)]

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(conc + 1) as ex:
        long_run = ex.submit(one_request, client, model, long_prompt, 1) if long_prompt else None
        runs = [r for rs in ex.map(client_loop, range(conc)) for r in rs]
        long_ttft = None
        if long_run:
            s0, ts = long_run.result()
            long_ttft = round((ts[0] - s0) * 1e3, 1) if ts else None
    wall = time.perf_counter() - t0
    ttft = [(ts[0] - s) * 1e3 for s, ts in runs if ts]
    itl = [(b - a) * 1e3 for _, ts in runs for a, b in zip(ts, ts[1:])]
    pieces = sum(len(ts) for _, ts in runs)
    return {
        "concurrency": conc, "requests": len(runs), "wall_s": round(wall, 3),
        "output_tokens": conc * rounds * max_tokens, "text_pieces": pieces,
        "output_tokens_per_s": round(conc * rounds * max_tokens / wall, 2),
        "ttft_ms": {p: round(pct(ttft, p), 1) for p in (50, 90, 99)},
        "itl_ms": {p: round(pct(itl, p), 1) for p in (50, 90, 99)},
        "itl_mean_ms": round(statistics.fmean(itl), 1) if itl else None,
        **({"long_ttft_ms": long_ttft} if long_prompt else {}),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--longctx", help="start `BIN serve` on a free port instead")
    ap.add_argument("--serve-args", default="", help="extra arguments for `longctx serve`")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=2, help="requests per client per level")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt", default="Write a short story about a lighthouse keeper who finds a message in a bottle.")
    ap.add_argument("--long-prompt", type=int, default=0, help="tokens (about) of a long prompt sent at each level")
    ap.add_argument("--label", default="", help="a name for this run in the JSON (e.g. batched, serial)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if not a.url and not a.longctx:
        ap.error("give --url or --longctx")
    proc = None
    url = a.url
    if a.longctx:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([a.longctx, "serve", "--port", str(port)] + a.serve_args.split())
    try:
        wait_healthy(url, proc)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        one_request(client, model, a.prompt, 4)  # warm up
        long_prompt = None
        if a.long_prompt:  # about a.long_prompt tokens, measured by the server's tokenizer
            unit = "The lighthouse keeper counted the ships that passed the rocks at night. "
            req = urllib.request.Request(url + "/tokenize", data=json.dumps({"prompt": unit, "add_special_tokens": False}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                n_unit = json.load(resp)["count"]
            long_prompt = unit * max(1, a.long_prompt // max(n_unit, 1))
        results = []
        for c in [int(x) for x in a.concurrency.split(",")]:
            r = level(client, model, a.prompt, a.max_tokens, c, a.rounds, long_prompt)
            results.append(r)
            print(f"C={c:3d}: {r['output_tokens_per_s']:8.1f} tok/s  TTFT p50/p90/p99 {r['ttft_ms'][50]}/"
                  f"{r['ttft_ms'][90]}/{r['ttft_ms'][99]} ms  ITL p50/p90/p99 {r['itl_ms'][50]}/{r['itl_ms'][90]}/"
                  f"{r['itl_ms'][99]} ms  ({r['requests']} requests, {r['wall_s']} s)"
                  + (f"  long prompt TTFT {r['long_ttft_ms']} ms" if long_prompt else ""), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"label": a.label, "model": model, "serve_args": a.serve_args, "max_tokens": a.max_tokens,
                           "prompt": a.prompt, "long_prompt_tokens": a.long_prompt, "levels": results}, f, indent=2)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
