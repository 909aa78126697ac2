// bench_cuda_main.cpp: the standalone attention benchmark binary (carried to the GPU machine).
#include "bench/bench_attention.h"

int main(int argc, char** argv) { return bench_attention_main(argc, argv); }
