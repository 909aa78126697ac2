// describe.cpp: describe_model_file() (see describe.h).
#include "loader/describe.h"

#include <fmt/format.h>

#include <map>

#include "loader/gguf_reader.h"

namespace longctx {
namespace {

using json = nlohmann::json;

// Arrays up to this many scalars are shown inline ([1, 2]); longer ones as "[N ints]".
constexpr size_t kInlineArrayItems = 8;
// Metadata objects expanded one level (a directory's config.json); others are shown as "{N keys}".
constexpr const char* kExpandedObjects[] = {"config", "generation_config"};

std::string human_bytes(uint64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < (uint64_t(1) << 20)) return fmt::format("{:.1f} KiB", double(b) / 1024);
  if (b < (uint64_t(1) << 30)) return fmt::format("{:.1f} MiB", double(b) / (1 << 20));
  return fmt::format("{:.2f} GiB", double(b) / (uint64_t(1) << 30));
}

std::string array_kind(const json& a) {
  bool str = true, integer = true, num = true, boolean = true;
  for (const auto& x : a) {
    str &= x.is_string();
    integer &= x.is_number_integer();
    num &= x.is_number();
    boolean &= x.is_boolean();
  }
  if (str) return "strings";
  if (integer) return "ints";
  if (num) return "numbers";
  if (boolean) return "bools";
  return "values";
}

std::string dump_safe(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string short_json_value(const json& v, size_t max_chars) {
  if (v.is_array()) {
    bool scalars = true;
    for (const auto& x : v) scalars &= !x.is_structured() && !x.is_string();
    if (scalars && v.size() <= kInlineArrayItems) {
      std::string s = dump_safe(v);
      if (s.size() <= max_chars) return s;
    }
    return fmt::format("[{} {}]", v.size(), array_kind(v));
  }
  if (v.is_object()) return fmt::format("{{{} keys}}", v.size());
  std::string s = dump_safe(v);
  if (s.size() <= max_chars) return s;
  size_t cut = max_chars;
  while (cut > 0 && (uint8_t(s[cut]) & 0xC0) == 0x80) --cut;  // do not split a UTF-8 sequence
  const size_t full = v.is_string() ? v.get_ref<const std::string&>().size() : s.size();
  return s.substr(0, cut) + fmt::format("...{} ({} bytes)", v.is_string() ? "\"" : "", full);
}

std::string describe_model_file(const ModelFile& mf, bool list_tensors) {
  std::string out = fmt::format("path:     {}\nformat:   {}", mf.path(), mf.format());
  if (const auto* g = dynamic_cast<const GgufFile*>(&mf))
    out += fmt::format(" (version {}, alignment {}, data at byte {})", g->version(), g->alignment(), g->data_offset());
  out += "\n";

  const json& meta = mf.metadata();
  out += fmt::format("metadata: {} keys\n", meta.size());
  for (const auto& [k, v] : meta.items()) {
    bool expand = false;
    for (const char* e : kExpandedObjects) expand |= (k == e && v.is_object());
    if (expand) {
      for (const auto& [k2, v2] : v.items()) out += fmt::format("  {}.{} = {}\n", k, k2, short_json_value(v2));
    } else {
      out += fmt::format("  {} = {}\n", k, short_json_value(v));
    }
  }

  std::map<std::string, std::pair<size_t, uint64_t>> hist;  // dtype -> (count, bytes)
  uint64_t total_bytes = 0, total_elems = 0;
  for (const auto& t : mf.tensors()) {
    auto& h = hist[dtype_info(t.dtype).name];
    h.first++;
    h.second += t.nbytes;
    total_bytes += t.nbytes;
    total_elems += uint64_t(t.numel());
  }
  out += fmt::format("tensors:  {} ({} elements, {})\n", mf.tensors().size(), total_elems, human_bytes(total_bytes));
  out += "dtypes:  ";
  for (const auto& [name, h] : hist) out += fmt::format(" {} x{} ({})", name, h.first, human_bytes(h.second));
  out += "\n";
  if (list_tensors) {
    size_t w = 0;
    for (const auto& t : mf.tensors()) w = std::max(w, t.name.size());
    for (const auto& t : mf.tensors())
      out += fmt::format("  {:<{}}  {:<5} {:<20} {}\n", t.name, w, dtype_info(t.dtype).name, t.shape_str(), human_bytes(t.nbytes));
  }
  return out;
}

}  // namespace longctx
