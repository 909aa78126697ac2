#!/usr/bin/env python3
"""serve_offload_test.py: `longctx serve --kv-offload` on the GPU answers as without the offload.

What: starts the real server twice on the GPU (random weights of a 2-layer Llama-3-8B geometry,
      the real SmolLM2 tokenizer from a tensor-less GGUF, HiP decode small enough that a 1.5K-token
      prompt decodes sparse and refreshes every 4 steps): once with the K/V of both layers in
      pinned host memory behind the GPU caches (--kv-offload --kv-host-layers 2), once without
      offload. It sends the same greedy requests over HTTP to each (two completions, one
      streamed, and a chat completion), and checks that the texts and token counts are equal.
      Both prefills of a prompt of one chunk run the same kernels (tests/gpu/test_gpu_offload.cpp
      checks the logits bit for bit); the GPU engine does not report logprobs, so the texts of
      greedy decoding are what the server can compare.
      Also checks /metrics after the requests (no request running).
Why:  the server is the third front end of --kv-offload (generate and bench model are the others);
      this is its end-to-end check with real HTTP requests.
Run:  python3 tests/server/serve_offload_test.py build/src/cli/longctx tok-128k.gguf
      (standard library only; ctest: serve_offload_test in CUDA builds; scripts/gpu-offload-engine.sh
      runs it on the GPU machine). A missing tokenizer file is made from the default model with
      scripts/gguf-tokenizer-only.py --pad-vocab 128256.
Exit: 0 pass, 1 fail, 77 skip (no NVIDIA GPU, or no tokenizer file and no default model).
"""
import http.client
import json
import os
import shutil
import subprocess
import sys

from serve_util import check, failures, free_port, raw, wait_healthy

LONGCTX, TOKENIZER = sys.argv[1], sys.argv[2]
GEOMETRY = "llama3-8b:2"
# test_gpu_offload's HiP: 64 blocks of 2 keys + 64 window + 16 sinks < the prompts, refresh every 4 steps.
HIP = "hip=k=64,window=64,sinks=16,refresh=4,dense_layers=1"
CONTEXT = 4096
NEW_TOKENS = 24
# cpu: a smoke run of this script's requests on the CPU path, both servers without offload.
DEVICE = os.environ.get("SERVE_OFFLOAD_TEST_DEVICE", "cuda")

def request(port, method, path, body=None):
    return raw(port, method, path, json.dumps(body) if body is not None else None, timeout=300)


def start_server(extra):
    port = free_port()
    cmd = [LONGCTX, "serve", "--device", DEVICE, "-m", TOKENIZER, "--random-weights", GEOMETRY, "--attn", HIP,
           "--port", str(port), "-c", str(CONTEXT), "--max-seqs", "1"] + extra
    print("+", " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    wait_healthy(p, port, 1200)
    return p, port


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return p.stderr.read()


# Real text (not token ids): a report paragraph repeated with numbered variations, ~1.5K tokens.
PARAGRAPH = ("Report {i}: the river rose by {m} centimetres overnight, the ferry to the northern bank was "
             "cancelled, and the bakery on the market square sold out of bread before nine o'clock. ")
LONG_PROMPT = "".join(PARAGRAPH.format(i=i, m=3 * i + 7) for i in range(40)) + "Summary of the reports:"
SHORT_PROMPT = "".join(PARAGRAPH.format(i=i, m=i) for i in range(12)) + "The ferry"


def answers(port):
    """The requests of one server: [(name, text, usage)]."""
    out = []
    _, data = request(port, "GET", "/v1/models")
    model = json.loads(data)["data"][0]["id"]
    for name, prompt in (("long", LONG_PROMPT), ("short", SHORT_PROMPT)):
        status, data = request(port, "POST", "/v1/completions",
                               {"model": model, "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0})
        check(status == 200, f"{name}: status {status}: {data[:300]!r}")
        r = json.loads(data)
        out.append((name, r["choices"][0]["text"], r["usage"]))
    # Streamed: the concatenated chunks.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/completions", body=json.dumps({"model": model, "prompt": LONG_PROMPT, "max_tokens":
                 NEW_TOKENS, "temperature": 0, "stream": True}), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    text = ""
    for line in r.read().decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            text += json.loads(line[6:])["choices"][0].get("text", "")
    conn.close()
    out.append(("long streamed", text, None))
    status, data = request(port, "POST", "/v1/chat/completions",
                           {"model": model, "messages": [{"role": "user", "content": LONG_PROMPT}],
                            "max_tokens": NEW_TOKENS, "temperature": 0})
    check(status == 200, f"chat: status {status}: {data[:300]!r}")
    r = json.loads(data)
    out.append(("chat", r["choices"][0]["message"]["content"], r["usage"]))
    _, data = request(port, "GET", "/metrics")
    running = [line for line in data.decode().splitlines() if line.startswith("longctx_requests_running")]
    check(len(running) == 1 and float(running[0].rsplit(" ", 1)[1]) == 0, f"/metrics after the requests: {running}")
    return out


def main():
    gpu = DEVICE == "cuda"
    if gpu and (shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode):
        print("SKIP: no NVIDIA GPU")
        return 77
    if not os.path.exists(TOKENIZER):
        model = os.path.join(os.environ.get("LONGCTX_CACHE", os.path.expanduser("~/.cache/longctx")), "models",
                             "SmolLM2-135M-Instruct.Q4_1.gguf")
        if not os.path.exists(model):
            print(f"SKIP: no {TOKENIZER} and no default model at {model} (scripts/bootstrap.sh)")
            return 77
        tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "gguf-tokenizer-only.py")
        subprocess.run([sys.executable, tool, "--pad-vocab", "128256", model, TOKENIZER], check=True)
    results = {}
    offload = ["--kv-offload", "--kv-host-layers", "2"] if gpu else []
    for label, extra in (("offload", offload), ("no offload", [])):
        server, port = start_server(extra)
        try:
            results[label] = answers(port)
        finally:
            log = stop(server)
        tail = [line for line in log.splitlines() if "offload" in line.lower()][-3:]
        print(f"  {label}: server log lines about offload: {tail}", flush=True)
    for (name, text_on, usage_on), (_, text_off, usage_off) in zip(results["offload"], results["no offload"]):
        print(f"  {name}: offload {text_on!r}\n  {' ' * len(name)}  without {text_off!r}", flush=True)
        check(len(text_on) > 0, f"{name}: empty answer with offload")
        check(text_on == text_off, f"{name}: the answer differs with --kv-offload")
        if usage_on is not None:
            check(usage_on == usage_off, f"{name}: usage {usage_on} vs {usage_off}")
    print(f"{len(failures)} failures" if failures else "serve --kv-offload == serve: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
