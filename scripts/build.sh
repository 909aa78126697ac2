#!/usr/bin/env bash
# build.sh: configure and build longctx into build/ (Release, Ninja). CUDA targets build when
# nvcc is found (LONGCTX_CUDA=AUTO); pass -DLONGCTX_CUDA=OFF to skip them. --target T builds
# only T and what it links (scripts/demo.sh builds only the CLI, `longctx`).
# Run: scripts/build.sh [--target T] [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
if [ "${1:-}" = --target ]; then
  targets=(--target "${2:?--target needs a target name}")
  shift 2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)" "${targets[@]}"
