#!/usr/bin/env bash
# libfuzzer_test.sh: the GGUF and safetensors parsers under libFuzzer + ASan/UBSan for a bounded
# time (FUZZ_SECONDS per target, default 15), as a CTest. Skips (exit 77) without clang.
set -euo pipefail
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "clang++ with libFuzzer (libclang-rt-14-dev) not installed: skipped"
  exit 77
fi
exec "$(dirname "$0")/../../fuzz/run_fuzz.sh" "${FUZZ_SECONDS:-15}"
