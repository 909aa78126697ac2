// counting_scorer.h (tests/sparse): a CandidateScorer (methods/minference/pattern_search.h) that
// wraps the CPU scorer and counts what the pattern search gives it, so that a test can check
// which layers were scored and how often, while the errors stay the CPU scorer's, number for
// number. Used by tests/sparse/test_pattern_search.cpp and tests/model/test_search_gemma.cpp.
#pragma once
#include <vector>

#include "methods/minference/pattern_search.h"
#include "util/thread_pool.h"

namespace longctx::test {

class CountingScorer final : public CandidateScorer {
 public:
  explicit CountingScorer(ThreadPool& pool) : inner_(pool) {}
  const char* device() const override { return "counting"; }
  void begin_layer(const AttnParams& p) override {
    ++layers;
    heads = p.n_head;
    inner_.begin_layer(p);
  }
  std::vector<double> errors(const SparseIndex& idx) override {
    ++candidates;
    if (int(idx.heads.size()) != heads) ++head_mismatches;
    return inner_.errors(idx);
  }
  int layers = 0;           // begin_layer calls
  int candidates = 0;       // errors() calls
  int heads = 0;            // the current layer's query heads
  int head_mismatches = 0;  // errors() calls whose index has not one head per query head

 private:
  CpuScorer inner_;
};

}  // namespace longctx::test
