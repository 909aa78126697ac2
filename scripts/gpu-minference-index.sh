#!/usr/bin/env bash
# gpu-minference-index.sh: the GPU MInference index builders in one device-machine call: the
# builder tests (GPU index == CPU index), compute-sanitizer memcheck + racecheck on small shapes,
# then the benchmark (build time vs the sparse attention it feeds), logs and JSON to $OUT, a short
# table printed last. Each step has a timeout so a hang cannot eat the device budget.
#
# Here (no GPU needed): build and pack the two binaries (stripped, one .tar.xz; OpenBLAS static):
#   cmake -S . -B build-mindex -G Ninja -DLONGCTX_CUDA=ON -DLONGCTX_NATIVE=OFF -DLONGCTX_BENCH=ON -DLONGCTX_TESTS=ON -DBLA_STATIC=ON
#   ninja -C build-mindex -j2 test_minference_index longctx_bench_minference_index
#   scripts/gpu-minference-index.sh --pack                # -> .carry/mindex/bin.tar.xz
# On the device (carry .carry/mindex):
#   OUT=/tmp/out scripts/gpu-minference-index.sh [--skip-tests] [--skip-sanitizer] [--skip-bench]
#       [--seqs 131072,524288,1048576] [--inputs random,structured] [--patterns bs,vs] [--tests GTEST_FILTER]
#       [--skip-racecheck] [--bs-wave-mb 128,512]   (also time the BS build with these scratch sizes)
set -uo pipefail
BUILD=${BUILD:-build-mindex}
CARRY=${CARRY:-.carry/mindex}

if [ "${1:-}" = "--pack" ]; then
  rm -rf "$CARRY" /tmp/mindex-pack && mkdir -p "$CARRY" /tmp/mindex-pack
  cp "$BUILD/tests/cuda/test_minference_index" "$BUILD/bench/longctx_bench_minference_index" /tmp/mindex-pack/
  strip /tmp/mindex-pack/*
  tar -C /tmp/mindex-pack -cJf "$CARRY/bin.tar.xz" test_minference_index longctx_bench_minference_index
  git rev-parse HEAD > "$CARRY/commit.txt"
  git status --short -- src/kernels/cuda tests/cuda bench scripts > "$CARRY/dirty.txt"
  ls -la "$CARRY"
  exit 0
fi

OUT=${OUT:-out}
mkdir -p "$OUT"
skip_tests=0; skip_san=0; skip_race=0; skip_bench=0
seqs=131072,524288,1048576; inputs=random,structured; patterns=bs,vs; filter='MinferenceIndex.*'; waves=""
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-tests) skip_tests=1 ;;
    --skip-sanitizer) skip_san=1 ;;
    --skip-racecheck) skip_race=1 ;;
    --skip-bench) skip_bench=1 ;;
    --patterns) patterns="$2"; shift ;;
    --seqs) seqs="$2"; shift ;;
    --inputs) inputs="$2"; shift ;;
    --tests) filter="$2"; shift ;;
    --bs-wave-mb) waves="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
BIN=/tmp/mindex-bin
rm -rf "$BIN" && mkdir -p "$BIN" && tar -C "$BIN" -xJf "$CARRY/bin.tar.xz" || { echo "no $CARRY/bin.tar.xz (run --pack here first)"; exit 1; }
COMMIT=$(cat "$CARRY/commit.txt" 2>/dev/null || echo unknown)
status=0
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
  echo "commit $COMMIT (binaries built from it plus: $(tr '\n' ' ' < "$CARRY/dirty.txt" 2>/dev/null))"; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ $skip_tests = 0 ]; then
  echo "== test_minference_index ($filter)"
  timeout ${TEST_TIMEOUT:-240} "$BIN/test_minference_index" --gtest_filter="$filter" > "$OUT/tests.log" 2>&1; rc=$?
  grep -E "^  mindex|random seed|Failure|FAILED|Expected|Which is|differs|gpu:|cpu:|picked|dropped|too many|scores off|^\[  (PASSED|FAILED|SKIPPED)" \
    "$OUT/tests.log" | head -80
  [ $rc = 0 ] || { echo "TESTS FAILED (rc=$rc)"; tail -5 "$OUT/tests.log"; status=1; }
fi
if [ $skip_san = 0 ]; then
  small='MinferenceIndex.TinyPrompts:MinferenceIndex.BudgetsLargerThanPrompt:MinferenceIndex.Errors'
  echo "== compute-sanitizer memcheck ($small + mixed chunks + block-sparse)"
  timeout ${MEMCHECK_TIMEOUT:-150} compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/test_minference_index" \
    --gtest_filter="$small:MinferenceIndex.MixedChunkedPrefill:MinferenceIndex.BlockSparseGqa" > "$OUT/memcheck.log" 2>&1; rc=$?
  tail -3 "$OUT/memcheck.log"
  [ $rc = 0 ] || { echo "MEMCHECK FAILED (rc=$rc)"; grep -m5 -A8 "=====" "$OUT/memcheck.log"; status=1; }
fi
if [ $skip_san = 0 ] && [ $skip_race = 0 ]; then
  echo "== compute-sanitizer racecheck (tiny prompts, block-sparse)"
  timeout ${RACECHECK_TIMEOUT:-120} compute-sanitizer --tool racecheck --error-exitcode 99 "$BIN/test_minference_index" \
    --gtest_filter='MinferenceIndex.TinyPrompts:MinferenceIndex.BlockSparseGqa' > "$OUT/racecheck.log" 2>&1; rc=$?
  tail -3 "$OUT/racecheck.log"
  [ $rc = 0 ] || { echo "RACECHECK FAILED (rc=$rc)"; grep -m5 -A8 "=====" "$OUT/racecheck.log"; status=1; }
fi
if [ $skip_bench = 0 ]; then
  echo "== longctx_bench_minference_index (seqs $seqs, inputs $inputs, patterns $patterns)"
  timeout ${BENCH_TIMEOUT:-300} "$BIN/longctx_bench_minference_index" --seqs "$seqs" --inputs "$inputs" --patterns "$patterns" \
    ${waves:+--bs-wave-mb "$waves"} --json "$OUT/bench_minference_index.json" > /dev/null 2> "$OUT/bench.log"; rc=$?
  cat "$OUT/bench.log"
  [ $rc = 0 ] || { echo "BENCH FAILED (rc=$rc)"; status=1; }
fi
echo "== summary (commit $COMMIT)"
python3 - "$OUT" "$COMMIT" <<'PY'
import json, os, sys
out, commit = sys.argv[1], sys.argv[2]
p = os.path.join(out, "bench_minference_index.json")
if not os.path.exists(p):
    print("no benchmark JSON"); sys.exit(0)
d = json.load(open(p))
print(f"{d['device']}, {d['date']}, commit {commit}")
print(f"{'S':>8} {'inputs':<10} {'pattern':<22} {'build ms':>9} {'attn ms':>10} {'share':>7}  stages vs/bs/csr ms")
for r in d["runs"]:
    st = r["stage_ms"]
    print(f"{r['seq']:>8} {r['inputs']:<10} {r['pattern']:<22} {r['build_ms']:9.3f} {r['attention_ms']:10.2f} "
          f"{100*r['index_share']:6.2f}%  {st.get('vs', 0):.2f}/{st['bs']:.2f}/{st['csr']:.2f}")
d["commit"] = commit
d["command"] = "scripts/gpu-minference-index.sh"
json.dump(d, open(os.path.join(out, "results.json"), "w"), indent=1)
PY
exit $status
