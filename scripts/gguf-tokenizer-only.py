#!/usr/bin/env python3
"""gguf-tokenizer-only.py: copy a GGUF file's metadata (tokenizer included) without its tensors.

What: writes OUT as a GGUF v2/v3 file with IN's header and every metadata key/value, bytes
      unchanged, and zero tensors (a few MB instead of the weights).
Why:  `longctx serve -m OUT --random-weights GEOMETRY` serves random weights with a real
      tokenizer on the GPU machine, where the default model itself is too big to carry.
      --pad-vocab N appends user-defined tokens "<|pad_I|>" (and their types / scores) up to N
      entries, so that a geometry with a larger vocabulary (llama3-8b: 128256) can be served
      with this tokenizer: random weights sample every id, and each must decode to something.
Run:  python3 scripts/gguf-tokenizer-only.py ~/.cache/longctx/models/SmolLM2-135M-Instruct.Q4_1.gguf tok.gguf
      python3 scripts/gguf-tokenizer-only.py --pad-vocab 128256 IN.gguf tok-128k.gguf
"""
import struct
import sys

# Byte sizes of the fixed-size GGUF value types (8 = string and 9 = array are sized by content).
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
INT32, FLOAT32 = 5, 6
USER_DEFINED = 4  # llama.cpp's token type for added tokens that decode to their text


def skip_value(buf, off, vtype):
    """Offset just past one value of type vtype at off."""
    if vtype in FIXED:
        return off + FIXED[vtype]
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", buf, off)
        return off + 8 + n
    if vtype == ARRAY:
        etype, n = struct.unpack_from("<IQ", buf, off)
        off += 12
        if etype in FIXED:
            return off + n * FIXED[etype]
        for _ in range(n):
            off = skip_value(buf, off, etype)
        return off
    sys.exit(f"gguf-tokenizer-only: unknown GGUF value type {vtype}")


def padded_array(key, buf, off, n_have, n_want):
    """The bytes of array value at off (after its type tag) extended to n_want entries."""
    etype, n = struct.unpack_from("<IQ", buf, off)
    end = skip_value(buf, off, ARRAY)
    body = buf[off + 12:end]
    extra = b""
    for i in range(n_have, n_want):
        if key == "tokenizer.ggml.tokens":
            t = f"<|pad_{i}|>".encode()
            extra += struct.pack("<Q", len(t)) + t
        elif key == "tokenizer.ggml.token_type":
            extra += struct.pack("<i", USER_DEFINED)
        else:  # tokenizer.ggml.scores
            extra += struct.pack("<f", -1e9)
    return struct.pack("<IQ", etype, n_want) + body + extra, end


def main():
    args = sys.argv[1:]
    pad = 0
    if len(args) == 4 and args[0] == "--pad-vocab":
        pad = int(args[1])
        args = args[2:]
    if len(args) != 2:
        sys.exit(__doc__)
    with open(args[0], "rb") as f:
        buf = f.read()
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    if magic != b"GGUF" or version not in (2, 3):
        sys.exit(f"gguf-tokenizer-only: {args[0]} is not a GGUF v2/v3 file")
    off = 24
    out = []
    n_vocab = None
    for _ in range(n_kv):
        start = off
        (klen,) = struct.unpack_from("<Q", buf, off)
        key = buf[off + 8:off + 8 + klen].decode()
        off += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, off)
        if pad and vtype == ARRAY and key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                               "tokenizer.ggml.scores"):
            n = struct.unpack_from("<Q", buf, off + 8)[0]
            n_vocab = n if n_vocab is None else n_vocab
            if n > pad:
                sys.exit(f"gguf-tokenizer-only: {key} has {n} entries, more than --pad-vocab {pad}")
            value, off = padded_array(key, buf, off + 4, n, pad)
            out.append(buf[start:start + 8 + klen + 4] + value)
            continue
        off = skip_value(buf, off + 4, vtype)
        out.append(buf[start:off])
    with open(args[1], "wb") as f:
        f.write(struct.pack("<4sIQQ", magic, version, 0, n_kv))
        for part in out:
            f.write(part)
    size = 24 + sum(len(p) for p in out)
    note = f", vocabulary {n_vocab} padded to {pad}" if pad else ""
    print(f"wrote {args[1]}: {n_kv} metadata keys, {size} bytes, no tensors{note}")


if __name__ == "__main__":
    main()
