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
    t0 = time.monotonic()  # CLOCK_MONOTONIC: comparable across the client processes
    times = []
    for ch in client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
                                        extra_body={"ignore_eos": True}):
        if ch.choices and ch.choices[0].text:
            times.append(time.monotonic())
    return t0, times


def client_group(url, model, prompt, max_tokens, n_clients, rounds, start_at):
    """n_clients streaming clients (threads) of one process, from start_at on; their (start, token times)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    time.sleep(max(0.0, start_at - time.monotonic()))

    def client_loop(_):
        return [one_request(client, model, prompt, max_tokens) for _ in range(rounds)]

    with cf.ThreadPoolExecutor(n_clients) as ex:
        return [r for rs in ex.map(client_loop, range(n_clients)) for r in rs]


def server_counters(url):
    """The server's decode token, decode second and step totals (GET /metrics)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    want = {"longctx_decode_tokens_total": "tokens", "longctx_decode_seconds_total": "seconds",
            "longctx_engine_steps_total": "steps"}
    out = {}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in want:
            out[want[name]] = float(line.rsplit(" ", 1)[1])
    return out


def level(url, client, model, prompt, max_tokens, conc, rounds, procs, long_prompt=None):
    # Clients spread over `procs` processes (one Python process parses ~5K SSE chunks/s at most:
    # the client, not the server, would set the pace), all starting at start_at.
    n_procs = max(1, min(procs, conc))
    groups = [conc // n_procs + (1 if i < conc % n_procs else 0) for i in range(n_procs)]
    before = server_counters(url)
    start_at = time.monotonic() + (3.0 if n_procs > 1 else 0.0)  # the processes import openai first
    with cf.ProcessPoolExecutor(n_procs) if n_procs > 1 else cf.ThreadPoolExecutor(1) as ex:
        futs = [ex.submit(client_group, url, model, prompt, max_tokens, g, rounds, start_at) for g in groups]
        long_ttft = None
        if long_prompt:
            time.sleep(max(0.0, start_at - time.monotonic()))
            s0, ts = one_request(client, model, long_prompt, 1)
            long_ttft = round((ts[0] - s0) * 1e3, 1) if ts else None
        runs = [r for f in futs for r in f.result()]
    t0 = min(s for s, _ in runs)
    wall = max(ts[-1] for _, ts in runs if ts) - t0
    after = server_counters(url)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
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
        "client_processes": n_procs,
        # the engine's own pace: decode rows per second inside its decode steps, rows per step
        "server_decode_tokens_per_s": round(d["tokens"] / d["seconds"], 1) if d.get("seconds") else None,
        "server_rows_per_step": round(d["tokens"] / d["steps"], 2) if d.get("steps") else None,
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
    ap.add_argument("--procs", type=int, default=1, help="client processes (the clients are spread over them)")
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
            body = json.dumps({"prompt": unit, "add_special_tokens": False}).encode()
            req = urllib.request.Request(url + "/tokenize", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                n_unit = json.load(resp)["count"]
            long_prompt = unit * max(1, a.long_prompt // max(n_unit, 1))
        results = []
        for c in [int(x) for x in a.concurrency.split(",")]:
            r = level(url, client, model, a.prompt, a.max_tokens, c, a.rounds, a.procs, long_prompt)
            results.append(r)
            print(f"C={c:3d}: {r['output_tokens_per_s']:8.1f} tok/s  TTFT p50/p90/p99 {r['ttft_ms'][50]}/"
                  f"{r['ttft_ms'][90]}/{r['ttft_ms'][99]} ms  ITL p50/p90/p99 {r['itl_ms'][50]}/{r['itl_ms'][90]}/"
                  f"{r['itl_ms'][99]} ms  ({r['requests']} requests, {r['wall_s']} s)"
                  + f"  server decode {r['server_decode_tokens_per_s']} tok/s, {r['server_rows_per_step']} rows/step"
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
