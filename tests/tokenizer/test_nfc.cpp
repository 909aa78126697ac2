// test_nfc.cpp: the NFC normalizer (utf8proc behind to_nfc) equals Python's
// unicodedata.normalize("NFC", ...) on the golden strings (random mixes of combining marks, Hangul
// jamo and composable letters included), and invalid bytes pass through.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "model_paths.h"
#include "tokenizer/unicode_nfc.h"

namespace longctx {
namespace {

// "14.0.0" -> {14, 0, 0}
std::vector<int> version_of(const std::string& v) {
  std::vector<int> out;
  std::stringstream ss(v);
  for (std::string part; std::getline(ss, part, '.');) out.push_back(std::stoi(part));
  return out;
}

TEST(Nfc, MatchesPythonUnicodedata) {
  const auto g = testing::load_json(testing::golden_path("nfc_golden.json"));
  // The golden's Unicode version (Python's unicodedata) may be older than utf8proc's: NFC is
  // stable across versions for assigned characters, so only an older library would be wrong.
  EXPECT_LE(version_of(g["unicode_version"].get<std::string>()), version_of(tok::nfc_unicode_version()));
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
