// fuzz_gguf.cpp: libFuzzer target for the GGUF parser (and the dequantizers it feeds).
// Build and run: fuzz/run_fuzz.sh   (or build-fuzz/fuzz_gguf CORPUS_DIR -max_total_time=60)
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  longctx::fuzz::parse_and_exercise(longctx::fuzz::Format::kGguf, {data, size});
  return 0;
}
