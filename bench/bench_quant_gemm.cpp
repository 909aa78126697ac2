// bench_quant_gemm.cpp (bench, CPU): single-thread speed of the quantized matmul's tile kernel
// (kernels/cpu/quant_dot.h quant_gemm_tile), in GMAC/s (rows * cols * tokens multiply-adds per
// second), per weight type, kernel set and shape. The shapes are the default model's prefill
// GEMMs as quant_matmul cuts them for 2 threads: half of a 1536 x 576 gate/up matrix and half of
// the 576 x 1536 down matrix, against a token tile of 64 rows; T = 1 is the decode GEMV.
// Timing: the median of `reps` runs after one warm-up (CPU time of this thread, so other load on
// the machine slows it less than wall time would).
// Run: build/bench/longctx_bench_quant_gemm [reps=15] [type=all|Q4_0|Q4_1|Q8_0|Q4_K] [isa=best|all]
// Prints one line per case and a JSON array on the last line.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quant_dot.h"
#include "loader/quantize.h"

namespace {
using namespace longctx;

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// `rows` random weight rows of `type` (the repo's ggml quantizers on Gaussian values; Q4_K: random
// bytes with small positive scales, as in tests/kernels/test_quant_matmul.cpp).
std::vector<uint8_t> random_rows(QuantType type, int64_t rows, int64_t cols, size_t& row_bytes, std::mt19937_64& rng) {
  const QuantTypeInfo& info = quant_type_info(type);
  row_bytes = size_t(cols / info.block_size * info.block_bytes);
  std::vector<uint8_t> w(size_t(rows) * row_bytes);
  std::normal_distribution<float> normal(0.f, 0.05f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<float> v(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = w.data() + r * row_bytes;
    for (float& x : v) x = normal(rng);
    switch (type) {
      case QuantType::q4_0: quantize_row_q4_0(v.data(), row, cols); break;
      case QuantType::q4_1: quantize_row_q4_1(v.data(), row, cols); break;
      case QuantType::q8_0: quantize_row_q8_0(v.data(), row, cols); break;
      case QuantType::q4_k:
        for (size_t i = 0; i < row_bytes; ++i) row[i] = uint8_t(byte(rng));
        for (int64_t b = 0; b < cols / 256; ++b) {
          const uint16_t small = 0x1400;  // fp16 ~0.001
          std::memcpy(row + b * 144, &small, 2);
          std::memcpy(row + b * 144 + 2, &small, 2);
        }
        break;
    }
  }
  return w;
}

struct Case {
  int64_t rows, cols, T;
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  const std::string type_arg = argc > 2 ? argv[2] : "all";
  const bool all_isas = argc > 3 && std::string(argv[3]) == "all";
  std::mt19937_64 rng(1234);
  const Case cases[] = {{768, 576, 64}, {288, 1536, 64}, {768, 576, 128}, {768, 576, 512}, {768, 576, 16}, {768, 576, 4}, {768, 576, 2}, {768, 576, 1}};
  std::string json = "[";
  for (QuantType type : {QuantType::q4_0, QuantType::q4_1, QuantType::q8_0, QuantType::q4_k}) {
    const char* tname = quant_type_info(type).name;
    if (type_arg != "all" && type_arg != tname) continue;
    for (CpuIsa isa : {CpuIsa::avx512vnni, CpuIsa::avx2, CpuIsa::scalar}) {
      if (!cpu_isa_supported(isa) || (!all_isas && isa != best_cpu_isa())) continue;
      for (const Case& c : cases) {
        if (c.cols % quant_type_info(type).block_size != 0) continue;  // Q4_K: only the 1536-wide rows
        size_t row_bytes = 0;
        const std::vector<uint8_t> w = random_rows(type, c.rows, c.cols, row_bytes, rng);
        std::normal_distribution<float> normal(0.f, 1.f);
        std::vector<float> x(size_t(c.T * c.cols)), y(size_t(c.T * c.rows));
        for (float& v : x) v = normal(rng);
        Q8Rows xq;
        xq.resize(c.T, c.cols / kQ8Block);
        quantize_q8_rows(x.data(), 0, c.T, xq);
        const QuantTile tile{type, w.data(), row_bytes, c.cols, c.rows, &xq, 0, c.T, y.data(), c.rows};
        // Small cases run several times per timed sample so a sample is well above the clock's grain.
        const int inner = std::max<int64_t>(1, 20'000'000 / (c.rows * c.cols * c.T));
        std::vector<double> times;
        for (int rep = -1; rep < reps; ++rep) {
          const double t0 = thread_seconds();
          for (int i = 0; i < inner; ++i) quant_gemm_tile(tile, isa);
          if (rep >= 0) times.push_back((thread_seconds() - t0) / inner);
        }
        std::sort(times.begin(), times.end());
        const double median = times[times.size() / 2];
        const double gmacs = double(c.rows) * double(c.cols) * double(c.T) / median * 1e-9;
        std::printf("%-5s %-10s rows %5lld cols %5lld T %4lld: %8.1f us  %6.1f GMAC/s\n", tname, cpu_isa_name(isa),
                    (long long)c.rows, (long long)c.cols, (long long)c.T, median * 1e6, gmacs);
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s{\"type\":\"%s\",\"isa\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"T\":%lld,\"us\":%.2f,\"gmacs\":%.2f}",
                      json.size() > 1 ? "," : "", tname, cpu_isa_name(isa), (long long)c.rows, (long long)c.cols,
                      (long long)c.T, median * 1e6, gmacs);
        json += buf;
      }
    }
  }
  std::printf("%s]\n", json.c_str());
  return 0;
}
