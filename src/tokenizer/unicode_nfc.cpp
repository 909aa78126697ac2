// unicode_nfc.cpp: see unicode_nfc.h.
#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tokenizer/utf8.h"

namespace longctx::tok {

namespace {

struct NfcDecomp {
  uint32_t cp, first, second;
  uint8_t composes;
};
struct NfcCccRange {
  uint32_t first, last;
  uint8_t ccc;
};
#include "tokenizer/nfc_tables.inc"

// Code points below this have combining class 0 and never combine with what precedes them.
constexpr uint32_t kFirstNonTrivial = 0x300;
// The lowest code point with a canonical decomposition (U+00C0 À).
constexpr uint32_t kFirstDecomposable = 0xC0;
// Hangul syllable algorithm constants (Unicode ch. 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;
// Marks an invalid UTF-8 byte in the code point sequence (value = kRawByte | byte).
constexpr uint32_t kRawByte = 0x80000000u;

uint8_t ccc_of(uint32_t cp) {
  if (cp < kFirstNonTrivial || (cp & kRawByte)) return 0;
  const auto* end = std::end(kNfcCcc);
  const auto* it = std::upper_bound(std::begin(kNfcCcc), end, cp,
                                    [](uint32_t v, const NfcCccRange& r) { return v < r.first; });
  if (it == std::begin(kNfcCcc)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const NfcDecomp* find_decomp(uint32_t cp) {
  const auto* end = std::end(kNfcDecomp);
  const auto* it = std::lower_bound(std::begin(kNfcDecomp), end, cp,
                                    [](const NfcDecomp& d, uint32_t v) { return d.cp < v; });
  return it != end && it->cp == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const NfcDecomp* d = cp >= kFirstDecomposable && !(cp & kRawByte) ? find_decomp(cp) : nullptr) {
    decompose(d->first, out);
    if (d->second) decompose(d->second, out);
    return;
  }
  out.push_back(cp);
}

// (first, second) -> composite, for primary composites.
const std::unordered_map<uint64_t, uint32_t>& composition_map() {
  static const std::unordered_map<uint64_t, uint32_t> map = [] {
    std::unordered_map<uint64_t, uint32_t> m;
    for (const auto& d : kNfcDecomp) {
      if (d.composes) m.emplace((uint64_t(d.first) << 32) | d.second, d.cp);
    }
    return m;
  }();
  return map;
}

// The composite of a + b, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if ((a & kRawByte) || (b & kRawByte)) return 0;
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto& m = composition_map();
  auto it = m.find((uint64_t(a) << 32) | b);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

const char* nfc_unicode_version() { return kNfcUnicodeVersion; }

std::string to_nfc(std::string_view text) {
  // Fast path: nothing at or above U+0300 (bytes < 0xCC cover U+0000..U+02FF).
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; })) {
    return std::string(text);
  }
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t n;
    const uint32_t cp = utf8_decode(text, pos, n);
    if (cp == kInvalidCodepoint) {
      cps.push_back(kRawByte | static_cast<unsigned char>(text[pos]));
    } else {
      decompose(cp, cps);
    }
    pos += n;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + std::ptrdiff_t(i), cps.begin() + std::ptrdiff_t(j),
                     [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  int64_t starter = -1;     // index in out of the last starter
  bool between = false;     // a character sits between that starter and the current one
  uint8_t last_ccc = 0;     // combining class of the last such character
  for (uint32_t c : cps) {
    const uint8_t cc = ccc_of(c);
    const bool blocked = between && (last_ccc == 0 || last_ccc >= cc);
    if (starter >= 0 && !blocked) {
      if (uint32_t comp = compose(out[size_t(starter)], c)) {
        out[size_t(starter)] = comp;
        continue;
      }
    }
    if (cc == 0) {
      starter = int64_t(out.size());
      between = false;
      last_ccc = 0;
    } else {
      between = true;
      last_ccc = cc;
    }
    out.push_back(c);
  }
  std::string result;
  result.reserve(text.size());
  for (uint32_t c : out) {
    if (c & kRawByte) {
      result += char(c & 0xFF);
    } else {
      utf8_append(result, c);
    }
  }
  return result;
}

}  // namespace longctx::tok
