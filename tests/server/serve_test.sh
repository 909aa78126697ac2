#!/usr/bin/env bash
# serve_test.sh: runs serve_test.py (the `openai` client against `longctx serve`) with the test
# venv's Python, which scripts/bootstrap.sh makes ($LONGCTX_TEST_VENV, default ~/.cache/longctx/test-venv).
# Run: tests/server/serve_test.sh build/src/cli/longctx
set -uo pipefail
venv=${LONGCTX_TEST_VENV:-$HOME/.cache/longctx/test-venv}
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  echo "serve_test: no Python with the openai package at $venv; run scripts/bootstrap.sh" >&2
  exit 1
fi
exec "$venv/bin/python" "$(dirname "$0")/serve_test.py" "$@"
