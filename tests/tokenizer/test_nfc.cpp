// test_nfc.cpp: the NFC normalizer equals Python's unicodedata.normalize("NFC", ...) on the golden
// strings and on random mixes of combining marks, Hangul jamo and composable letters.
#include <gtest/gtest.h>

#include "model_paths.h"
#include "tokenizer/unicode_nfc.h"

namespace longctx {
namespace {

TEST(Nfc, MatchesPythonUnicodedata) {
  const auto g = testing::load_json(testing::golden_path("nfc_golden.json"));
  EXPECT_EQ(g["unicode_version"].get<std::string>(), tok::nfc_unicode_version());
  int n = 0;
  for (const auto& c : g["cases"]) {
    EXPECT_EQ(tok::to_nfc(c["text"].get<std::string>()), c["nfc"].get<std::string>()) << c["text"];
    ++n;
  }
  EXPECT_GT(n, 300);
}

TEST(Nfc, Basics) {
  EXPECT_EQ(tok::to_nfc("e\xCC\x81"), "\xC3\xA9");                       // e + U+0301 -> é
  EXPECT_EQ(tok::to_nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");      // jamo G + A -> 가
  EXPECT_EQ(tok::to_nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(tok::to_nfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");               // invalid byte blocks
  EXPECT_EQ(tok::to_nfc(""), "");
}

}  // namespace
}  // namespace longctx
