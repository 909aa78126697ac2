#!/usr/bin/env python3
"""torch_baseline.py (bench): torch SDPA baselines on the shapes of longctx_bench_cuda.

What: causal prefill (32 q / 8 kv heads, d=128, bf16, enable_gqa=True) with the cuDNN and the
flash backend (torch.nn.attention.sdpa_kernel), single-query decode against 128K / 1M keys
with both backends, a prefill chunk of --chunk queries after N keys (--chunk-lens; causal
aligned to the last key, torch.nn.attention.bias.causal_lower_right, and also without a mask:
the chunk's own triangle is 0.05% of the work at 1M), and a device-to-device copy (bytes read + written) as the bandwidth
ceiling. Inputs are random normal (never zeros), contiguous [B, H, S, D].
How: CUDA events around each call, warmup first, median of N (bench/results, docs/benchmarks.md).
Run (on the GPU machine): python3 bench/torch_baseline.py [--prefill 8192,32768,131072]
                          [--decode 131072,1048576] [--chunk 512 --chunk-lens 131072,1048576]
                          [--shape 32,8,128] [--json out.json]
--shape H,HKV,D: another attention geometry (16,8,256: head_dim 256, as bench_cuda.cu --shape).
Prefills longer than 256K (seconds each, T^2) run once without warm-up; --backends cudnn (or
flash) times one backend only.
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

H, HKV, D = 32, 8, 128


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in evs)


BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefill", default="8192,32768,131072")
    ap.add_argument("--decode", default="131072,1048576")
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--chunk-lens", default="")
    ap.add_argument("--shape", default="32,8,128", help="H,HKV,D")
    ap.add_argument("--backends", default="cudnn,flash")
    ap.add_argument("--json")
    args = ap.parse_args()
    global H, HKV, D
    backends = {name: BACKENDS[name] for name in args.backends.split(",") if name}
    H, HKV, D = (int(x) for x in args.shape.split(","))
    dev = torch.cuda.get_device_name(0)
    res = {"device": dev, "torch": torch.__version__, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "shape": {"n_head": H, "n_kv_head": HKV, "head_dim": D, "dtype": "bf16"}, "prefill": [], "decode": [], "chunk": []}

    n = 1 << 30  # 2 GiB bf16 per buffer
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a), 2, 10)
    res["copy"] = {"bytes": 2 * n, "ms": ms, "GBps_rw": 2 * 2 * n / (ms * 1e-3) / 1e9}
    print(f"copy: {ms:.3f} ms {res['copy']['GBps_rw']:.0f} GB/s", file=sys.stderr)
    del a, b

    for s in [int(x) for x in args.prefill.split(",") if x]:
        q = torch.randn(1, H, s, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, HKV, s, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, HKV, s, D, device="cuda", dtype=torch.bfloat16)
        flops = 2.0 * s * s * D * H  # causal: half of 4*S^2*D*H
        reps = 20 if s <= 8192 else 8 if s <= 32768 else 3 if s <= 262144 else 1
        for name, be in backends.items():
            try:
                with sdpa_kernel([be]):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                    ms = time_ms(fn, 1 if reps > 1 else 0, reps)
                res["prefill"].append({"seq": s, "backend": name, "ms": ms, "reps": reps,
                                       "tflops": flops / (ms * 1e-3) / 1e12})
                print(f"prefill {name} S={s}: {ms:.3f} ms {flops / (ms * 1e-3) / 1e12:.1f} TFLOP/s", file=sys.stderr)
            except Exception as e:  # a backend that refuses the shape is recorded, not fatal
                res["prefill"].append({"seq": s, "backend": name, "error": str(e)[:300]})
                print(f"prefill {name} S={s}: error {e}", file=sys.stderr)
        del q, k, v
        torch.cuda.empty_cache()

    for nkv in [int(x) for x in args.decode.split(",") if x]:
        q = torch.randn(1, H, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, HKV, nkv, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, HKV, nkv, D, device="cuda", dtype=torch.bfloat16)
        nbytes = 2 * nkv * HKV * D * 2
        for name, be in BACKENDS.items():
            try:
                with sdpa_kernel([be]):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=True)
                    ms = time_ms(fn, 3, 50)
                res["decode"].append({"n_kv": nkv, "backend": name, "ms": ms, "GBps": nbytes / (ms * 1e-3) / 1e9})
                print(f"decode {name} n_kv={nkv}: {ms:.4f} ms {nbytes / (ms * 1e-3) / 1e9:.0f} GB/s", file=sys.stderr)
            except Exception as e:
                res["decode"].append({"n_kv": nkv, "backend": name, "error": str(e)[:300]})
                print(f"decode {name} n_kv={nkv}: error {e}", file=sys.stderr)
        del q, k, v
        torch.cuda.empty_cache()

    from torch.nn.attention.bias import causal_lower_right
    C = args.chunk
    for nkv in [int(x) for x in args.chunk_lens.split(",") if x]:
        q = torch.randn(1, H, C, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, HKV, nkv, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, HKV, nkv, D, device="cuda", dtype=torch.bfloat16)
        flops = 4.0 * C * nkv * D * H
        for name, be in BACKENDS.items():
            for mask in ("causal_lower_right", "none"):
                try:
                    with sdpa_kernel([be]):
                        m = causal_lower_right(C, nkv) if mask != "none" else None
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
                        ms = time_ms(fn, 1, 5)
                    res["chunk"].append({"chunk": C, "n_kv": nkv, "backend": name, "mask": mask, "ms": ms,
                                         "tflops": flops / (ms * 1e-3) / 1e12})
                    print(f"chunk {name} {mask} C={C} n_kv={nkv}: {ms:.3f} ms", file=sys.stderr)
                except Exception as e:
                    res["chunk"].append({"chunk": C, "n_kv": nkv, "backend": name, "mask": mask, "error": str(e)[:300]})
                    print(f"chunk {name} {mask} C={C} n_kv={nkv}: error {str(e)[:200]}", file=sys.stderr)
        del q, k, v
        torch.cuda.empty_cache()

    out = json.dumps(res, indent=1)
    print(out)
    if args.json:
        with open(args.json, "w") as f:
            f.write(out)


if __name__ == "__main__":
    main()
