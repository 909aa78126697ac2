#!/usr/bin/env python3
"""gguf-tokenizer-only.py: copy a GGUF file's metadata (tokenizer included) without its tensors.

What: writes OUT as a GGUF v2/v3 file with IN's header and every metadata key/value, bytes
      unchanged, and zero tensors (a few MB instead of the weights).
Why:  `longctx serve -m OUT --random-weights GEOMETRY` serves random weights with a real
      tokenizer on the GPU machine, where the default model itself is too big to carry.
Run:  python3 scripts/gguf-tokenizer-only.py ~/.cache/longctx/models/SmolLM2-135M-Instruct.Q4_1.gguf tok.gguf
"""
import struct
import sys

# Byte sizes of the fixed-size GGUF value types (8 = string and 9 = array are sized by content).
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


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


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        buf = f.read()
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    if magic != b"GGUF" or version not in (2, 3):
        sys.exit(f"gguf-tokenizer-only: {sys.argv[1]} is not a GGUF v2/v3 file")
    off = 24
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", buf, off)
        off += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, off)
        off = skip_value(buf, off + 4, vtype)
    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<4sIQQ", magic, version, 0, n_kv))
        f.write(buf[24:off])
    print(f"wrote {sys.argv[2]}: {n_kv} metadata keys, {off} bytes, no tensors")


if __name__ == "__main__":
    main()
