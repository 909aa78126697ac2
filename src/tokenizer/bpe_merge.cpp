// bpe_merge.cpp: see bpe_merge.h.
#include "tokenizer/bpe_merge.h"

#include <queue>

namespace longctx::tok {

void BpeMergeTable::add(int32_t left, int32_t right, int32_t merged, int32_t rank) {
  table_.try_emplace(key(left, right), Merge{rank, merged});
}

namespace {
struct Candidate {
  int32_t rank;
  int32_t pos;     // index of the left symbol
  int32_t left;    // ids at push time, to detect stale entries
  int32_t right;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};
}  // namespace

void BpeMergeTable::apply(std::vector<int32_t>& ids) const {
  const int32_t n = int32_t(ids.size());
  if (n < 2) return;
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const Merge* m = find(ids[i], ids[next[i]])) heap.push({m->rank, i, ids[i], ids[next[i]]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);

  constexpr int32_t kDead = -2;
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t i = c.pos;
    if (ids[i] == kDead || ids[i] != c.left) continue;
    const int32_t j = next[i];
    if (j < 0 || ids[j] != c.right) continue;
    const Merge* m = find(c.left, c.right);
    ids[i] = m->merged;
    ids[j] = kDead;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  int32_t w = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (ids[i] != kDead) ids[w++] = ids[i];
  }
  ids.resize(w);
}

}  // namespace longctx::tok
