// a_shape_gpu.cpp: A-shape's GPU builder: the CPU method's index (build_a_shape_index), exactly,
// uploaded into a fixed device buffer sized for a full chunk.
// The index depends only on the chunk's shape (n_q, q_pos0, n_kv), not on the layer or the data,
// so one upload serves every layer of a chunk: the builder keeps the shape it last uploaded.
#include "methods/a_shape/a_shape_gpu.h"

#include <fmt/format.h>

#include "methods/a_shape/a_shape_index.h"
#include "util/error.h"

namespace longctx {

namespace {

size_t align_up(size_t n) { return (n + kAShapeAlign - 1) / kAShapeAlign * kAShapeAlign; }

class AShapeGpu final : public GpuMethod {
 public:
  explicit AShapeGpu(AShapeParams a) : a_(a) {}
  ~AShapeGpu() override { release(); }

  size_t device_bytes(const GpuShape& shape) const override { return a_shape_layout(shape.chunk).total; }
  void allocate(const GpuShape& shape) override {
    release();
    layout_ = a_shape_layout(shape.chunk);
    buf_ = cuda::dev_malloc(layout_.total);
  }
  void release() override {
    cuda::dev_free(buf_);
    buf_ = nullptr;
    have_ = false;
  }

  GpuIndex build_prefill(const GpuPrefillStep& st, cuda::Stream s) override {
    if (!buf_) fail("internal: A-shape prefill with no index buffer");
    if (!have_ || st.n_q != n_q_ || st.q_pos0 != q_pos0_ || st.n_kv != n_kv_) upload(st, s);
    GpuIndex g;
    g.index = index_;
    g.workspace = static_cast<char*>(buf_) + layout_.workspace;
    g.workspace_bytes = layout_.workspace_bytes;
    return g;
  }

 private:
  void upload(const GpuPrefillStep& st, cuda::Stream s) {
    static_assert(sizeof(KeyRange) == 2 * sizeof(int32_t), "KeyRange is an int32 (start, end) pair");
    HeadIndex hi;  // the CPU method's index, exactly
    build_a_shape_index(a_, st.n_q, st.q_pos0, st.n_kv, hi);
    if (hi.n_blocks() > layout_.max_blocks || int64_t(hi.ranges.size()) > 2 * layout_.max_blocks || !hi.cols.empty())
      fail("internal: A-shape index of {} blocks, {} ranges, {} columns exceeds its buffer", hi.n_blocks(),
           hi.ranges.size(), hi.cols.size());
    char* base = static_cast<char*>(buf_);
    cuda::copy_h2d(base + layout_.range_ptr, hi.range_ptr.data(), hi.range_ptr.size() * sizeof(int64_t), s);
    if (!hi.ranges.empty())
      cuda::copy_h2d(base + layout_.ranges, hi.ranges.data(), hi.ranges.size() * sizeof(KeyRange), s);
    cuda::copy_h2d(base + layout_.col_ptr, hi.col_ptr.data(), hi.col_ptr.size() * sizeof(int64_t), s);
    index_ = {};
    index_.n_index_head = 1;
    index_.n_qblk = hi.n_blocks();
    index_.range_ptr = reinterpret_cast<const int64_t*>(base + layout_.range_ptr);
    index_.ranges = reinterpret_cast<const int32_t*>(base + layout_.ranges);
    index_.col_ptr = reinterpret_cast<const int64_t*>(base + layout_.col_ptr);
    index_.cols = nullptr;
    index_.n_ranges = int64_t(hi.ranges.size());
    index_.n_cols = 0;
    n_q_ = st.n_q;
    q_pos0_ = st.q_pos0;
    n_kv_ = st.n_kv;
    have_ = true;
  }

  AShapeParams a_;
  AShapeLayout layout_;
  void* buf_ = nullptr;
  cuda::DeviceSparseIndex index_;
  bool have_ = false;  // index_ holds the chunk shape below
  int64_t n_q_ = 0, q_pos0_ = 0, n_kv_ = 0;
};

}  // namespace

AShapeLayout a_shape_layout(int64_t chunk) {
  AShapeLayout l;
  l.max_blocks = (chunk + cuda::kSparseQBlock - 1) / cuda::kSparseQBlock;
  const size_t B = size_t(l.max_blocks);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  l.range_ptr = take((B + 1) * sizeof(int64_t));
  l.ranges = take(2 * B * 2 * sizeof(int32_t));  // at most two ranges per block
  l.col_ptr = take((B + 1) * sizeof(int64_t));
  cuda::DeviceSparseIndex worst;
  worst.n_index_head = 1;
  worst.n_qblk = l.max_blocks;
  worst.n_ranges = 2 * l.max_blocks;
  worst.n_cols = 0;
  l.workspace_bytes = cuda::sparse_attention_workspace_bytes(worst);
  l.workspace = take(l.workspace_bytes);
  l.total = off;
  return l;
}

std::unique_ptr<GpuMethod> make_a_shape_gpu(const AShapeMethod& m, const MethodContext&) {
  return std::make_unique<AShapeGpu>(m.params());
}

}  // namespace longctx
