// pretokenizer.cpp: see pretokenizer.h.
#include "tokenizer/pretokenizer.h"

#include <algorithm>

#include "util/error.h"

namespace longctx::tok {

namespace {
constexpr const char* kDigitPattern = R"(\p{N})";
constexpr const char* kDigitRunPattern = R"(\p{N}+)";

// Escapes a literal string for use in a PCRE2 pattern (\Q...\E cannot hold "\E").
std::string regex_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  fail("unsupported Split behavior \"{}\" in tokenizer.json (supported: Removed, Isolated, "
       "MergedWithPrevious, MergedWithNext, Contiguous)", name);
}
}  // namespace

struct Pretokenizer::Step {
  enum class Kind { Split, PrefixSpace } kind = Kind::Split;
  std::unique_ptr<RegexSplitter> regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;

  // Appends the pieces of `piece` after this step to out.
  void apply(std::string_view piece, std::vector<std::string>& out) const {
    if (kind == Kind::PrefixSpace) {
      if (!piece.empty() && piece.front() == ' ') {
        out.emplace_back(piece);
      } else {
        std::string spaced;
        spaced.reserve(piece.size() + 1);
        spaced += ' ';
        spaced += piece;
        out.push_back(std::move(spaced));
      }
      return;
    }
    std::vector<std::pair<size_t, size_t>> matches;
    regex->find_matches(piece, matches);
    // Segments covering the whole piece: (begin, end, is_match).
    struct Seg { size_t b, e; bool m; };
    std::vector<Seg> segs;
    size_t pos = 0;
    for (auto [b, e] : matches) {
      if (b > pos) segs.push_back({pos, b, invert});
      segs.push_back({b, e, !invert});
      pos = e;
    }
    if (pos < piece.size()) segs.push_back({pos, piece.size(), invert});

    auto emit = [&](size_t b, size_t e) {
      if (e > b) out.emplace_back(piece.substr(b, e - b));
    };
    switch (behavior) {
      case SplitBehavior::Isolated:
        for (auto& s : segs) emit(s.b, s.e);
        break;
      case SplitBehavior::Removed:
        for (auto& s : segs) if (!s.m) emit(s.b, s.e);
        break;
      case SplitBehavior::MergedWithPrevious: {
        // A match is glued to the end of the piece before it.
        size_t start = 0;
        for (size_t i = 0; i < segs.size(); ++i) {
          if (segs[i].m) {
            emit(start, segs[i].e);
            start = segs[i].e;
          }
        }
        emit(start, piece.size());
        break;
      }
      case SplitBehavior::MergedWithNext: {
        // A match starts a new piece that runs until the next match.
        size_t start = 0;
        for (auto& s : segs) {
          if (s.m) {
            emit(start, s.b);
            start = s.b;
          }
        }
        emit(start, piece.size());
        break;
      }
      case SplitBehavior::Contiguous: {
        // Runs of adjacent matches become one piece.
        size_t i = 0;
        while (i < segs.size()) {
          size_t j = i + 1;
          if (segs[i].m) while (j < segs.size() && segs[j].m) ++j;
          emit(segs[i].b, segs[j - 1].e);
          i = j;
        }
        break;
      }
    }
  }
};

Pretokenizer::Pretokenizer() = default;
Pretokenizer::~Pretokenizer() = default;

void Pretokenizer::add_split(const std::string& regex, SplitBehavior behavior, bool invert) {
  auto s = std::make_unique<Step>();
  s->regex = std::make_unique<RegexSplitter>(regex);
  s->behavior = behavior;
  s->invert = invert;
  steps_.push_back(std::move(s));
}

void Pretokenizer::add_digits(bool individual) {
  add_split(individual ? kDigitPattern : kDigitRunPattern, SplitBehavior::Isolated, false);
}

void Pretokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  if (add_prefix_space) {
    auto s = std::make_unique<Step>();
    s->kind = Step::Kind::PrefixSpace;
    steps_.push_back(std::move(s));
  }
  if (use_regex) add_split(kGpt2Pattern, SplitBehavior::Isolated, false);
}

std::vector<std::string> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  pieces.emplace_back(text);
  std::vector<std::string> next;
  for (const auto& step : steps_) {
    next.clear();
    for (const auto& p : pieces) step->apply(p, next);
    pieces.swap(next);
  }
  return pieces;
}

std::vector<std::string> Pretokenizer::patterns() const {
  std::vector<std::string> out;
  for (const auto& s : steps_) {
    if (s->regex) out.push_back(s->regex->pattern());
  }
  return out;
}

std::unique_ptr<Pretokenizer> Pretokenizer::preset(std::string_view name) {
  auto p = std::make_unique<Pretokenizer>();
  if (name == "gpt2") {
    p->add_split(kGpt2Pattern, SplitBehavior::Isolated, false);
  } else if (name == "llama3") {
    p->add_split(kLlama3Pattern, SplitBehavior::Isolated, false);
  } else if (name == "qwen2") {
    p->add_split(kQwen2Pattern, SplitBehavior::Isolated, false);
  } else if (name == "smollm") {
    p->add_digits(true);
    p->add_split(kGpt2Pattern, SplitBehavior::Isolated, false);
  } else {
    fail("unknown pre-tokenizer preset \"{}\" (supported: gpt2, llama3, qwen2, smollm)", name);
  }
  return p;
}

namespace {
void add_hf_step(Pretokenizer& p, const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("type")) fail("tokenizer.json pre_tokenizer entry has no \"type\"");
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& sub : j.at("pretokenizers")) add_hf_step(p, sub);
  } else if (type == "Split") {
    const auto& pat = j.at("pattern");
    std::string regex;
    if (pat.contains("Regex")) {
      regex = pat.at("Regex").get<std::string>();
    } else if (pat.contains("String")) {
      regex = regex_escape(pat.at("String").get<std::string>());
    } else {
      fail("tokenizer.json Split pattern is neither Regex nor String: {}", pat.dump());
    }
    p.add_split(regex, parse_behavior(j.value("behavior", std::string("Isolated"))),
                j.value("invert", false));
  } else if (type == "Digits") {
    p.add_digits(j.value("individual_digits", false));
  } else if (type == "ByteLevel") {
    p.add_byte_level(j.value("add_prefix_space", false), j.value("use_regex", true));
  } else {
    fail("unsupported pre_tokenizer type \"{}\" in tokenizer.json (supported: Sequence, Split, "
         "Digits, ByteLevel)", type);
  }
}
}  // namespace

std::unique_ptr<Pretokenizer> Pretokenizer::from_hf_json(const nlohmann::json& pre) {
  auto p = std::make_unique<Pretokenizer>();
  if (!pre.is_null()) add_hf_step(*p, pre);
  return p;
}

}  // namespace longctx::tok
