// test_fuzz_smoke.cpp: 20000 random mutations (bit flips, interesting values, truncations,
// splices, deletions) of a small valid GGUF and safetensors image through the parsers, in the
// normal build. Every input must either parse (and then satisfy the parser's invariants) or
// throw longctx::Error. The deep search runs under sanitizers in fuzz/run_fuzz.sh.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "fuzz_common.h"
#include "fuzz_seeds.h"

namespace longctx {
namespace {

// Mutations per format; 2 x 10000 = 20000 in all.
constexpr int kIterations = 10000;

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : s_(seed) {}

  uint64_t next() {  // xorshift64*
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }
  size_t below(size_t n) { return n ? size_t(next() % n) : 0; }

  std::vector<uint8_t> mutate(std::vector<uint8_t> b, const std::vector<uint8_t>& donor) {
    const int ops = 1 + int(below(3));
    for (int k = 0; k < ops; ++k) {
      switch (below(7)) {
        case 0:  // flip a few bits
          for (int i = 0, n = 1 + int(below(4)); i < n && !b.empty(); ++i) b[below(b.size())] ^= uint8_t(1u << below(8));
          break;
        case 1: {  // an interesting byte
          static constexpr uint8_t kBytes[] = {0x00, 0xff, 0x7f, 0x80, 0x01, '{', '"', '[', ']'};
          if (!b.empty()) b[below(b.size())] = kBytes[below(sizeof kBytes)];
          break;
        }
        case 2: {  // an interesting 32/64-bit integer (counts, lengths, offsets, types)
          const uint64_t vals[] = {0, 1, 2, 4, 32, 0x7fffffffu, 0xffffffffu, 1ull << 32, 1ull << 63, ~0ull,
                                   uint64_t(b.size()), next()};
          const uint64_t v = vals[below(std::size(vals))];
          const size_t w = below(2) ? 8 : 4;
          if (b.size() >= w) std::memcpy(b.data() + below(b.size() - w + 1), &v, w);
          break;
        }
        case 3:  // truncate
          b.resize(below(b.size() + 1));
          break;
        case 4: {  // splice a chunk of the donor (or of b itself) over b
          const auto& src = below(2) ? donor : b;
          if (src.empty() || b.empty()) break;
          const size_t len = 1 + below(std::min<size_t>(64, src.size()));
          const size_t from = below(src.size() - len + 1);
          const std::vector<uint8_t> chunk(src.begin() + long(from), src.begin() + long(from + len));
          const size_t to = below(b.size());
          if (below(2)) b.insert(b.begin() + long(to), chunk.begin(), chunk.end());
          else std::copy_n(chunk.begin(), std::min(chunk.size(), b.size() - to), b.begin() + long(to));
          break;
        }
        case 5: {  // delete a chunk
          if (b.empty()) break;
          const size_t at = below(b.size()), len = 1 + below(std::min<size_t>(32, b.size() - at));
          b.erase(b.begin() + long(at), b.begin() + long(at + len));
          break;
        }
        default: {  // random bytes
          for (int i = 0, n = 1 + int(below(8)); i < n && !b.empty(); ++i) b[below(b.size())] = uint8_t(next());
          break;
        }
      }
    }
    return b;
  }

 private:
  uint64_t s_;
};

void run_smoke(fuzz::Format format, const std::vector<uint8_t>& seed, const std::vector<uint8_t>& donor, uint64_t rng_seed) {
  ASSERT_TRUE(fuzz::parse_and_exercise(format, seed)) << "the seed itself must parse";
  Mutator m(rng_seed);
  int parsed = 0, rejected = 0;
  for (int i = 0; i < kIterations; ++i) {
    const auto input = m.mutate(seed, donor);
    try {
      (fuzz::parse_and_exercise(format, input) ? parsed : rejected)++;
    } catch (const std::exception& e) {
      FAIL() << "iteration " << i << ": non-Error exception " << typeid(e).name() << ": " << e.what();
    }
  }
  // Both outcomes must occur, or the mutations are not reaching the interesting code.
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, kIterations / 10);
  std::printf("%d mutations: %d parsed, %d rejected with longctx::Error\n", kIterations, parsed, rejected);
}

TEST(FuzzSmoke, GgufMutations) { run_smoke(fuzz::Format::kGguf, fuzz::seed_gguf(), fuzz::seed_safetensors(), 0x9e3779b97f4a7c15ull); }

TEST(FuzzSmoke, SafetensorsMutations) {
  run_smoke(fuzz::Format::kSafetensors, fuzz::seed_safetensors(), fuzz::seed_gguf(), 0xd1b54a32d192ed03ull);
}

}  // namespace
}  // namespace longctx
