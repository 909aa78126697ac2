#!/usr/bin/env python3
"""compare.py (bench): merges longctx_bench_cuda and torch_baseline.py JSON into one result
record and prints the ours-vs-cuDNN-vs-flash table (ratios > 1 mean longctx is faster).

Run: python3 bench/compare.py OURS.json TORCH.json [--out results.json] [--meta KEY=VALUE ...]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("torch")
    ap.add_argument("--out")
    ap.add_argument("--meta", nargs="*", default=[])
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    tb = json.load(open(a.torch))
    rec = {"device": ours.get("device"), "date": ours.get("date"), "ours": ours, "torch": tb, "summary": []}
    for kv in a.meta:
        k, _, v = kv.partition("=")
        rec[k] = v
    copy_bw = tb.get("copy", {}).get("GBps_rw") or ours.get("copy", {}).get("GBps_rw")
    lines = [f"device: {ours.get('device')}  copy bandwidth (rw): torch {tb.get('copy', {}).get('GBps_rw', 0):.0f} GB/s,"
             f" ours {ours.get('copy', {}).get('GBps_rw', 0):.0f} GB/s"]
    lines.append(f"{'case':<24}{'ours ms':>10}{'cudnn ms':>10}{'flash ms':>10}{'ours/cudnn':>12}{'ours/flash':>12}  note")

    def base(kind, key, val, be):
        for r in tb.get(kind, []):
            if r.get(key) == val and r.get("backend") == be and "ms" in r:
                return r["ms"]
        return None

    for r in ours.get("prefill", []):
        c, f = base("prefill", "seq", r["seq"], "cudnn"), base("prefill", "seq", r["seq"], "flash")
        rc = c / r["ms"] if c else None
        rf = f / r["ms"] if f else None
        rec["summary"].append({"case": f"prefill {r['seq']} {r.get('kernel', '')}", "ours_ms": r["ms"], "cudnn_ms": c, "flash_ms": f,
                               "speed_vs_cudnn": rc, "speed_vs_flash": rf, "ours_tflops": r["tflops"]})
        lines.append(f"{'prefill ' + str(r['seq']) + ' ' + r.get('kernel', '')[:9]:<24}{r['ms']:>10.3f}{c or float('nan'):>10.3f}{f or float('nan'):>10.3f}"
                     f"{rc or float('nan'):>12.2f}{rf or float('nan'):>12.2f}  {r['tflops']:.0f} TFLOP/s")
    for r in ours.get("decode", []):
        c, f = base("decode", "n_kv", r["n_kv"], "cudnn"), base("decode", "n_kv", r["n_kv"], "flash")
        rc = c / r["ms"] if c else None
        rf = f / r["ms"] if f else None
        frac = r["GBps"] / copy_bw if copy_bw else None
        rec["summary"].append({"case": f"decode {r['n_kv']}", "ours_ms": r["ms"], "cudnn_ms": c, "flash_ms": f,
                               "speed_vs_cudnn": rc, "speed_vs_flash": rf, "ours_GBps": r["GBps"],
                               "fraction_of_copy_bw": frac, "graph_ms": r.get("graph_ms"),
                               "fp8_ms": r.get("fp8_ms"), "fp8_graph_ms": r.get("fp8_graph_ms"),
                               "sweep": r.get("sweep")})
        lines.append(f"{'decode ' + str(r['n_kv']):<24}{r['ms']:>10.4f}{c or float('nan'):>10.4f}{f or float('nan'):>10.4f}"
                     f"{rc or float('nan'):>12.2f}{rf or float('nan'):>12.2f}  {r['GBps']:.0f} GB/s = "
                     f"{100 * (frac or 0):.0f}% of copy"
                     + (f", graph {r['graph_ms']:.4f} ms" if r.get("graph_ms") else "")
                     + (f", fp8 KV {r['fp8_ms']:.4f}/{r['fp8_graph_ms']:.4f} ms" if r.get("fp8_ms") else ""))
    if ours.get("chunked_prefill"):
        c = ours["chunked_prefill"]
        lines.append(f"chunked prefill {c['n_q']} q vs {c['n_kv']} kv  {c['ms']:>10.3f} ms  {c['tflops']:.0f} TFLOP/s")
    if ours.get("batched_decode"):
        c = ours["batched_decode"]
        lines.append(f"batched decode {c['n_seq']} x {c['n_kv']}       {c['ms']:>10.4f} ms  {c['GBps']:.0f} GB/s")
    for r in ours.get("ops", []):
        lines.append(f"{r['op']:<34}{r['ms']:>10.4f} ms  " + (f"{r['tflops']:.0f} TFLOP/s" if r["tflops"] > 1 else f"{r['GBps']:.0f} GB/s"))
    rec["ops"] = ours.get("ops", [])
    print("\n".join(lines))
    if a.out:
        with open(a.out, "w") as fo:
            json.dump(rec, fo, indent=1)


if __name__ == "__main__":
    main()
