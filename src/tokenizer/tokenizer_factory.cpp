// tokenizer_factory.cpp: builds the right Tokenizer from GGUF metadata or HF tokenizer.json.
//
// GGUF: tokenizer.ggml.model selects the kind ("gpt2" byte-level BPE, "llama" SentencePiece),
// tokenizer.ggml.pre the pre-tokenizer preset. HF: tokenizer.json must be a BPE model with a
// ByteLevel pre-tokenizer/decoder (its pre_tokenizer pipeline is rebuilt step by step), or a
// SentencePiece-style BPE (Llama-2 / Mistral HF dirs: "▁" normalizer or Metaspace, byte_fallback).
//
// A tokenizer.json "NFC" normalizer (Qwen2) is applied; GGUF files carry no normalizer, so none
// is applied there (as llama.cpp).
#include <algorithm>
#include <array>
#include <string_view>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_spm_tokenizer.h"
#include "tokenizer/spm_pieces.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace longctx {

using nlohmann::json;
using tok::AddedToken;
using tok::TokenType;
using tok::Vocab;

namespace {

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";
constexpr std::string_view kKeyTemplate = "tokenizer.chat_template";
constexpr std::string_view kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kKeySpacePrefix = "tokenizer.ggml.add_space_prefix";

// GGUF tokenizer.ggml.pre value -> (preset, ignore_merges).
struct PreMapping {
  std::string_view gguf_name;
  std::string_view preset;
  bool ignore_merges;
};
constexpr std::array<PreMapping, 9> kPreMappings = {{
    {"default", "gpt2", false},
    {"gpt2", "gpt2", false},
    {"gpt-2", "gpt2", false},
    {"llama3", "llama3", true},
    {"llama-v3", "llama3", true},
    {"llama-bpe", "llama3", true},
    {"qwen2", "qwen2", false},
    {"smollm", "smollm", false},
    {"smaug-bpe", "llama3", false},
}};

std::string supported_pre_list() {
  std::string s;
  for (const auto& m : kPreMappings) s += (s.empty() ? "" : ", ") + std::string(m.gguf_name);
  return s;
}

const json* find_key(const json& meta, std::string_view key) {
  auto it = meta.find(std::string(key));
  return it == meta.end() || it->is_null() ? nullptr : &*it;
}

int32_t get_id(const json& meta, std::string_view suffix) {
  const json* v = find_key(meta, std::string("tokenizer.ggml.") + std::string(suffix));
  if (!v) return -1;
  if (!v->is_number_integer()) fail("GGUF key tokenizer.ggml.{} is not an integer", suffix);
  const int64_t id = v->get<int64_t>();
  return id < 0 || id > INT32_MAX ? -2 : int32_t(id);  // -2: caught by the vocab range check
}

bool get_bool(const json& meta, std::string_view key, bool dflt) {
  const json* v = find_key(meta, key);
  return v && v->is_boolean() ? v->get<bool>() : dflt;
}

// The vocabulary part common to both GGUF kinds.
Vocab gguf_vocab(const json& meta) {
  Vocab v;
  const json* tokens = find_key(meta, kKeyTokens);
  if (!tokens || !tokens->is_array()) fail("GGUF metadata has no {} array", kKeyTokens);
  if (tokens->empty()) fail("tokenizer vocabulary is empty ({} has no entries)", kKeyTokens);
  v.tokens.reserve(tokens->size());
  for (const auto& t : *tokens) {
    if (!t.is_string()) fail("{} holds a non-string entry", kKeyTokens);
    v.tokens.push_back(t.get<std::string>());
  }
  if (const json* types = find_key(meta, kKeyTypes)) {
    if (!types->is_array() || types->size() != v.tokens.size()) {
      fail("{} has {} entries for {} tokens", kKeyTypes, types->size(), v.tokens.size());
    }
    v.types.reserve(types->size());
    for (const auto& t : *types) v.types.push_back(TokenType(t.get<int32_t>()));
  } else {
    v.types.assign(v.tokens.size(), TokenType::Normal);
  }
  if (const json* scores = find_key(meta, kKeyScores)) {
    for (const auto& s : *scores) v.scores.push_back(s.get<float>());
  }
  v.bos = get_id(meta, "bos_token_id");
  v.eos = get_id(meta, "eos_token_id");
  v.eot = get_id(meta, "eot_token_id");
  v.eom = get_id(meta, "eom_token_id");
  v.unk = get_id(meta, "unknown_token_id");
  v.pad = get_id(meta, "padding_token_id");
  v.add_eos = get_bool(meta, kKeyAddEos, false);
  if (const json* t = find_key(meta, kKeyTemplate); t && t->is_string()) v.chat_template = t->get<std::string>();
  return v;
}

// Control and user-defined tokens are matched in the text before the normal tokenizer runs.
std::vector<AddedToken> gguf_added_tokens(const Vocab& v) {
  std::vector<AddedToken> added;
  for (int32_t id = 0; id < v.size(); ++id) {
    const TokenType t = v.types[id];
    if (t == TokenType::Control || t == TokenType::UserDefined) {
      added.push_back({v.tokens[id], id, t == TokenType::Control, false, false});
    }
  }
  return added;
}

std::vector<std::pair<std::string, std::string>> parse_merge_strings(const json& merges, std::string_view where) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const auto& m : merges) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) fail("bad merge \"{}\" in {} (expected \"left right\")", s, where);
      out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("bad merge entry {} in {}", m.dump(), where);
    }
  }
  return out;
}

// Text of an HF special-token entry: "<s>" or {"content": "<s>", ...}.
std::string hf_token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content")) return j.at("content").get<std::string>();
  return {};
}

// The name of an HF pre-tokenizer pipeline, by the regexes it uses.
std::string hf_kind(const tok::Pretokenizer& pre) {
  const auto pats = pre.patterns();
  using P = std::vector<std::string>;
  if (pats == P{tok::kGpt2Pattern}) return "bpe:gpt2";
  if (pats == P{tok::kLlama3Pattern}) return "bpe:llama3";
  if (pats == P{tok::kQwen2Pattern}) return "bpe:qwen2";
  if (pats == P{R"(\p{N})", tok::kGpt2Pattern}) return "bpe:smollm";
  return "bpe:custom";
}

bool json_mentions_type(const json& j, std::string_view type) {
  if (j.is_object()) {
    if (auto it = j.find("type"); it != j.end() && it->is_string() && it->get<std::string>() == type) return true;
    for (const auto& [k, v] : j.items()) {
      if (json_mentions_type(v, type)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& v : j) {
      if (json_mentions_type(v, type)) return true;
    }
  }
  return false;
}

// Whether a post_processor's single-sequence template starts with a special token.
bool hf_post_processor_adds_bos(const json& pp, const std::string& bos_text) {
  if (!pp.is_object() || bos_text.empty()) return false;
  const std::string type = pp.value("type", std::string());
  if (type == "Sequence") {
    for (const auto& sub : pp.value("processors", json::array())) {
      if (hf_post_processor_adds_bos(sub, bos_text)) return true;
    }
    return false;
  }
  if (type != "TemplateProcessing") return false;
  const json single = pp.value("single", json::array());
  return !single.empty() && single[0].contains("SpecialToken") &&
         single[0]["SpecialToken"].value("id", std::string()) == bos_text;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf_metadata(const json& meta) {
  const json* model = find_key(meta, kKeyModel);
  if (!model || !model->is_string()) fail("GGUF metadata has no {} (no tokenizer in this file)", kKeyModel);
  const std::string kind = model->get<std::string>();
  if (kind != "gpt2" && kind != "llama") {
    fail("unknown tokenizer model \"{}\" (supported: gpt2 = byte-level BPE, llama = SentencePiece BPE)", kind);
  }
  Vocab v = gguf_vocab(meta);
  auto added = gguf_added_tokens(v);
  if (v.chat_template.empty() && meta.value("general.architecture", std::string()) == "gemma3")
    v.chat_template = tok::kGemma3ChatTemplate;

  if (kind == "llama") {
    v.add_bos = get_bool(meta, kKeyAddBos, true);
    const bool space_prefix = get_bool(meta, kKeySpacePrefix, true);
    return std::make_unique<tok::SpmTokenizer>(std::move(v), std::move(added), space_prefix);
  }

  v.add_bos = get_bool(meta, kKeyAddBos, false);
  const json* merges = find_key(meta, kKeyMerges);
  if (!merges || !merges->is_array()) fail("GGUF byte-level BPE tokenizer is missing merges ({})", kKeyMerges);
  std::string pre_name = "default";
  if (const json* pre = find_key(meta, kKeyPre); pre && pre->is_string()) pre_name = pre->get<std::string>();
  auto it = std::find_if(kPreMappings.begin(), kPreMappings.end(),
                         [&](const PreMapping& m) { return m.gguf_name == pre_name; });
  if (it == kPreMappings.end()) {
    fail("unsupported pre-tokenizer \"{}\" ({}; supported: {})", pre_name, kKeyPre, supported_pre_list());
  }
  tok::BpeOptions opts{"bpe:" + std::string(it->preset), it->ignore_merges};
  return std::make_unique<tok::BpeTokenizer>(std::move(v), std::move(added),
                                             parse_merge_strings(*merges, std::string(kKeyMerges)),
                                             tok::Pretokenizer::preset(it->preset), std::move(opts));
}

namespace {

// The parts of tokenizer.json + tokenizer_config.json that every BPE flavour shares.
struct HfVocab {
  Vocab vocab;
  std::vector<AddedToken> added;
  std::vector<std::pair<std::string, std::string>> merges;
};

HfVocab parse_hf_vocab(const json& tj, const json& model, const json& config) {
  const json& vocab_json = model.at("vocab");
  if (!vocab_json.is_object() || vocab_json.empty()) fail("tokenizer vocabulary is empty (tokenizer.json model.vocab)");
  int64_t max_id = -1;
  for (const auto& [text, id] : vocab_json.items()) max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  const json added_json = tj.value("added_tokens", json::array());
  for (const auto& a : added_json) max_id = std::max<int64_t>(max_id, a.at("id").get<int64_t>());

  HfVocab h;
  Vocab& v = h.vocab;
  v.tokens.assign(size_t(max_id + 1), std::string());
  v.types.assign(size_t(max_id + 1), TokenType::Unused);
  for (const auto& [text, id] : vocab_json.items()) {
    const int64_t i = id.get<int64_t>();
    if (i < 0) fail("bad token id {} for \"{}\" in tokenizer.json", i, text);
    v.tokens[size_t(i)] = text;
    v.types[size_t(i)] = TokenType::Normal;
  }
  for (const auto& a : added_json) {
    AddedToken t;
    t.text = a.at("content").get<std::string>();
    t.id = a.at("id").get<int32_t>();
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    if (t.id < 0) fail("bad added token id {} for \"{}\" in tokenizer.json", t.id, t.text);
    v.tokens[size_t(t.id)] = t.text;
    v.types[size_t(t.id)] = t.special ? TokenType::Control : TokenType::UserDefined;
    h.added.push_back(std::move(t));
  }

  const json cfg = config.is_object() ? config : json::object();
  auto id_of = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (const auto& a : h.added) {
      if (a.text == text) return a.id;
    }
    auto it = vocab_json.find(text);
    return it == vocab_json.end() ? -1 : it->get<int32_t>();
  };
  const std::string bos_text = cfg.contains("bos_token") ? hf_token_text(cfg["bos_token"]) : "";
  const std::string eos_text = cfg.contains("eos_token") ? hf_token_text(cfg["eos_token"]) : "";
  v.bos = id_of(bos_text);
  v.eos = id_of(eos_text);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    v.unk = id_of(model["unk_token"].get<std::string>());
    if (v.unk >= 0) v.types[size_t(v.unk)] = TokenType::Unknown;
  }
  if (cfg.contains("pad_token")) v.pad = id_of(hf_token_text(cfg["pad_token"]));
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
    v.add_bos = cfg["add_bos_token"].get<bool>();
  } else {
    v.add_bos = hf_post_processor_adds_bos(tj.value("post_processor", json()), bos_text);
  }
  v.add_eos = cfg.value("add_eos_token", false);
  if (cfg.contains("chat_template")) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      v.chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const auto& e : ct) {
        if (e.value("name", std::string()) == "default") v.chat_template = e.value("template", std::string());
      }
    }
  }
  h.merges = parse_merge_strings(model.value("merges", json::array()), "tokenizer.json");
  return h;
}

// SentencePiece-style tokenizer.json: how the "▁" form of the text is made, from the normalizer
// (Llama-2: Sequence[Prepend("▁"), Replace(" ", "▁")]) or a Metaspace pre-tokenizer.
tok::HfSpmOptions hf_spm_options(const json& tj, const json& model) {
  using Prefix = tok::HfSpmOptions::Prefix;
  tok::HfSpmOptions o;
  o.prefix = Prefix::None;
  o.byte_fallback = model.value("byte_fallback", false);
  o.fuse_unk = model.value("fuse_unk", false);
  const json norm = tj.value("normalizer", json());
  if (!norm.is_null()) {
    const json steps = norm.value("type", std::string()) == "Sequence" ? norm.value("normalizers", json::array())
                                                                       : json::array({norm});
    for (const auto& st : steps) {
      const std::string type = st.value("type", std::string());
      if (type == "Prepend" && st.value("prepend", std::string()) == tok::kSpaceMark) {
        o.prefix = Prefix::Prepend;
      } else if (type == "Replace" && st.value("content", std::string()) == tok::kSpaceMark) {
        // " " -> "▁", which encode always does.
      } else {
        fail("unsupported normalizer step \"{}\" in a SentencePiece-style tokenizer.json", st.dump());
      }
    }
  }
  const json pre = tj.value("pre_tokenizer", json());
  if (!pre.is_null()) {
    if (pre.value("type", std::string()) != "Metaspace") {
      fail("unsupported pre_tokenizer \"{}\" in a SentencePiece-style tokenizer.json (supported: Metaspace)",
           pre.value("type", std::string("?")));
    }
    std::string scheme = pre.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = pre.value("add_prefix_space", true) ? "always" : "never";
    o.prefix = scheme == "always" ? Prefix::MetaspaceAlways : scheme == "first" ? Prefix::MetaspaceFirst : Prefix::None;
    o.split_words = pre.value("split", true);
  }
  o.strip_leading_space = false;
  const json dec = tj.value("decoder", json());
  const json dsteps = dec.value("type", std::string()) == "Sequence" ? dec.value("decoders", json::array())
                                                                     : json::array({dec});
  for (const auto& d : dsteps) {
    if (d.is_object() && d.value("type", std::string()) == "Strip" && d.value("start", 0) > 0) o.strip_leading_space = true;
    if (d.is_object() && d.value("type", std::string()) == "Metaspace") o.strip_leading_space = true;
  }
  return o;
}

bool is_spm_style(const json& tj) {
  const json norm = tj.value("normalizer", json());
  const json pre = tj.value("pre_tokenizer", json());
  return json_mentions_type(pre, "Metaspace") || norm.dump().find(tok::kSpaceMark) != std::string::npos;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const json& tj, const json& config) {
  if (!tj.is_object() || !tj.contains("model")) fail("tokenizer.json has no \"model\"");
  const json& model = tj.at("model");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") fail("unsupported tokenizer.json model type \"{}\" (supported: BPE)", type);
  const json pre_json = tj.value("pre_tokenizer", json());
  const bool byte_level =
      json_mentions_type(pre_json, "ByteLevel") || json_mentions_type(tj.value("decoder", json()), "ByteLevel");
  if (!byte_level) {
    if (!is_spm_style(tj)) {
      fail("tokenizer.json is neither byte-level BPE (ByteLevel pre-tokenizer/decoder) nor "
           "SentencePiece-style BPE (\"\u2581\" normalizer or Metaspace pre-tokenizer)");
    }
    const tok::HfSpmOptions opts = hf_spm_options(tj, model);
    HfVocab h = parse_hf_vocab(tj, model, config);
    return std::make_unique<tok::HfSpmTokenizer>(std::move(h.vocab), std::move(h.added), h.merges, opts);
  }
  const json normalizer = tj.value("normalizer", json());
  if (!normalizer.is_null() && normalizer.value("type", std::string()) != "NFC") {
    fail("unsupported tokenizer.json normalizer \"{}\" (supported: none, NFC)",
         normalizer.value("type", std::string("?")));
  }
  auto pre = tok::Pretokenizer::from_hf_json(pre_json);
  HfVocab h = parse_hf_vocab(tj, model, config);
  tok::BpeOptions opts{hf_kind(*pre), model.value("ignore_merges", false), !normalizer.is_null()};
  return std::make_unique<tok::BpeTokenizer>(std::move(h.vocab), std::move(h.added), h.merges, std::move(pre),
                                             std::move(opts));
}

std::unique_ptr<Tokenizer> Tokenizer::from_model_file(const ModelFile& mf) {
  const std::string format = mf.format();
  const json& meta = mf.metadata();
  if (format == "gguf") return from_gguf_metadata(meta);
  if (format == "safetensors") {
    if (!meta.contains("tokenizer") || meta["tokenizer"].is_null()) {
      fail("no tokenizer.json found for '{}' (needed next to the safetensors files)", mf.path());
    }
    return from_hf_json(meta["tokenizer"], meta.value("tokenizer_config", json::object()));
  }
  fail("cannot build a tokenizer for model format \"{}\" of '{}'", format, mf.path());
}

}  // namespace longctx
