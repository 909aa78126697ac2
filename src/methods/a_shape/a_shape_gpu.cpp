// a_shape_gpu.cpp: A-shape's GPU builder: the CPU method's index (build_a_shape_index), exactly,
// uploaded into a fixed device buffer sized for a full chunk.
// The index depends only on the chunk's shape (n_q, q_pos0, n_kv), not on the layer or the data,
// so one upload serves every layer of a chunk: the builder keeps the shape it last uploaded.
// Decode: the sinks + window of each sequence, made on the device from the view's lengths
// (cuda::build_sink_window_index: graph-safe), in fixed buffers for shape.n_seq sequences; the
// same keys as the CPU method's decode index (build_a_shape_index with one query).
#include "methods/a_shape/a_shape_gpu.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/cuda/sparse_decode.h"
#include "methods/a_shape/a_shape_index.h"
#include "methods/gpu_carve.h"
#include "util/error.h"

namespace longctx {

namespace {

class AShapeGpu final : public GpuMethod {
 public:
  explicit AShapeGpu(AShapeParams a) : a_(a) {}
  ~AShapeGpu() override { release(); }

  size_t device_bytes(const GpuShape& shape) const override {
    return a_shape_layout(shape.chunk).total + decode_layout(shape).total;
  }
  void allocate(const GpuShape& shape, cuda::Stream s) override {
    release();
    layout_ = a_shape_layout(shape.chunk);
    dlayout_ = decode_layout(shape);
    buf_ = cuda::dev_malloc(layout_.total + dlayout_.total);
    cuda::sparse_decode_workspace_init(dbase() + dlayout_.workspace, dlayout_.workspace_bytes, s);
    n_seq_ = shape.n_seq;
  }
  void release() override {
    cuda::dev_free(buf_);
    buf_ = nullptr;
    have_ = false;
  }

  bool decodes() const override { return true; }
  GpuDecodeIndex build_decode(const GpuDecodeStep& st, cuda::Stream s) override {
    if (!buf_) fail("internal: A-shape decode with no index buffer");
    if (st.kv.n_seq > n_seq_) fail("internal: A-shape decode of {} sequences in buffers for {}", st.kv.n_seq, n_seq_);
    cuda::SinkWindowIndexParams ip = sink_window(st.kv.seq_lens, st.kv.n_seq);
    cuda::build_sink_window_index(ip, s);
    GpuDecodeIndex g;
    g.index = cuda::sink_window_index_view(ip);
    g.max_keys_per_row = max_keys();
    g.workspace = dbase() + dlayout_.workspace;
    g.workspace_bytes = dlayout_.workspace_bytes;
    return g;
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
  // Decode buffers for shape.n_seq sequences: the sinks + window index and the kernel's workspace.
  struct DecodeLayout {
    size_t range_ptr = 0, ranges = 0, col_ptr = 0, workspace = 0, workspace_bytes = 0, total = 0;
  };
  int64_t max_keys() const { return a_.sink + a_.window; }
  DecodeLayout decode_layout(const GpuShape& shape) const {
    const size_t n = size_t(shape.n_seq);
    DecodeLayout d;
    Carve c;
    d.range_ptr = c.take((n + 1) * sizeof(int32_t));
    d.ranges = c.take(2 * n * 2 * sizeof(int32_t));  // two ranges per sequence
    d.col_ptr = c.take((n + 1) * sizeof(int32_t));
    cuda::SparseDecodeBounds b;
    b.n_seq = shape.n_seq;
    b.n_head = shape.model.n_head;
    b.n_index_head = 1;
    b.head_dim = shape.model.head_dim;
    b.max_keys_per_row = std::min<int64_t>(max_keys(), std::max<int64_t>(shape.capacity, 1));
    b.range_capacity = 2 * int64_t(n);
    b.col_capacity = 0;
    d.workspace_bytes = cuda::sparse_decode_workspace_bytes(b);
    d.workspace = c.take(d.workspace_bytes);
    d.total = c.off;
    return d;
  }
  char* dbase() const { return static_cast<char*>(buf_) + layout_.total; }
  cuda::SinkWindowIndexParams sink_window(const int32_t* seq_lens, int n_seq) const {
    cuda::SinkWindowIndexParams ip;
    ip.seq_lens = seq_lens;
    ip.n_seq = n_seq;
    ip.sinks = int(a_.sink);
    ip.window = int(a_.window);
    ip.range_ptr = reinterpret_cast<int32_t*>(dbase() + dlayout_.range_ptr);
    ip.ranges = reinterpret_cast<int32_t*>(dbase() + dlayout_.ranges);
    ip.col_ptr = reinterpret_cast<int32_t*>(dbase() + dlayout_.col_ptr);
    return ip;
  }

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
  AShapeLayout layout_;    // prefill: at the start of buf_
  DecodeLayout dlayout_;   // decode: after it
  int n_seq_ = 0;
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
  Carve c;
  l.range_ptr = c.take((B + 1) * sizeof(int64_t));
  l.ranges = c.take(2 * B * 2 * sizeof(int32_t));  // at most two ranges per block
  l.col_ptr = c.take((B + 1) * sizeof(int64_t));
  cuda::DeviceSparseIndex worst;
  worst.n_index_head = 1;
  worst.n_qblk = l.max_blocks;
  worst.n_ranges = 2 * l.max_blocks;
  worst.n_cols = 0;
  l.workspace_bytes = cuda::sparse_attention_workspace_bytes(worst);
  l.workspace = c.take(l.workspace_bytes);
  l.total = c.off;
  return l;
}

std::unique_ptr<GpuMethod> make_a_shape_gpu(const AShapeMethod& m, const MethodContext&) {
  return std::make_unique<AShapeGpu>(m.params());
}

}  // namespace longctx
