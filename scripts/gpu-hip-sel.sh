#!/usr/bin/env bash
# gpu-hip-sel.sh: one device call for HiP's prefill estimator's selection and bf16 spills (issue
# 14): the branch's test_hip_gpu (all) and test_hip_gpu_method (the selection is shared with
# decode), memcheck on prefill and decode cases, two interleaved rounds of bench_hip (decode at
# 128K / 1M, prefill estimate bf16 / fp8 at 128K / 1M) beside main's binary
# (longctx_bench_hip_main), the phase clocks of both (longctx_bench_hip_clocks[_main]: where a
# prefill CTA's cycles go), and the prefill kernels' local-memory instructions (cuobjdump).
# Each step is cut to what is left of BUDGET seconds (default 380).
# Pack (here, after building longctx_bench_hip test_hip_gpu test_hip_gpu_method in BUILD):
#   bash scripts/gpu-hip-sel.sh --pack BUILD MAIN_SRC MAIN_BENCH C
#   (MAIN_SRC: main's checkout, whose hip_estimate.cu gives the baseline's clocks binary;
#    C = .carry/hip-sel)
# Run (device): OUT=$OUT GIT_COMMIT=<sha> bash .carry/hip-sel/gpu-hip-sel.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
source "$D/gpu-carry.sh"
if [ "${1:-}" = --pack ]; then
  set -e
  build=$2 main_src=$3 main_bench=$4 c=$5 tmp=/tmp/hip-sel-pack
  rm -rf "$c" "$tmp" && mkdir -p "$c" "$tmp"
  bash "$D/gpu-hip-clocks-build.sh" "$build"
  # main's clocks binary: its hip_estimate.cu with the same flags, linked ahead of this build's
  # library (bench_hip.cu and every other object are main's too: the branch changes only
  # hip_estimate.cu among them).
  clk=$(realpath "$build")/hip-clocks
  nvcc -I"$main_src/src" -isystem=/usr/local/cuda/include -O3 -DNDEBUG \
    "--generate-code=arch=compute_90a,code=[compute_90a,sm_90a]" -lineinfo --expt-relaxed-constexpr -std=c++20 \
    -DLONGCTX_HIP_PHASE_CLOCKS -x cu -c "$main_src/src/kernels/cuda/hip_estimate.cu" -o "$clk/hip_estimate_main.o"
  /usr/bin/c++ -O3 -DNDEBUG -static-libstdc++ -static-libgcc "$clk/bench_hip.o" "$clk/hip_estimate_main.o" \
    -o "$tmp/longctx_bench_hip_clocks_main" -Wl,-rpath,/usr/local/cuda/lib "$build/src/kernels/cuda/liblongctx_cuda.a" \
    /usr/local/cuda/lib/libcudart_static.a -ldl /usr/lib/x86_64-linux-gnu/librt.a /usr/local/cuda/lib/libcublasLt.so \
    -lcudadevrt -lcudart_static -lrt -lpthread -ldl
  cp "$build/tests/cuda/test_hip_gpu" "$build/tests/cuda/test_hip_gpu_method" "$build/bench/longctx_bench_hip" \
    "$build/bench/longctx_bench_hip_clocks" "$tmp/"
  pack_ab "$tmp" "$c" "$main_bench" "$0"
  exit 0
fi
out_archive hip-sel results.tgz summary.txt
step_session "$D/bins.tar.xz" /tmp/hip-sel-bin "$OUT/logs" "${BUDGET:-380}"
B=/tmp/hip-sel-bin L=$OUT/logs
step test_hip_gpu 90 $B/test_hip_gpu
step test_hip_gpu_method 60 $B/test_hip_gpu_method
bench() { step "$1" 45 "$2" --lens 131072,1048576 --prefill 131072,1048576 --dense-max 0 --json "$L/$1.json"; }
bench r1_main $B/longctx_bench_hip_main
bench r1_head $B/longctx_bench_hip
bench r2_head $B/longctx_bench_hip
bench r2_main $B/longctx_bench_hip_main
for n in clocks_main clocks; do
  step $n 40 $B/longctx_bench_hip_$n --lens "" --prefill 131072,1048576 --dense-max 0 --estimate-only
done
step memcheck 70 compute-sanitizer --tool memcheck --error-exitcode 99 $B/test_hip_gpu \
  --gtest_filter='HipEstimate.PrefillBlockIds*:HipEstimate.PrefillCtaSizes*:HipEstimate.PrefillOverAnFp8*:HipEstimate.DecodeRefresh*:HipEstimate.DecodeOverAnFp8*'
step sass 30 bash -c "for b in $B/longctx_bench_hip_main $B/longctx_bench_hip; do cuobjdump -sass \$b | awk -v n=\$(basename \$b) '/Function : /{f = /prefill_kernelI(13__nv_bfloat16|13__nv_fp8_e4m3)Lb1ELi2ELi128/; if (f) k = /bfloat16/ ? \"bf16\" : \"fp8\"} f && /LDL/{l[k]++} f && /STL/{s[k]++} END{for (k in l) print n, k, l[k], \"LDL\", s[k], \"STL\"; print n, \"done\"}'; done"
exit $status
