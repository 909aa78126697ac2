#!/usr/bin/env python3
"""make_quant_vectors.py: golden vectors for the loader's dequantizers and quantizers.

What: for every dtype longctx dequantizes, a few blocks of encoded bytes plus the fp32 values
      gguf-py's numpy reference (gguf.quants) decodes them to; for the types gguf-py can
      quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16) also the fp32 source, so the C++
      quantizers can be checked byte for byte. tests/loader/test_dequant.cpp reads them.
Why:  ggml's block layouts are easy to get subtly wrong; gguf-py is an independent reference.
How:  python3 tools/make_quant_vectors.py [--out tests/data/quant]   (deterministic; seed fixed)

For the k-quants gguf-py can only dequantize: blocks are random bytes with the fp16 scale
fields replaced by small finite values, so every bit pattern of the quants is exercised.
gguf-py has no Q8_K at all: its blocks are decoded here with numpy (y = d * q, float32),
which is ggml's formula; the bsums field is filled consistently (sum of each 16 quants).

File format (little-endian), one file per case, <NAME>.bin:
  "LQV1" | u32 ggml type id | u32 n_elements | u32 n_bytes | u32 has_source
  | n_bytes encoded bytes | n_elements f32 expected | (has_source) n_elements f32 source
"""
import argparse
import pathlib
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
import gguf.quants as gq

MAGIC = b"LQV1"
SEED = 20240611
QK_K = 256
# Elements per case: 8 legacy blocks (32 each) or 4 k-quant super-blocks (256 each); enough to
# cover every code path while keeping the committed files small.
N_LEGACY = 8 * 32
N_KQUANT = 4 * QK_K
N_PLAIN = 64


def source_values(rng: np.random.Generator, n: int) -> np.ndarray:
    """fp32 data with the awkward cases: a zero block, a block of exact ties, a wide range block."""
    x = rng.standard_normal(n).astype(np.float32)
    x[0:32] = 0.0                                           # all-zero block: d = 0 path
    x[32:64] = (np.arange(32, dtype=np.float32) - 16) / 2   # multiples of 0.5: rounding ties
    x[64:96] *= np.float32(1000.0)                          # large scale
    x[96:128] = -np.abs(x[96:128])                          # all negative (max-abs is negative)
    return x


def write_case(out: pathlib.Path, name: str, qtype: int, encoded: np.ndarray, expected: np.ndarray,
               source: np.ndarray | None) -> int:
    encoded = np.ascontiguousarray(encoded, dtype=np.uint8).reshape(-1)
    expected = np.ascontiguousarray(expected, dtype=np.float32).reshape(-1)
    header = MAGIC + struct.pack("<IIII", qtype, expected.size, encoded.size, 1 if source is not None else 0)
    blob = header + encoded.tobytes() + expected.astype("<f4").tobytes()
    if source is not None:
        blob += np.ascontiguousarray(source, dtype="<f4").reshape(-1).tobytes()
    (out / f"{name}.bin").write_bytes(blob)
    return len(blob)


def small_f16(rng: np.random.Generator, shape, lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(np.float16).view(np.uint8).reshape(*shape, 2)


def random_kquant_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    block_bytes = gq.GGML_QUANT_SIZES[qtype][1]
    b = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    # Offsets of the fp16 scale fields in each block (ggml-common.h block structs).
    if qtype == T.Q2_K:    # scales[16] qs[64] d dmin
        b[:, 80:82] = small_f16(rng, (n_blocks,), 0.001, 0.1)
        b[:, 82:84] = small_f16(rng, (n_blocks,), 0.001, 0.1)
    elif qtype == T.Q3_K:  # hmask[32] qs[64] scales[12] d
        b[:, 108:110] = small_f16(rng, (n_blocks,), -0.1, 0.1)
    elif qtype in (T.Q4_K, T.Q5_K):  # d dmin scales[12] ...
        b[:, 0:2] = small_f16(rng, (n_blocks,), 0.001, 0.1)
        b[:, 2:4] = small_f16(rng, (n_blocks,), 0.001, 0.1)
    elif qtype == T.Q6_K:  # ql[128] qh[64] scales[16] d
        b[:, 208:210] = small_f16(rng, (n_blocks,), -0.1, 0.1)
    else:
        raise ValueError(qtype)
    return b


def random_legacy_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    block_bytes = gq.GGML_QUANT_SIZES[qtype][1]
    b = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    b[:, 0:2] = small_f16(rng, (n_blocks,), -2.0, 2.0)          # d
    if qtype in (T.Q4_1, T.Q5_1):
        b[:, 2:4] = small_f16(rng, (n_blocks,), -2.0, 2.0)      # m
    return b


def q8_k_blocks(rng: np.random.Generator, n_blocks: int):
    """Q8_K: f32 d | int8 qs[256] | int16 bsums[16]; decoded as d * qs (ggml dequantize_row_q8_K)."""
    d = rng.uniform(0.001, 0.1, size=n_blocks).astype(np.float32)
    qs = rng.integers(-128, 128, size=(n_blocks, QK_K), dtype=np.int16).astype(np.int8)
    bsums = qs.reshape(n_blocks, 16, 16).astype(np.int16).sum(axis=-1).astype("<i2")
    enc = np.concatenate([d.astype("<f4").view(np.uint8).reshape(n_blocks, 4),
                          qs.view(np.uint8), bsums.view(np.uint8).reshape(n_blocks, 32)], axis=1)
    expected = (d[:, None] * qs.astype(np.float32)).astype(np.float32)
    return enc, expected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent.parent / "tests/data/quant"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    total = 0

    # Plain float types, with the special values (signed zero, inf, subnormals, NaN).
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-8, -3e-6, 6.1e-5, 65504.0, 70000.0,
                         1.0 + 2.0**-10, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 3.3895e38, 1e-40, -1.5],
                        dtype=np.float32)
    plain_src = np.concatenate([specials, rng.standard_normal(N_PLAIN - specials.size).astype(np.float32)])
    total += write_case(out, "F32", T.F32, plain_src.view(np.uint8), plain_src, None)
    with np.errstate(over="ignore"):  # 70000 and 3.4e38 overflow to inf on purpose
        f16 = plain_src.astype(np.float16)
    total += write_case(out, "F16", T.F16, f16.view(np.uint8), gq.dequantize(f16.view(np.uint8), T.F16), plain_src)
    bf16 = gq.quantize(plain_src, T.BF16)
    total += write_case(out, "BF16", T.BF16, bf16, gq.dequantize(bf16, T.BF16), plain_src)
    f64 = np.concatenate([plain_src.astype(np.float64), rng.standard_normal(16) * 1e-3])
    total += write_case(out, "F64", 28, f64.astype("<f8").view(np.uint8), f64.astype(np.float32), None)

    # Legacy quants: quantized from fp32 by gguf-py (checks our quantizers too), and random blocks.
    for qt in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        src = source_values(rng, N_LEGACY)
        enc = gq.quantize(src, qt)
        total += write_case(out, qt.name, qt, enc, gq.dequantize(enc, qt), src)
        blocks = random_legacy_blocks(rng, qt, N_LEGACY // 32)
        total += write_case(out, qt.name + "_random", qt, blocks, gq.dequantize(blocks, qt), None)

    # k-quants: random blocks with sane scales, decoded by gguf-py.
    for qt in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K):
        blocks = random_kquant_blocks(rng, qt, N_KQUANT // QK_K)
        total += write_case(out, qt.name, qt, blocks, gq.dequantize(blocks, qt), None)

    enc, expected = q8_k_blocks(rng, N_KQUANT // QK_K)
    total += write_case(out, "Q8_K", T.Q8_K, enc, expected, None)
    print(f"wrote {total} bytes of golden vectors to {out}")


if __name__ == "__main__":
    main()
