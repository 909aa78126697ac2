#!/usr/bin/env bash
# gpu-eval-cells.sh: quality cells on the default model (SmolLM2-135M) on the GPU, in three device
# calls made back to back: any list of `longctx eval` runs, all in parallel on the one GPU.
#
# Why: a call carries 64 MiB with the checkout (~13 MB); the model is 90.5 MB as xz and the CLI with
# its shared libraries (OpenBLAS's 36 MB) 17.7 MB as xz, so the model travels in two parts
# (gpu-carry.sh carry_model_xz / join_model_xz) and the binary in a third call; a machine keeps
# /root while it stays warm (30 s between calls).
# Here (no GPU), after `ninja -C BUILD longctx` (CUDA on):
#   bash scripts/gpu-eval-cells.sh --pack BUILD CELLS /work/main/.carry/evalcells
# CELLS: a file, one cell a line, `NAME ARGS...` (ARGS after `longctx eval`, without --device/--json);
# `#` lines are comments (e.g. scripts/eval-cells/s13-quality.txt). On the device:
#   OUT=$OUT bash .carry/evalcells/p1/gpu-eval-cells.sh store    # model part 1, the ppl text -> /root
#   OUT=$OUT bash .carry/evalcells/p2/gpu-eval-cells.sh store    # model part 2 -> /root
#   OUT=$OUT bash .carry/evalcells/p3/gpu-eval-cells.sh eval     # joins the model; runs every cell
# eval: each cell one process under CELL_LIMIT_S (default 400 s; a cut cell's progress lines stay
# in its log), `== NAME: rc, seconds` in summary.txt; all of it in $OUT/all.tgz.
# FOCUS_FILE=F at --pack also carries the test binaries F names (scripts/merged-focus/*.txt format:
# `NAME LIMIT_S BINARY GTEST_FILTER [memcheck]`) and the eval call runs those cases one after the
# other while the cells run: the GPU tests that need the default model get it without a call of their own.
# Status: packed and checked here (sizes, bash -n); not yet run on a device (session 13's device
# time ran out before its first call). scripts/gpu-ihip-rank.sh ran the same model carrying.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/gpu-carry.sh"  # carry_model_xz, join_model_xz, carry_libs, record_env, unpack_bin, out_archive

if [ "${1:-}" = "--pack" ]; then
  build=$2 cells=$3 carry=$4 tmp=/tmp/gpu-eval-cells-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry/p1" "$carry/p2" "$carry/p3" "$tmp/bin"
  carry_model_xz "$carry/p1" "$carry/p2" || exit 2
  xz -T2 -c "${LONGCTX_CACHE:-$HOME/.cache/longctx}/texts/paradise_lost.txt" > "$carry/p1/paradise_lost.txt.xz"
  cp "$build/src/cli/longctx" "$tmp/bin/" && strip "$tmp/bin/longctx"
  if [ -n "${FOCUS_FILE:-}" ]; then
    cp "$FOCUS_FILE" "$carry/p3/focus.txt"
    for t in $(awk '!/^#/ && NF >= 4 {print $3}' "$FOCUS_FILE" | sort -u); do
      cp "$(find "$build/tests" -name "$t" -type f -executable | head -1)" "$tmp/bin/" && strip "$tmp/bin/$t" || exit 2
    done
  fi
  carry_libs "$tmp/bin/lib" "$tmp/bin"/*
  tar -C "$tmp/bin" -cf - . | xz -9e -T2 > "$carry/p3/bin.tar.xz"
  git -C "$HERE" rev-parse --short HEAD > "$tmp/commit.txt"
  cp "$cells" "$carry/p3/cells.txt"
  for d in p1 p2 p3; do cp "$0" "$HERE/gpu-carry.sh" "$tmp/commit.txt" "$carry/$d/"; done
  du -sb "$carry"/p*
  exit 0
fi

what=${1:?usage: gpu-eval-cells.sh --pack BUILD CELLS CARRY | store | eval}
export LONGCTX_CACHE=${LONGCTX_CACHE:-/root/longctx-cache}
out_archive gpu-eval-cells all.tgz summary.txt env.txt
record_env "$OUT/env.txt" "$(cat "$HERE/commit.txt" 2>/dev/null || echo unknown)"
T0=$(date +%s)
case $what in
  store)
    mkdir -p "$LONGCTX_CACHE/models" "$LONGCTX_CACHE/texts"
    for f in "$HERE"/model.xz.part*; do cp "$f" "$LONGCTX_CACHE/models/" && echo "$(basename "$f") stored"; done
    [ -f "$HERE/paradise_lost.txt.xz" ] && xz -d -c "$HERE/paradise_lost.txt.xz" > "$LONGCTX_CACHE/texts/paradise_lost.txt" &&
      echo "the ppl text stored"
    ls "$LONGCTX_CACHE/models" | tee -a "$OUT/summary.txt"
    ;;
  eval)
    join_model_xz "$LONGCTX_CACHE/models/model.xz.part2" 2>&1 | tee -a "$OUT/summary.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || exit 1
    B=/tmp/gpu-eval-cells-bin
    unpack_bin "$HERE/bin.tar.xz" "$B"
    while read -r name args; do
      [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
      # shellcheck disable=SC2086  # ARGS are words of the cell's line
      ( t=$(date +%s); timeout "${CELL_LIMIT_S:-400}" "$B/longctx" eval $args --device cuda --json "$OUT/$name.json" \
          > "$OUT/$name.txt" 2> "$OUT/$name.log"
        echo "== $name: rc=$?, $(( $(date +%s) - t )) s" >> "$OUT/summary.txt" ) &
    done < "$HERE/cells.txt"
    if [ -f "$HERE/focus.txt" ]; then
      while read -r name limit bin filter tool; do
        [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
        pre=(); [ "${tool:-}" = memcheck ] && pre=(compute-sanitizer --tool memcheck --error-exitcode 99)
        t=$(date +%s)
        timeout "$limit" "${pre[@]}" "$B/$bin" --gtest_filter="$filter" > "$OUT/focus-$name.log" 2>&1
        echo "== focus $name: rc=$?, $(( $(date +%s) - t )) s" >> "$OUT/summary.txt"
        grep -hE "^\[  (PASSED|FAILED|SKIPPED) |ERROR SUMMARY" "$OUT/focus-$name.log" | head -8 >> "$OUT/summary.txt"
      done < "$HERE/focus.txt"
    fi
    wait
    for f in "$OUT"/*.txt; do [ "$(basename "$f")" = summary.txt ] || { echo "== $f"; tail -6 "$f"; }; done
    for f in "$OUT"/*.log; do grep -m2 -i "longctx:\|error" "$f" && echo "   ^ $f"; done
    ;;
  *) echo "unknown: $what (store | eval)" >&2; exit 2 ;;
esac
echo "total $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
