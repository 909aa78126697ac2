#!/usr/bin/env bash
# gpu-offload-engine.sh: KV offload in the GPU model (gpu/gpu_offload.h, issue 17), in one device
# call: the model-level tests (test_gpu_offload: host layers == HBM layers bit for bit, offload on
# == off, bf16 and fp8, the plan and its messages; with them, when packed, test_hip_gpu (HiP's
# estimator vs the CPU reference, bf16 and fp8 keys) and test_kv_offload (the tier's kernels vs
# the CPU twin, HiP decode offload on == off, bf16 and fp8)), then `longctx bench model` runs of
# Llama-3-8B geometry (random weights) with HiP decode, each a line of $RUNS:
# "NAME LENGTHS EXTRA-ARGS..." (an --attn in EXTRA-ARGS replaces the default one).
# Logs and JSON land in $OUT (bench_NAME.json / .log); env.txt has the card, host memory, commit.
# Here (no GPU needed), build and pack (stripped, one .tar.xz, the shared libraries carried):
#   cmake -S . -B build-gpu -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DLONGCTX_BENCH=OFF -DBLA_STATIC=ON \
#     -DLONGCTX_PICTURES=OFF -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
#   ninja -C build-gpu -j2 longctx test_gpu_offload [test_hip_gpu test_kv_offload]
#   scripts/gpu-offload-engine.sh --pack build-gpu /work/main/.carry/offload-engine
# On the device: OUT=$OUT BIN=.carry/offload-engine bash .carry/offload-engine/gpu-offload-engine.sh
#   (the `run` tool copies the lead's checkout only: pass carry [".carry/<folder>"] or the folder
#   is not there)
#   With the hash-map page table and the flat prefill staging (branch offload-flat), one call runs:
#   the tests, compute-sanitizer memcheck on test_kv_offload's hash-map cases (MEMCHECK_FILTER),
#   tests/server/serve_offload_test.py (SERVE_TEST=1: serve --kv-offload == serve over HTTP; the
#   packed tok-128k.gguf is SmolLM2's tokenizer padded to Llama-3's vocabulary), then $RUNS, each
#   skipped once less than RUN_RESERVE seconds remain before DEADLINE (seconds since the start).
#   SKIP_TESTS=1 skips the tests; TEST_GPU=1 also runs test_gpu (packed when built: the GPU model's
#   whole suite, for what the offload hooks touched); RUNS overrides the benchmark list (default below); STEP_TIMEOUT
#   bounds each run (seconds). The fp8 runs of docs/benchmarks.md ("fp8 KV offload"), one H200 call:
#   RUNS=$'fp8-offload-3m 3m --kv-cache fp8 --kv-offload\nfp8-offload-2m 2m --kv-cache fp8 --kv-offload'
#   STEP_TIMEOUT=175 (3M: 87 s of prefill; tests + 3M + 2M took 234 s of one call).
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 stage=$(mktemp -d)
  cp "$build/src/cli/longctx" "$build/tests/gpu/test_gpu_offload" "$stage/"
  [ -x "$build/tests/gpu/test_gpu" ] && cp "$build/tests/gpu/test_gpu" "$stage/"  # the whole GPU model suite, if built
  for t in cuda/test_hip_gpu kv/test_kv_offload; do [ -x "$build/tests/$t" ] && cp "$build/tests/$t" "$stage/"; done
  strip "$stage"/*
  src=$(cd "$(dirname "$0")/.." && pwd)
  cp "$src/tests/server/serve_offload_test.py" "$src/tests/server/serve_util.py" "$stage/"
  python3 "$src/scripts/gguf-tokenizer-only.py" --pad-vocab 128256 \
    "${LONGCTX_CACHE:-$HOME/.cache/longctx}/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$stage/tok-128k.gguf" >/dev/null
  source "$(dirname "$0")/gpu-carry.sh"
  mkdir -p "$stage/lib" && carry_libs "$stage/lib" "$stage/longctx" "$stage/test_gpu_offload"
  rm -rf "$carry" && mkdir -p "$carry"
  tar -C "$stage" -cJf "$carry/bin.tar.xz" . && rm -rf "$stage"
  cp "$0" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/offload-engine}
STEP_TIMEOUT=${STEP_TIMEOUT:-200}
B=/tmp/offload-engine-bin
mkdir -p "$OUT" "$B" && tar -C "$B" -xJf "$BIN/bin.tar.xz" || { echo "no $BIN/bin.tar.xz: --pack first"; exit 2; }
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  grep -E "MemTotal|MemAvailable" /proc/meminfo; nproc; echo "commit ${GIT_COMMIT:-unknown}"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
status=0
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== test_gpu_offload"
  timeout 240 "$B/test_gpu_offload" > "$OUT/test_gpu_offload.log" 2>&1 || status=1
  grep -E "^\[ (plan|stats|on vs off|message|fp8) \]|Failure|Expected|Which is|^\[  (PASSED|FAILED)|tests ran" "$OUT/test_gpu_offload.log" | head -40
  for t in test_hip_gpu test_kv_offload; do
    [ -x "$B/$t" ] || continue
    echo "== $t"
    timeout 120 "$B/$t" > "$OUT/$t.log" 2>&1 || status=1
    grep -E "Failure|^\[  (PASSED|FAILED|SKIPPED) \]|tests ran|^\[ twin \]" "$OUT/$t.log" | head -20
  done
  if [ -n "${MEMCHECK_FILTER:-}" ] && [ -x "$B/test_kv_offload" ] && command -v compute-sanitizer >/dev/null; then
    echo "== memcheck test_kv_offload --gtest_filter=$MEMCHECK_FILTER"
    timeout "${MEMCHECK_TIMEOUT:-90}" compute-sanitizer --tool memcheck --error-exitcode 99 "$B/test_kv_offload" \
      --gtest_filter="$MEMCHECK_FILTER" > "$OUT/memcheck_test_kv_offload.log" 2>&1
    rc=$?; echo "memcheck rc=$rc"; [ $rc -ne 0 ] && status=1
    grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) \]" "$OUT/memcheck_test_kv_offload.log" | head -5
  fi
fi
if [ -n "${SERVE_TEST:-}" ] && [ -f "$B/serve_offload_test.py" ]; then
  echo "== serve --kv-offload vs serve (HTTP)"
  timeout "${SERVE_TIMEOUT:-120}" python3 "$B/serve_offload_test.py" "$B/longctx" "$B/tok-128k.gguf" \
    > "$OUT/serve_offload_test.log" 2>&1
  rc=$?; echo "serve test rc=$rc"; [ $rc -ne 0 ] && status=1
  tail -12 "$OUT/serve_offload_test.log"
fi
if [ -n "${TEST_GPU:-}" ] && [ -x "$B/test_gpu" ]; then
  echo "== test_gpu"
  timeout "${TEST_GPU_TIMEOUT:-150}" "$B/test_gpu" > "$OUT/test_gpu.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) \] [0-9]|^\[  FAILED  \] [A-Za-z]|: Failure$" "$OUT/test_gpu.log" | head -20
fi
# Sparse prefill that runs on the GPU today (A-shape: 128 sinks + 4096 window), HiP decode (paper defaults).
ATTN='prefill:a_shape=128,4096;decode:hip'
RUNS=${RUNS:-"offload-1m 1m --kv-offload"}
while read -r name lengths extra; do
  [ -z "$name" ] && continue
  if [ -n "${DEADLINE:-}" ] && [ $((SECONDS + ${RUN_RESERVE:-70})) -gt "$DEADLINE" ]; then
    echo "== bench $name: skipped (${SECONDS} s used of $DEADLINE)"; continue
  fi
  echo "== bench $name: --lengths $lengths $extra"
  attn=(--attn "$ATTN")
  [[ " $extra " == *" --attn "* ]] && attn=()
  # shellcheck disable=SC2086
  timeout "$STEP_TIMEOUT" "$B/longctx" bench model --device cuda --random-weights llama3-8b "${attn[@]}" \
    --lengths "$lengths" --decode "${DECODE:-64}" $extra --json "$OUT/bench_$name.json" > "$OUT/bench_$name.log" 2>&1
  rc=$?
  echo "rc=$rc"; tail -8 "$OUT/bench_$name.log"
  [ $rc -ne 0 ] && status=1
done <<< "$RUNS"
free -g | head -2
exit $status
