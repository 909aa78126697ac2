// kv_cache.h: the CPU KV cache of one sequence: per layer K and V, token-major, fp32.
//
//   k[l], v[l]: [capacity, n_kv_head, head_dim]; token t at row t (its absolute position).
// Capacity is reserved up front (prompt + max new tokens), so a run never reallocates and the
// memory need is known (and reported) before the first token.
#pragma once
#include <cstdint>
#include <vector>

namespace longctx {

class KvCache {
 public:
  void reset(int n_layer, int64_t capacity, int64_t row_floats) {
    n_layer_ = n_layer;
    row_ = row_floats;
    cap_ = capacity;
    len_ = 0;
    k_.assign(size_t(n_layer), {});
    v_.assign(size_t(n_layer), {});
    for (int l = 0; l < n_layer; ++l) {
      k_[size_t(l)].resize(size_t(capacity * row_floats));
      v_[size_t(l)].resize(size_t(capacity * row_floats));
    }
  }
  static int64_t bytes_needed(int n_layer, int64_t capacity, int64_t row_floats) {
    return 2 * int64_t(n_layer) * capacity * row_floats * int64_t(sizeof(float));
  }
  int64_t capacity() const { return cap_; }
  int64_t size() const { return len_; }
  void set_size(int64_t n) { len_ = n; }
  float* k(int l) { return k_[size_t(l)].data(); }
  float* v(int l) { return v_[size_t(l)].data(); }
  const float* k(int l) const { return k_[size_t(l)].data(); }
  const float* v(int l) const { return v_[size_t(l)].data(); }
  int64_t row_floats() const { return row_; }

 private:
  int n_layer_ = 0;
  int64_t row_ = 0, cap_ = 0, len_ = 0;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace longctx
