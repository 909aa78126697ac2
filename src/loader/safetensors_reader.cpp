// safetensors_reader.cpp: one safetensors image -> TensorViews, with validation (see the header).
#include "loader/safetensors_reader.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "loader/byte_reader.h"
#include "util/error.h"

namespace longctx {
namespace {

using json = nlohmann::json;

// The safetensors library refuses headers above 100 MB; so do we (a real header is a few hundred KB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Rank bound for sanity (real tensors have <= 5 dims); keeps the shape loop bounded.
constexpr size_t kMaxRank = 8;
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeName {
  const char* name;
  DType type;
};
constexpr DtypeName kDtypes[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                                 {"F64", DType::F64}, {"I8", DType::I8},   {"I16", DType::I16},
                                 {"I32", DType::I32}, {"I64", DType::I64}};

uint64_t json_uint(const json& v, const std::string& file, const std::string& tensor, const char* field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  fail("'{}': tensor '{}' has a bad {} entry {} (expected a non-negative integer)", file, shown(tensor), field,
       shown(v.dump(-1, ' ', false, json::error_handler_t::replace)));
}

// Parses the header JSON; rejects duplicate top-level keys (nlohmann would keep the last).
json parse_header(std::span<const uint8_t> text, const std::string& name) {
  std::unordered_set<std::string> seen;
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) fail("'{}': tensor '{}' appears twice in the header", name, shown(k));
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    fail("'{}': the safetensors header is not valid JSON: {}", name, e.what());
  }
}

}  // namespace

DType safetensors_dtype(const std::string& s, const std::string& context) {
  for (const auto& d : kDtypes)
    if (s == d.name) return d.type;
  if (s == "U8" || s == "BOOL")
    fail("{} has dtype {}, which longctx does not read (weights are F32, F16, BF16, F64 or I8..I64)", context, s);
  fail("{} has unknown or unsupported safetensors dtype '{}' (longctx reads F32, F16, BF16, F64, I8, I16, I32, I64)",
       context, shown(s));
}

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  fail("dtype {} cannot be stored in a safetensors file", dtype_info(t).name);
}

void parse_safetensors(std::span<const uint8_t> bytes, const std::string& name, std::vector<TensorView>& out) {
  ByteReader r(bytes, name);
  const uint64_t n = r.read<uint64_t>("the header length");
  if (n > kMaxHeaderBytes)
    fail("'{}': safetensors header length {} is larger than the {} bytes allowed (corrupt file?)", name, n,
         kMaxHeaderBytes);
  const auto text = r.take(n, "the JSON header");
  const json header = parse_header(text, name);
  if (!header.is_object()) fail("'{}': the safetensors header is not a JSON object", name);
  const uint8_t* data = bytes.data() + r.offset();
  const uint64_t data_size = r.remaining();

  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  const size_t first = out.size();
  for (const auto& [key, entry] : header.items()) {
    if (key == kMetadataKey) continue;
    const std::string nm = shown(key);
    if (key.empty()) fail("'{}': a tensor has an empty name", name);
    if (!entry.is_object()) fail("'{}': header entry for tensor '{}' is not an object", name, nm);
    const auto dt = entry.find("dtype"), sh = entry.find("shape"), off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) fail("'{}': tensor '{}' has no string field 'dtype'", name, nm);
    if (sh == entry.end() || !sh->is_array()) fail("'{}': tensor '{}' has no array field 'shape'", name, nm);
    if (off == entry.end() || !off->is_array() || off->size() != 2)
      fail("'{}': tensor '{}' needs field 'data_offsets' = [begin, end]", name, nm);
    TensorView t;
    t.name = key;
    t.dtype = safetensors_dtype(dt->get<std::string>(), "'" + name + "': tensor '" + nm + "'");
    if (sh->size() > kMaxRank) fail("'{}': tensor '{}' has {} dimensions (at most {})", name, nm, sh->size(), kMaxRank);
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      const uint64_t v = json_uint(d, name, key, "shape");
      if (v > uint64_t(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(numel, v, &numel) ||
          numel > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("'{}': tensor '{}' has an element count that overflows 64 bits", name, nm);
      t.shape.push_back(int64_t(v));
    }
    const uint64_t elem = uint64_t(dtype_info(t.dtype).block_bytes);
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, elem, &nbytes)) fail("'{}': tensor '{}' has a byte size that overflows", name, nm);
    const uint64_t b = json_uint((*off)[0], name, key, "data_offsets"), e = json_uint((*off)[1], name, key, "data_offsets");
    if (b > e) fail("'{}': tensor '{}' has data_offsets [{}, {}] with begin after end", name, nm, b, e);
    if (e - b != nbytes)
      fail("'{}': tensor '{}' ({} {}) needs {} bytes but its data_offsets [{}, {}] span {}", name, nm,
           dtype_info(t.dtype).name, t.shape_str(), nbytes, b, e, e - b);
    if (e > data_size)
      fail("'{}' is truncated or corrupt: tensor '{}' ends at data byte {} but the data section has {} bytes ({} bytes missing)",
           name, nm, e, data_size, e - data_size);
    t.data = data + b;
    t.nbytes = size_t(nbytes);
    ranges.push_back({b, e, out.size()});
    out.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < ranges.size(); ++k)
    if (ranges[k - 1].end > ranges[k].begin)
      fail("'{}': tensors '{}' (data bytes [{}, {})) and '{}' (data bytes [{}, {})) overlap", name,
           shown(out[ranges[k - 1].index].name), ranges[k - 1].begin, ranges[k - 1].end, shown(out[ranges[k].index].name),
           ranges[k].begin, ranges[k].end);
  // File order (by offset) rather than the header's alphabetical order.
  std::vector<TensorView> ordered;
  ordered.reserve(ranges.size());
  for (const auto& rg : ranges) ordered.push_back(std::move(out[rg.index]));
  out.resize(first);
  for (auto& t : ordered) out.push_back(std::move(t));
}

}  // namespace longctx
