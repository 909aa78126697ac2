#!/usr/bin/env bash
# test.sh: from a fresh clone: install dependencies and the default model, build, run all tests.
# GPU tests (tests/cuda) skip themselves on a machine without a GPU; scripts/gpu-check.sh runs
# them on the GPU machine.
# Run: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
# Explicit, so that a build folder configured by scripts/demo.sh (CUDA off without a GPU) gets
# every target again.
scripts/build.sh -DLONGCTX_CUDA=AUTO -DLONGCTX_TESTS=ON
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 1200
