// bpe_merge.h: the rank-ordered BPE merge loop over token ids (O(n log n) per word).
//
// A word starts as a sequence of token ids (one per byte for byte-level BPE); the pair with the
// lowest merge rank is merged repeatedly (leftmost first among equal ranks) until no listed pair
// is left, exactly like HF `tokenizers` BPE::merge_word and llama.cpp. A binary heap plus a
// doubly-linked list of symbols keeps long words (e.g. 100K spaces) from going quadratic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace longctx::tok {

class BpeMergeTable {
 public:
  // Registers merge (left, right) -> merged with priority rank (lower merges first). A pair
  // already present keeps its first (lowest) rank.
  void add(int32_t left, int32_t right, int32_t merged, int32_t rank);
  size_t size() const { return table_.size(); }

  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  const Merge* find(int32_t left, int32_t right) const {
    auto it = table_.find(key(left, right));
    return it == table_.end() ? nullptr : &it->second;
  }

  // Merges `ids` in place.
  void apply(std::vector<int32_t>& ids) const;

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  std::unordered_map<uint64_t, Merge> table_;
};

}  // namespace longctx::tok
