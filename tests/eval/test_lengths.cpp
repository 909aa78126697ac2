// test_lengths.cpp: --lengths / --depths / --attn parsing and its error messages.
#include <gtest/gtest.h>

#include "eval/lengths.h"
#include "util/error.h"
#include "../common/error_of.h"

using namespace longctx;
using namespace longctx::eval;

using longctx::test_common::error_of;

TEST(Lengths, ParsesSuffixesAndLists) {
  EXPECT_EQ(parse_length("2k"), 2048);
  EXPECT_EQ(parse_length("32K"), 32768);
  EXPECT_EQ(parse_length("1m"), 1048576);
  EXPECT_EQ(parse_length("3000"), 3000);
  EXPECT_EQ(parse_lengths("2k, 4k,8k"), (std::vector<int64_t>{2048, 4096, 8192}));
  EXPECT_EQ(format_length(8192), "8K");
  EXPECT_EQ(format_length(3000), "3000");
  EXPECT_EQ(format_length(1048576), "1M");
}

TEST(Lengths, BadLengthSaysWhatIsWrong) {
  const std::string m = error_of([] { parse_lengths("2k,2q"); });
  EXPECT_NE(m.find("\"2q\""), std::string::npos) << m;
  EXPECT_NE(m.find("k (x1024)"), std::string::npos) << m;
  EXPECT_NE(error_of([] { parse_length("0"); }).find("positive"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lengths("2k,,4k"); }).find("empty length"), std::string::npos);
  EXPECT_NE(error_of([] { parse_length("-5"); }), "");
}

TEST(Lengths, Depths) {
  EXPECT_EQ(parse_depths("0,0.5,1"), (std::vector<double>{0, 0.5, 1}));
  EXPECT_EQ(parse_depths("0%,25%,100%"), (std::vector<double>{0, 0.25, 1}));
  EXPECT_NE(error_of([] { parse_depths("1.5"); }).find("[0, 1]"), std::string::npos);
  EXPECT_NE(error_of([] { parse_depths("half"); }).find("\"half\""), std::string::npos);
}

TEST(Lengths, SplitMethodsKeepsMethodArguments) {
  EXPECT_EQ(split_methods({"dense,a_shape=64,1024,minference"}),
            (std::vector<std::string>{"dense", "a_shape=64,1024", "minference"}));
  EXPECT_EQ(split_methods({"dense", "a_shape"}), (std::vector<std::string>{"dense", "a_shape"}));
  EXPECT_EQ(split_methods({"tokenselect=k=64,n_local=128,dense,tokenselect,a_shape=1,2"}),
            (std::vector<std::string>{"tokenselect=k=64,n_local=128", "dense", "tokenselect", "a_shape=1,2"}));
  EXPECT_EQ(split_methods({"dense,hip=k=64,window=64,prefill:a_shape=16,64;decode:hip=refresh=4,sinks=8"}),
            (std::vector<std::string>{"dense", "hip=k=64,window=64", "prefill:a_shape=16,64;decode:hip=refresh=4,sinks=8"}));
  EXPECT_NE(error_of([] { split_methods({"dense,,a_shape"}); }).find("empty attention method"), std::string::npos);
}
