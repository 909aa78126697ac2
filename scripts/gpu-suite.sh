#!/usr/bin/env bash
# gpu-suite.sh: every GPU test binary of one build, on the device machine, in one call: the check
# a merged tree gets before it lands (the per-area scripts gpu-*.sh also benchmark).
#
# What: test_cuda, test_gpu (its cases include the small tests/gpu binaries'), test_kv, test_kv_offload, test_hip_gpu, test_hip_gpu_method,
# test_minference_index, test_tokenselect_step and any test_ihip* / test_infinitehip* binary,
# each under a timeout, then compute-sanitizer memcheck on the binaries whose cases are small
# (test_cuda's large shapes would take minutes under memcheck: the area scripts memcheck their
# kernels' cases).
# Logs land in $OUT; the summary lists passed / failed / skipped counts per binary.
# Build here (no GPU needed; CUDA on), then pack the binaries and the shared libraries they need
# into one xz archive (the carry limit is 64 MiB):
#   ninja -C build && bash scripts/gpu-suite.sh --pack build .carry/suite
# Run on the device: OUT=$OUT BIN=.carry/suite bash .carry/suite/gpu-suite.sh
# (TESTS="test_x test_y" puts those binaries first; MEMCHECK="test_z" memchecks those instead).
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 carry=$3 stage=$(mktemp -d)
  mkdir -p "$stage/lib"
  for t in "$build"/tests/cuda/test_* "$build"/tests/gpu/test_gpu "$build"/tests/kv/test_kv "$build"/tests/kv/test_kv_offload; do
    [ -x "$t" ] && cp "$t" "$stage/"
  done
  strip "$stage"/test_*
  source "$(dirname "$0")/gpu-carry.sh"
  carry_libs "$stage/lib" "$stage"/test_*
  rm -rf "$carry" && mkdir -p "$carry"
  # xz -9's 64 MiB dictionary spans binaries, which share most of their code: half the size of -6's.
  XZ_OPT=${XZ_OPT:--9} tar -C "$stage" -cJf "$carry/bin.tar.xz" . && rm -rf "$stage"
  cp "$0" "$carry/"
  du -sh "$carry"
  exit 0
fi
OUT=${OUT:-out}
BIN=${BIN:-.carry/suite}
if [ -f "$BIN/bin.tar.xz" ]; then
  mkdir -p /tmp/suite-bin && tar -xJf "$BIN/bin.tar.xz" -C /tmp/suite-bin && BIN=/tmp/suite-bin
fi
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; date -u; } | tee "$OUT/env.txt"
status=0
# TESTS="test_a test_b" runs those first, in that order (the rest follow): a call cut short by the
# device budget still reports the binaries that matter most.
order=()
for name in ${TESTS:-}; do [ -x "$BIN/$name" ] && order+=("$BIN/$name"); done
for t in "$BIN"/test_*; do [[ " ${order[*]} " == *" $t "* ]] || order+=("$t"); done
for t in "${order[@]}"; do
  name=$(basename "$t")
  timeout "${TEST_TIMEOUT:-240}" "$t" > "$OUT/$name.log" 2>&1; rc=$?
  passed=$(grep -oE "^\[  PASSED  \] [0-9]+" "$OUT/$name.log" | grep -oE "[0-9]+$")
  skipped=$(grep -oE "^\[  SKIPPED \] [0-9]+ test" "$OUT/$name.log" | grep -oE "[0-9]+")
  failed=$(grep -cE "^\[  FAILED  \] [A-Za-z]" "$OUT/$name.log")
  echo "$name: rc=$rc passed=${passed:-0} skipped=${skipped:-0} failed=$failed"
  grep -E "^\[  FAILED  \] [A-Za-z]|: Failure$" "$OUT/$name.log" | head -10
  [ $rc = 0 ] || status=1
done
for t in ${MEMCHECK-test_hip_gpu test_kv_offload test_tokenselect_step}; do  # MEMCHECK="" skips
  [ -x "$BIN/$t" ] || continue
  timeout "${MEMCHECK_TIMEOUT:-240}" compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/$t" \
    > "$OUT/memcheck-$t.log" 2>&1; rc=$?
  echo "memcheck $t: rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-$t.log" | tail -1)"
  [ $rc = 0 ] || status=1
done
exit $status
