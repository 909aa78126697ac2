// bench_attention.h: the CUDA attention benchmark as a function (see bench_cuda.cu), shared by
// the standalone longctx_bench_cuda binary and `longctx bench attention`.
#pragma once

// argv[0] is the program name; options as in bench_cuda.cu. Returns a process exit code.
int bench_attention_main(int argc, char** argv);
