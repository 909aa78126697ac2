#!/usr/bin/env bash
# test.sh: from a fresh clone: install dependencies and the default model, build, run all tests.
# GPU tests (tests/cuda) skip themselves on a machine without a GPU; scripts/gpu-check.sh runs
# them on the GPU machine.
# Run: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 1200
