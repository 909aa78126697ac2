// fuzz_safetensors.cpp: libFuzzer target for the safetensors parser (header JSON and layout).
// Build and run: fuzz/run_fuzz.sh   (or build-fuzz/fuzz_safetensors CORPUS_DIR -max_total_time=60)
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  longctx::fuzz::parse_and_exercise(longctx::fuzz::Format::kSafetensors, {data, size});
  return 0;
}
