#!/usr/bin/env bash
# demo.sh: the main job on a fresh machine: set up, build, then answer a question about a long
# document (4029 tokens with the chat template) with the default model, printing timings.
# The document is a long report with one fact hidden in the middle; the model must find it.
# It builds only what it runs: the `longctx` binary (no tests, no benchmarks), and its CUDA
# kernels only when a GPU is there (nvidia-smi sees one) or LONGCTX_CUDA=ON|AUTO asks for them;
# with them the answer comes from the GPU (--device auto), else from the CPU.
# Run: scripts/demo.sh              (LONGCTX_CUDA=ON scripts/demo.sh: build the CUDA kernels too)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cuda=${LONGCTX_CUDA:-}
if [ -z "$cuda" ]; then
  cuda=OFF
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then cuda=AUTO; fi
fi
device=cpu
[ "$cuda" = OFF ] || device=auto
scripts/build.sh --target longctx -DLONGCTX_CUDA="$cuda"
doc=$(mktemp --suffix=.txt)
trap 'rm -f "$doc"' EXIT
{
  echo "Annual report of the northern harbour authority."
  for i in $(seq 1 90); do
    echo "Section $i. The harbour handled cargo ships, fishing boats and ferries this month. The weather was mild, the cranes were serviced on schedule, and the pilots reported no incidents in the outer channel."
    if [ "$i" = 45 ]; then echo "Important: the access code for the east warehouse is 7 4 1 9 3."; fi
  done
} >"$doc"
./build/src/cli/longctx generate --device "$device" -f "$doc" --chat "What is the access code for the east warehouse? Answer with the code only." -n 24
