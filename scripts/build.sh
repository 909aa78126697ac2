#!/usr/bin/env bash
# build.sh: configure and build longctx into build/ (Release, Ninja). CUDA targets build when
# nvcc is found (LONGCTX_CUDA=AUTO); pass -DLONGCTX_CUDA=OFF to skip them.
# Run: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
