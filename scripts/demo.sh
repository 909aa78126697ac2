#!/usr/bin/env bash
# demo.sh: the main job on a fresh machine: set up, build, then answer a question about a long
# document (~6K tokens) with the default model on the CPU, printing timings.
# The document is a long report with one fact hidden in the middle; the model must find it.
# Run: scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
doc=$(mktemp --suffix=.txt)
trap 'rm -f "$doc"' EXIT
{
  echo "Annual report of the northern harbour authority."
  for i in $(seq 1 90); do
    echo "Section $i. The harbour handled cargo ships, fishing boats and ferries this month. The weather was mild, the cranes were serviced on schedule, and the pilots reported no incidents in the outer channel."
    if [ "$i" = 45 ]; then echo "Important: the access code for the east warehouse is 7 4 1 9 3."; fi
  done
} >"$doc"
./build/src/cli/longctx generate -f "$doc" --chat "What is the access code for the east warehouse? Answer with the code only." -n 24
