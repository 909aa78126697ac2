#!/usr/bin/env python3
"""serve_test.py: `longctx serve` end to end with the official `openai` client (CPU, default model).

What: starts the server on 127.0.0.1 (a free port), then checks chat and completions, streaming and
      not, against `longctx generate` (greedy: the same text), stop strings, usage counts, logprobs,
      /tokenize, /detokenize, /v1/models, /metrics; OpenAI-style errors for bad requests (malformed
      JSON, wrong types, unknown model, too long prompts, max_tokens out of range, oversized
      bodies, unknown routes); a bounded load test (concurrent streaming clients, some hanging up
      early) whose completed answers must equal the greedy answers of their prompts alone, after
      which /metrics shows no open sequence and no reserved KV cache; SIGTERM drains a running
      stream and exits 0.
Run:  tests/server/serve_test.sh build/src/cli/longctx   (ctest: serve_test)
Exit: 0 pass, 1 fail, 77 skip (the default model is not installed).
"""
import concurrent.futures as cf
import json
import os
import signal
import subprocess
import sys
import time

from serve_util import check, failures, free_port, raw, wait_healthy

import openai

LONGCTX = sys.argv[1]
CONTEXT = 1024        # -c for the server and generate: small, so "prompt too long" is cheap
MAX_BODY = 64 * 1024  # --max-body: the oversized-body case
LOAD_CLIENTS = 24     # concurrent streaming clients in the load test
LOAD_TOKENS = 12

def generate(args):
    out = subprocess.run([LONGCTX, "generate", "--json", "-q", "-c", str(CONTEXT)] + args,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def metrics(port):
    _, data = raw(port, "GET", "/metrics")
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0] if "model=" in name else name] = float(value)
    return out


def start_server(port, extra=()):
    p = subprocess.Popen([LONGCTX, "serve", "--port", str(port), "-c", str(CONTEXT), "--max-body", str(MAX_BODY),
                          "--kv-tokens", "16384", "--max-seqs", "16", "--max-queue", "64"] + list(extra),
                         stderr=subprocess.PIPE, text=True)
    wait_healthy(p, port, 600)
    return p


def expect_error(fn, cls, status, what):
    try:
        fn()
    except cls as e:
        check(e.status_code == status, f"{what}: status {e.status_code}, expected {status}")
        body = e.body if isinstance(e.body, dict) else {}
        check(isinstance(body.get("message"), str) and body["message"], f"{what}: no error message ({e.body})")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return
    check(False, f"{what}: no error")


def main():
    from pathlib import Path
    model = Path(os.environ.get("LONGCTX_CACHE", Path.home() / ".cache/longctx")) / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
    if not model.exists():
        print(f"SKIP: the default model is not installed at {model} (scripts/bootstrap.sh)")
        return 77
    port = free_port()
    server = start_server(port)
    try:
        run_checks(port)
        drain_check(server, port)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    print(f"{len(failures)} failures" if failures else "all serve checks passed")
    return 1 if failures else 0


def run_checks(port):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=300)
    model_id = client.models.list().data[0].id
    check(model_id == "SmolLM2-135M-Instruct.Q4_1", f"/v1/models id {model_id}")

    # Greedy completions equal `longctx generate`, streaming or not.
    prompt = "The capital of France is"
    ref = generate(["-p", prompt, "-n", "16"])
    r = client.completions.create(model=model_id, prompt=prompt, max_tokens=16, temperature=0)
    check(r.choices[0].text == ref["text"], f"completion {r.choices[0].text!r} != generate {ref['text']!r}")
    check(r.usage.prompt_tokens == ref["prompt_tokens"], f"usage prompt {r.usage.prompt_tokens} != {ref['prompt_tokens']}")
    check(r.usage.completion_tokens == len(ref["tokens"]), f"usage completion {r.usage.completion_tokens}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "usage total")
    check(r.choices[0].finish_reason == ("length" if ref["stop_reason"] == "length" else "stop"), "finish_reason")
    pieces, finish, usage = [], None, None
    for ch in client.completions.create(model=model_id, prompt=prompt, max_tokens=16, temperature=0, stream=True,
                                        stream_options={"include_usage": True}):
        if ch.choices:
            pieces.append(ch.choices[0].text)
            finish = ch.choices[0].finish_reason or finish
        if ch.usage:
            usage = ch.usage
    check("".join(pieces) == ref["text"], f"streamed completion {''.join(pieces)!r}")
    check(finish == r.choices[0].finish_reason, f"streamed finish_reason {finish}")
    check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, f"streamed usage {usage}")

    # Chat, greedy, equals `longctx generate --chat`.
    question = "What is the capital of France?"
    ref = generate(["--chat", question, "-n", "20"])
    c = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": question}], max_tokens=20,
                                       temperature=0)
    check(c.choices[0].message.content == ref["text"], f"chat {c.choices[0].message.content!r} != {ref['text']!r}")
    check(c.choices[0].message.role == "assistant", "chat role")
    check(c.usage.prompt_tokens == ref["prompt_tokens"], f"chat prompt tokens {c.usage.prompt_tokens}")
    text = ""
    for ch in client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": question}],
                                             max_tokens=20, temperature=0, stream=True):
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
    check(text == ref["text"], f"streamed chat {text!r}")

    # Stop strings: the text ends before the stop, finish_reason "stop"; streaming the same.
    full = client.completions.create(model=model_id, prompt="Count: one, two, three,", max_tokens=24,
                                     temperature=0).choices[0].text
    if check("," in full, f"no comma to stop at in {full!r}"):
        s = client.completions.create(model=model_id, prompt="Count: one, two, three,", max_tokens=24, temperature=0,
                                      stop=[","])
        check(s.choices[0].text == full[:full.index(",")], f"stop text {s.choices[0].text!r} of {full!r}")
        check(s.choices[0].finish_reason == "stop", f"stop finish_reason {s.choices[0].finish_reason}")
        streamed = "".join(ch.choices[0].text for ch in client.completions.create(
            model=model_id, prompt="Count: one, two, three,", max_tokens=24, temperature=0, stop=[","], stream=True)
            if ch.choices)
        check(streamed == s.choices[0].text, f"streamed stop text {streamed!r}")

    # Sampling: a seed repeats; logprobs are log-probabilities.
    a = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=12, temperature=0.9, seed=7)
    b = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=12, temperature=0.9, seed=7)
    check(a.choices[0].text == b.choices[0].text, "same seed, different text")
    lp = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                        temperature=0, logprobs=True)
    items = lp.choices[0].logprobs.content if lp.choices[0].logprobs else []
    check(len(items) == lp.usage.completion_tokens and all(-50 < i.logprob <= 0 for i in items), f"logprobs {items}")
    check(all(i.logprob > -3 for i in items[:1]), "greedy first token improbable")

    # Per-request attention method (extra body field), and a bad one.
    ar = client.completions.create(model=model_id, prompt=prompt, max_tokens=8, temperature=0,
                                   extra_body={"attn": "a_shape=4,64"})
    check(len(ar.choices[0].text) > 0, "a_shape request produced no text")
    expect_error(lambda: client.completions.create(model=model_id, prompt=prompt, max_tokens=4,
                                                   extra_body={"attn": "nonsense"}),
                 openai.BadRequestError, 400, "unknown attention method")

    # tokenize / detokenize.
    st, data = raw(port, "POST", "/tokenize", json.dumps({"prompt": prompt}))
    tok = json.loads(data)
    check(st == 200 and tok["count"] == ref_prompt_tokens(prompt), f"/tokenize {st} {tok}")
    st, data = raw(port, "POST", "/detokenize", json.dumps({"tokens": tok["tokens"]}))
    check(st == 200 and prompt in json.loads(data)["prompt"], f"/detokenize {st} {data!r}")

    # Errors through the client.
    expect_error(lambda: client.completions.create(model="gpt-4", prompt="x", max_tokens=2), openai.NotFoundError, 404,
                 "unknown model")
    expect_error(lambda: client.completions.create(model=model_id, prompt="x", max_tokens=CONTEXT + 5),
                 openai.BadRequestError, 400, "max_tokens past the context")
    expect_error(lambda: client.completions.create(model=model_id, prompt="x", max_tokens=-1),
                 openai.BadRequestError, 400, "negative max_tokens")
    expect_error(lambda: client.completions.create(model=model_id, prompt=[1] * (CONTEXT + 10), max_tokens=2),
                 openai.BadRequestError, 400, "prompt longer than the context")
    expect_error(lambda: client.completions.create(model=model_id, prompt="x", n=2), openai.BadRequestError, 400, "n=2")
    expect_error(lambda: client.chat.completions.create(model=model_id, messages=[], max_tokens=2),
                 openai.BadRequestError, 400, "empty messages")
    expect_error(lambda: client.completions.create(model=model_id, prompt="x", temperature=7), openai.BadRequestError,
                 400, "temperature out of range")
    expect_error(lambda: client.completions.create(model=model_id, prompt="x", stream=True, max_tokens=CONTEXT * 2),
                 openai.BadRequestError, 400, "streaming request out of range")

    # Malformed requests, raw.
    bad = [
        ("POST", "/v1/completions", b"{not json", 400, "malformed JSON"),
        ("POST", "/v1/completions", b"[1,2]", 400, "a JSON array body"),
        ("POST", "/v1/completions", json.dumps({"model": model_id, "prompt": 5}).encode(), 400, "prompt of wrong type"),
        ("POST", "/v1/completions", json.dumps({"model": model_id, "prompt": "x", "max_tokens": "9"}).encode(), 400,
         "max_tokens of wrong type"),
        ("POST", "/v1/completions", json.dumps({"model": model_id, "prompt": "x", "max_tokens": 2**70}).encode(), 400,
         "huge max_tokens"),
        ("POST", "/v1/completions", json.dumps({"model": model_id, "prompt": "x", "stop": [1]}).encode(), 400,
         "stop of wrong type"),
        ("POST", "/v1/completions", json.dumps({"model": model_id, "prompt": [-1, 2]}).encode(), 400, "negative token id"),
        ("POST", "/v1/completions", json.dumps({"prompt": "x"}).encode(), 400, "no model"),
        ("POST", "/v1/chat/completions", json.dumps({"model": model_id, "messages": [{"role": "robot", "content": "x"}]})
         .encode(), 400, "unknown role"),
        ("POST", "/v1/chat/completions", json.dumps({"model": model_id, "messages": "hi"}).encode(), 400,
         "messages of wrong type"),
        ("POST", "/v1/completions", b"", 400, "empty body"),
        ("POST", "/v1/completions", b"{" + b" " * (MAX_BODY + 10) + b"}", 413, "oversized body"),
        ("POST", "/detokenize", json.dumps({"tokens": [10 ** 9]}).encode(), 400, "detokenize id out of range"),
        ("GET", "/v1/nothing", None, 404, "unknown route"),
    ]
    for method, path, body, status, what in bad:
        st, data = raw(port, method, path, body)
        ok = check(st == status, f"{what}: HTTP {st}, expected {status} ({data[:200]!r})")
        if ok:
            try:
                err = json.loads(data)["error"]
                check(isinstance(err["message"], str) and err["message"] and "type" in err, f"{what}: error body {err}")
            except (ValueError, KeyError, TypeError):
                check(False, f"{what}: not an OpenAI error body: {data[:200]!r}")
    check(raw(port, "GET", "/health")[0] == 200, "the server is healthy after the bad requests")
    odd_values(port, model_id)

    load_test(client, model_id, port)


def odd_values(port, model_id):
    """Every field of a valid request replaced by values of every JSON type: only 200 or an OpenAI 4xx."""
    odd = [None, -1, 0, 1.5, 10 ** 30, -(10 ** 30), "x", "", [], [1, "a"], {}, {"a": 1}, True, "\u0000\u00ff"]
    bases = {
        "/v1/completions": {"model": model_id, "prompt": "Hi", "max_tokens": 2, "temperature": 0, "stream": False},
        "/v1/chat/completions": {"model": model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                                 "temperature": 0},
        "/tokenize": {"prompt": "Hi"},
        "/detokenize": {"tokens": [1, 2]},
    }
    extra = ["top_p", "top_k", "seed", "stop", "n", "logprobs", "top_logprobs", "stream_options", "attn", "ignore_eos",
             "echo", "max_completion_tokens"]
    n = 0
    for path, base in bases.items():
        for key in list(base) + (extra if path.startswith("/v1") else []):
            for v in odd:
                if key in ("max_tokens", "max_completion_tokens") and (v is None or v == 10 ** 30):
                    continue  # a default or huge max_tokens is valid (the rest of the context): too slow here
                body = dict(base)
                body[key] = v
                if key == "max_completion_tokens" and path == "/v1/chat/completions":
                    body.pop("max_tokens")
                st, data = raw(port, "POST", path, json.dumps(body))
                n += 1
                if st == 200:
                    continue
                ok = check(st in (400, 404), f"{path} {key}={v!r}: HTTP {st} ({data[:200]!r})")
                if ok:
                    try:
                        check(bool(json.loads(data)["error"]["message"]), f"{path} {key}={v!r}: empty message")
                    except (ValueError, KeyError, TypeError):
                        check(False, f"{path} {key}={v!r}: not an OpenAI error body: {data[:200]!r}")
    check(raw(port, "GET", "/health")[0] == 200, f"the server is healthy after {n} odd requests")
    print(f"odd values: {n} requests", flush=True)


def ref_prompt_tokens(prompt):
    return generate(["-p", prompt, "-n", "0"])["prompt_tokens"]


def load_test(client, model_id, port):
    prompts = [f"Story {i}: the old lighthouse keeper" + " walked along the shore" * (i % 4) for i in range(6)]
    refs = {p: client.completions.create(model=model_id, prompt=p, max_tokens=LOAD_TOKENS, temperature=0).choices[0].text
            for p in prompts}

    def one(i):
        p = prompts[i % len(prompts)]
        hang_up = i % 4 == 3
        stream = client.completions.create(model=model_id, prompt=p, max_tokens=LOAD_TOKENS, temperature=0,
                                           stream=True)
        text, finish, n = "", None, 0
        for ch in stream:
            if ch.choices:
                text += ch.choices[0].text
                finish = ch.choices[0].finish_reason or finish
                n += 1
            if hang_up and n >= 2:
                stream.close()  # the client goes away mid-stream
                return p, None, None
        return p, text, finish

    before = metrics(port)
    t0 = time.time()
    with cf.ThreadPoolExecutor(LOAD_CLIENTS) as ex:
        results = list(ex.map(one, range(LOAD_CLIENTS)))
    completed = [(p, t, f) for p, t, f in results if t is not None]
    for p, text, finish in completed:
        check(text == refs[p], f"load: {text!r} != alone {refs[p]!r}")
        check(finish in ("stop", "length"), f"load: finish_reason {finish}")
    hung_up = LOAD_CLIENTS - len(completed)
    print(f"load: {LOAD_CLIENTS} streaming clients ({hung_up} hung up early) in {time.time() - t0:.1f} s", flush=True)
    m = {}
    for _ in range(100):  # the engine frees a hung-up sequence at its next step
        m = metrics(port)
        if m.get("longctx_requests_running") == 0 and m.get("longctx_kv_cache_reserved_tokens") == 0:
            break
        time.sleep(0.1)
    check(m.get("longctx_requests_running") == 0, f"load: sequences still open {m.get('longctx_requests_running')}")
    check(m.get("longctx_kv_cache_reserved_tokens") == 0 and m.get("longctx_kv_cache_used_tokens") == 0,
          f"load: KV cache not empty ({m.get('longctx_kv_cache_reserved_tokens')} reserved)")
    check(m.get("longctx_requests_waiting") == 0, "load: requests still queued")
    cancelled = m.get("longctx_requests_cancelled_total", 0) - before.get("longctx_requests_cancelled_total", 0)
    finished = m.get("longctx_requests_finished_total", 0) - before.get("longctx_requests_finished_total", 0)
    # A client that hangs up after its last token may still count as finished.
    check(cancelled + finished == LOAD_CLIENTS, f"load: {cancelled} cancelled + {finished} finished != {LOAD_CLIENTS}")
    check(cancelled >= 1, "load: no hung-up request was cancelled")
    for key in ("longctx_generation_tokens_total", "longctx_decode_tokens_per_second", "longctx_engine_steps_total"):
        check(m.get(key, 0) > 0, f"/metrics {key} = {m.get(key)}")


def drain_check(server, port):
    """SIGTERM while a request streams: it finishes, new requests are refused, the server exits 0."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=120)
    stream = client.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt="A long story:", max_tokens=48,
                                       temperature=0, stream=True, extra_body={"ignore_eos": True})
    it = iter(stream)
    text = next(it).choices[0].text
    server.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        st, _ = raw(port, "GET", "/health")
        check(st == 503, f"/health while draining: {st}")
        st, _ = raw(port, "POST", "/v1/completions",
                    json.dumps({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "x", "max_tokens": 2}))
        check(st == 503, f"a new request while draining: HTTP {st}")
    except OSError:
        pass  # already closed: also a refusal
    finish = None
    for ch in it:
        if ch.choices:
            text += ch.choices[0].text
            finish = ch.choices[0].finish_reason or finish
    check(finish == "length", f"the stream did not finish during the drain ({finish})")
    try:
        rc = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, f"the server exit status after SIGTERM: {rc}")


if __name__ == "__main__":
    sys.exit(main())
