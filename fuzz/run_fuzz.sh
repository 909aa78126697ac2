#!/usr/bin/env bash
# run_fuzz.sh: build the loader's libFuzzer targets with ASan + UBSan and run each for a bounded time.
#
# What: fuzz_gguf and fuzz_safetensors (fuzz/*.cpp) parse arbitrary bytes; any crash, sanitizer
#       report, leak or non-longctx::Error exception is a bug. Seeds are small valid files made by
#       the loader's own writers (fuzz_make_seeds); the corpus grows in build-fuzz/corpus/.
# Why:  the parsers read untrusted files; the CTest fuzz smoke only covers 20000 mutations.
# Run:  fuzz/run_fuzz.sh [SECONDS_PER_TARGET]      (default 30; needs clang + libclang-rt-14-dev)
#       Crash inputs land in build-fuzz/artifacts/; replay one with build-fuzz/fuzz_gguf FILE.
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
jobs="${FUZZ_BUILD_JOBS:-2}"

CC="${CC:-clang}" CXX="${CXX:-clang++}" cmake -S "$root/fuzz" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" >/dev/null
cmake --build "$build" -j"$jobs" --target fuzz_gguf fuzz_safetensors fuzz_make_seeds

mkdir -p "$build/corpus" "$build/artifacts"
"$build/fuzz_make_seeds" "$build/corpus"

status=0
for target in gguf safetensors; do
  echo "== fuzz_$target for ${seconds}s"
  # -rss_limit_mb: a parse must never need much memory for a small input.
  if ! "$build/fuzz_$target" "$build/corpus/$target" -max_total_time="$seconds" -max_len=65536 \
      -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/${target}-" -print_final_stats=1 2>"$build/fuzz_$target.log"; then
    echo "fuzz_$target FAILED; see $build/fuzz_$target.log and $build/artifacts/" >&2
    tail -40 "$build/fuzz_$target.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$build/fuzz_$target.log" | tail -2
  fi
done
exit $status
