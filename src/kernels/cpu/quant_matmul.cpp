// quant_matmul.cpp (cpu): see quant_matmul.h.
#include "kernels/cpu/quant_matmul.h"

#include <algorithm>

#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {
// Token rows per cache tile: 64 rows of Q8 activations (<= 64 * 1.25 KB per 1024 inputs) stay in
// L2 while a thread's weight rows stream past them.
constexpr int64_t kTokenTile = 64;
// Weight rows per task in a GEMV: small enough to balance 2-16 threads on a 576-row matrix,
// large enough that a task is not dominated by the pool's hand-off (~1 us).
constexpr int64_t kGemvRowGrain = 32;
// Activation rows quantized per task.
constexpr int64_t kQuantizeGrain = 16;
}  // namespace

void quant_matmul(const QuantMatmulParams& p, ThreadPool& pool) {
  const QuantMatrix& w = *p.w;
  if (p.T <= 0 || w.rows <= 0) return;
  const int64_t nb = w.cols / kQ8Block;
  if (p.x_quantized) {
    if (p.xq->T != p.T || p.xq->nb != nb) fail("quant_matmul: the quantized input has {} x {} blocks, not {} x {}", p.xq->T, p.xq->nb, p.T, nb);
  } else if (p.T == 1) {
    p.xq->resize(p.T, nb);
    quantize_q8_rows(p.x, 0, 1, *p.xq);
  } else {
    p.xq->resize(p.T, nb);
    pool.parallel_for(p.T, [&](int64_t t0, int64_t t1) { quantize_q8_rows(p.x, t0, t1, *p.xq); }, kQuantizeGrain);
  }
  // GEMV: fine row chunks; GEMM: one contiguous row range per thread, token tiles inside it.
  const int64_t grain = p.T == 1 ? kGemvRowGrain : std::max<int64_t>(1, (w.rows + pool.size() - 1) / pool.size());
  pool.parallel_for(w.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < p.T; t0 += kTokenTile) {
      const QuantTile tile{w.type, w.data.data() + r0 * w.row_bytes, w.row_bytes, w.cols, r1 - r0,
                           p.xq, t0, std::min(kTokenTile, p.T - t0), p.y + t0 * w.rows + r0, w.rows,
                           !p.rows_alone};
      quant_gemm_tile(tile, p.isa);
    }
    if (p.bias)
      for (int64_t t = 0; t < p.T; ++t)
        for (int64_t r = r0; r < r1; ++r) p.y[t * w.rows + r] += p.bias[r];
  }, grain);
}

}  // namespace longctx
