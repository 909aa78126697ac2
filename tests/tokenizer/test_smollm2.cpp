// test_smollm2.cpp: the SmolLM2 tokenizer from the real GGUF against HF golden ids.
#include <gtest/gtest.h>

#include "model_paths.h"

namespace longctx {
namespace {

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = testing::load_smollm2(&why_not_).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << why_not_;
  }
  static inline Tokenizer* tok_ = nullptr;
  static inline std::string why_not_;
};

TEST_F(SmolLM2, Basics) {
  EXPECT_EQ(tok_->kind(), "bpe:smollm");
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_FALSE(tok_->adds_bos());
  EXPECT_TRUE(tok_->is_end_of_generation(2));
  EXPECT_TRUE(tok_->is_end_of_generation(0));
  EXPECT_EQ(tok_->encode("Hello world 12345678", false, false),
            (std::vector<int32_t>{19556, 905, 216, 33, 34, 35, 36, 37, 38, 39, 40}));
  EXPECT_EQ(tok_->encode("<|im_start|>hi", false, true), (std::vector<int32_t>{1, 6004}));
}

}  // namespace
}  // namespace longctx
