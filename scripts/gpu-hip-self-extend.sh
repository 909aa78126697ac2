#!/usr/bin/env bash
# gpu-hip-self-extend.sh: one device call for HiP + Self-Extend on the GPU (issue 14 item 5;
# methods/self_extend/hip_self_extend_gpu.h): the tests, compute-sanitizer memcheck on the new
# kernel cases, the cost rows (hip=self_extend=8:1024 beside dense=self_extend=8:1024 and hip,
# random-weight SmolLM2-135M at 16K and 32K), the Hopper-kernel model (llama3-8b:4, head_dim 128)
# where the windowed part moves to the generic kernel, and main's longctx beside the branch's on
# the window-less paths (hip, minference) to show they kept their speed. Interleaved main, branch.
# Pack (here, no GPU needed), into C = .carry/hip-se-gpu:
#   nice ninja -C build -j2 longctx test_sparse_window test_gpu_hip_self_extend test_gpu_self_extend
#   [MAIN_COMMIT=abc1234] scripts/gpu-hip-self-extend.sh --pack build /work/main/build C
# (MAIN_COMMIT: the commit main's build was made from, when its folder is not a checkout of it.)
# Run on the device (one call):  OUT=$OUT bash .carry/hip-se-gpu/gpu-hip-self-extend.sh
# (QUICK=1 before it: tests and memcheck, then the head_dim 128 cost rows only; ~60 s.)
# Each step has a timeout and is skipped when it would pass BUDGET seconds (default 440); logs and
# JSON go to /tmp/hse-out, tarred into $OUT/results.tgz after every step.
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  build=$2 main=$3 carry=$4 tmp=/tmp/hse-pack
  HERE=$(cd "$(dirname "$0")" && pwd)
  . "$HERE/gpu-carry.sh"  # carry_libs
  rm -rf "$carry" "$tmp" && mkdir -p "$carry" "$tmp"
  cp "$build/src/cli/longctx" "$build/tests/cuda/test_sparse_window" "$build/tests/gpu/test_gpu_hip_self_extend" \
     "$build/tests/gpu/test_gpu_self_extend" "$tmp/" || exit 2
  cp "$main/src/cli/longctx" "$tmp/longctx_main" || exit 2
  strip "$tmp"/*
  carry_libs "$tmp/lib" "$tmp/longctx" "$tmp/test_gpu_hip_self_extend"
  XZ_OPT=-T2 tar -C "$tmp" -cJf "$carry/bins.tar.xz" .
  git -C "$HERE" rev-parse --short HEAD > "$carry/commit.txt"
  echo "${MAIN_COMMIT:-$(git -C "$main" rev-parse --short HEAD)}" >> "$carry/commit.txt"  # the baseline binary's commit
  cp "$0" "$carry/"
  du -sh "$carry"/*
  exit 0
fi
FINAL=${OUT:-out}; mkdir -p "$FINAL"; OUT=/tmp/hse-out; rm -rf $OUT; mkdir -p $OUT
C=$(dirname "$0"); B=/tmp/hse; rm -rf $B; mkdir -p $B && tar -C $B -xJf "$C/bins.tar.xz"
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
log() { echo "== $* ($(date -u +%T), ${SECONDS}s)" | tee -a "$OUT/steps.log"; }
step() { local name=$1 t=$2; shift 2; log "$name"
  if [ $((SECONDS + t)) -gt ${BUDGET:-440} ]; then echo "$name skipped (time)" | tee -a "$OUT/steps.log"; return; fi
  timeout $t "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc" | tee -a "$OUT/steps.log"; tail -${TAILN:-6} "$OUT/$name.log"; tar -C $OUT -czf "$FINAL/results.tgz" .; }
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv; echo "branch, main:"
  cat "$C/commit.txt"; date -u; } > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"

# Code of the window-less kernels: registers/stack/shared and SASS instruction counts per sparse
# kernel, main vs branch (the window is a separate instantiation; the plan kernels changed).
sass_of() { cuobjdump -sass "$1" 2>/dev/null | awk '/Function :/ {f=$3} /^ +\/\*[0-9a-f]+\*\// {n[f]++} END {for (k in n) print k, n[k]}' |
  grep -E "sparse|plan" | sort; }
res_of() { cuobjdump -res-usage "$1" 2>/dev/null | grep -A1 -E "Function [^ ]*(sparse|plan)" | paste - - |
  sed -E 's/.*Function ([^ :]*).*(REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+).*/\1 \2/' | sort; }
for bin in longctx_main longctx; do sass_of $B/$bin > "$OUT/sass_$bin.txt"; res_of $B/$bin > "$OUT/res_$bin.txt"; done
{ echo "SASS instruction counts (main vs branch):"; join -a1 -a2 -e - -o 0,1.2,2.2 "$OUT/sass_longctx_main.txt" "$OUT/sass_longctx.txt" |
  awk '$2 != $3'; echo "resource usage differences:"; diff "$OUT/res_longctx_main.txt" "$OUT/res_longctx.txt"; } > "$OUT/sass_diff.txt" 2>&1
head -40 "$OUT/sass_diff.txt"

TAILN=4 step test_sparse_window 60 $B/test_sparse_window
TAILN=8 step test_gpu_hip_self_extend 90 $B/test_gpu_hip_self_extend
TAILN=4 step test_gpu_self_extend 60 $B/test_gpu_self_extend
TAILN=4 step memcheck_kernels 90 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_sparse_window
TAILN=4 step memcheck_model 90 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_gpu_hip_self_extend \
  --gtest_filter='*Chunks100'

# QUICK=1: the tests above, then only the head_dim 128 rows with every layer sparse (HiP, HiP +
# Self-Extend, dense Self-Extend; two rounds): the check of a kernel change on the Hopper path.
if [ "${QUICK:-0}" = 1 ]; then
  for r in 1 2; do
    for attn in hip=dense_layers=0 hip=dense_layers=0,self_extend=8:1024 dense=self_extend=8:1024; do
      tag=${attn//[=:,]/_}
      TAILN=3 step "q${r}_d128_$tag" 40 $B/longctx bench model --device cuda --decode 32 --repeats 2 --lengths 32k \
        --random-weights llama3-8b:4 --attn "$attn" --json "$OUT/q${r}_d128_$tag.json"
    done
  done
  log done; exit 0
fi

# Cost rows (branch binary): SmolLM2-135M geometry (head_dim 64: the generic sparse kernel throughout).
BM=(bench model --device cuda --decode 32 --repeats 2)
for attn in hip=self_extend=8:1024 dense=self_extend=8:1024 hip; do
  tag=${attn//[=:]/_}
  TAILN=8 step "cost_$tag" 45 $B/longctx "${BM[@]}" --random-weights smollm2-135m --lengths 16k,32k --attn "$attn" \
    --json "$OUT/cost_$tag.json"
done
# head_dim 128 (llama3-8b, 4 layers): plain hip's sparse prefill is the Hopper kernel; with
# Self-Extend the near part (window) and early far parts run on the generic kernel.
for attn in hip hip=self_extend=8:1024; do
  tag=${attn//[=:]/_}
  TAILN=8 step "d128_$tag" 45 $B/longctx "${BM[@]}" --random-weights llama3-8b:4 --lengths 32k --attn "$attn" \
    --json "$OUT/d128_$tag.json"
done
# Window-less paths, main vs branch, interleaved (two rounds; prefill-bound: 4 decode steps):
# hip at head_dim 64 (generic sparse kernel) and 128 (Hopper kernel), A-shape at 128 (Hopper).
AB=(bench model --device cuda --decode 4 --repeats 2 --lengths 32k)
for r in 1 2; do
  for bin in longctx_main longctx; do
    TAILN=4 step "ab${r}_${bin}_hip" 30 $B/$bin "${AB[@]}" --random-weights smollm2-135m --attn hip \
      --json "$OUT/ab${r}_${bin}_hip.json"
    TAILN=4 step "ab${r}_${bin}_hip_d128" 30 $B/$bin "${AB[@]}" --random-weights llama3-8b:4 --attn hip \
      --json "$OUT/ab${r}_${bin}_hip_d128.json"
    TAILN=4 step "ab${r}_${bin}_ashape_d128" 30 $B/$bin "${AB[@]}" --random-weights llama3-8b:4 --attn a_shape=128,4096 \
      --json "$OUT/ab${r}_${bin}_ashape_d128.json"
  done
done
log done
ls -la $OUT $FINAL
