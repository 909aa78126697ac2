// gguf_reader.cpp: GGUF v2/v3 parsing and validation (see gguf_reader.h, gguf_format.h).
//
// Order of work: header -> metadata (into JSON) -> tensor infos -> data-section layout checks.
// Counts and lengths are checked against the bytes left in the file before anything is
// allocated, so a hostile header cannot make us reserve terabytes.
#include "loader/gguf_reader.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "loader/byte_reader.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace longctx {
namespace {

using gguf::ValueType;
using json = nlohmann::json;

// Smallest encodings, to bound counts: a metadata entry is at least key length (8) + type (4)
// + a 1-byte value; a tensor info at least name length (8) + n_dims (4) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

std::string printable_magic(std::span<const uint8_t> b) {
  std::string s;
  for (uint8_t c : b) {
    if (c >= 0x20 && c < 0x7f) s += char(c);
    else {
      constexpr char kHex[] = "0123456789abcdef";
      s += "\\x";
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
  }
  return s;
}

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& name)
      : r_(bytes, name), name_(name), base_(bytes.data()) {}

  // What a successful parse produces (moved into the GgufFile).
  struct Result {
    uint32_t version = 0;
    uint64_t alignment = gguf::kDefaultAlignment;
    uint64_t data_offset = 0;
    json meta;
    std::vector<std::pair<std::string, ValueType>> kv_types, array_types;
    std::vector<TensorView> tensors;
  };

  json read_value(ValueType t, const std::string& key, std::string_view what, int depth) {
    switch (t) {
      case ValueType::UINT8: return r_.read<uint8_t>(what);
      case ValueType::INT8: return r_.read<int8_t>(what);
      case ValueType::UINT16: return r_.read<uint16_t>(what);
      case ValueType::INT16: return r_.read<int16_t>(what);
      case ValueType::UINT32: return r_.read<uint32_t>(what);
      case ValueType::INT32: return r_.read<int32_t>(what);
      case ValueType::FLOAT32: return r_.read<float>(what);
      case ValueType::UINT64: return r_.read<uint64_t>(what);
      case ValueType::INT64: return r_.read<int64_t>(what);
      case ValueType::FLOAT64: return r_.read<double>(what);
      case ValueType::BOOL: {
        const size_t at = r_.offset();
        const uint8_t b = r_.read<uint8_t>(what);
        if (b > 1) fail("'{}': metadata key '{}' has bool value {} at offset {} (must be 0 or 1)", name_, shown(key), b, at);
        return b == 1;
      }
      case ValueType::STRING: return r_.read_gguf_string(what);
      case ValueType::ARRAY: return read_array(key, what, depth);
    }
    fail("'{}': metadata key '{}' has unknown value type {}", name_, shown(key), uint32_t(t));
  }

  json read_array(const std::string& key, std::string_view what, int depth) {
    if (depth >= gguf::kMaxArrayNesting)
      fail("'{}': metadata key '{}' nests arrays more than {} deep", name_, shown(key), gguf::kMaxArrayNesting);
    const size_t at = r_.offset();
    const uint32_t raw = r_.read<uint32_t>(what);
    if (raw >= gguf::kNumValueTypes)
      fail("'{}': metadata key '{}' is an array of unknown value type {} (offset {})", name_, shown(key), raw, at);
    const auto et = ValueType(raw);
    const uint64_t n = r_.read<uint64_t>(what);
    if (n > r_.remaining() / gguf::min_value_bytes(et))
      fail("'{}' is truncated or corrupt: metadata key '{}' claims {} {} elements but only {} bytes remain (offset {})", name_,
           shown(key), n, gguf::value_type_name(et), r_.remaining(), at);
    if (depth == 0) array_types_.emplace_back(key, et);
    json arr = json::array();
    auto& v = arr.get_ref<json::array_t&>();
    v.reserve(size_t(n));
    for (uint64_t i = 0; i < n; ++i) v.push_back(read_value(et, key, what, depth + 1));
    return arr;
  }

  Result run() {
    auto magic = r_.take(4, "the magic");
    if (!std::equal(magic.begin(), magic.end(), gguf::kMagic))
      fail("'{}' is not a GGUF file: magic is \"{}\" (expected \"GGUF\")", name_, printable_magic(magic));
    version_ = r_.read<uint32_t>("the version");
    if (version_ == 1)
      fail("'{}' is GGUF version 1, which is obsolete; re-convert it with a current llama.cpp", name_);
    if (version_ < gguf::kMinVersion || version_ > gguf::kMaxVersion) {
      const uint32_t swapped = __builtin_bswap32(version_);
      if (swapped >= gguf::kMinVersion && swapped <= gguf::kMaxVersion)
        fail("'{}' is a big-endian GGUF file (version {} byte-swapped); longctx reads little-endian GGUF only", name_, swapped);
      fail("'{}' has unsupported GGUF version {} (longctx reads versions {} to {})", name_, version_,
           gguf::kMinVersion, gguf::kMaxVersion);
    }
    const uint64_t n_tensors = r_.read<uint64_t>("the tensor count");
    const uint64_t n_kv = r_.read<uint64_t>("the metadata count");
    if (n_kv > r_.remaining() / kMinKvBytes)
      fail("'{}' is truncated or corrupt: header claims {} metadata entries but only {} bytes follow the header",
           name_, n_kv, r_.remaining());
    if (n_tensors > r_.remaining() / kMinTensorInfoBytes)
      fail("'{}' is truncated or corrupt: header claims {} tensors but only {} bytes follow the header", name_,
           n_tensors, r_.remaining());

    read_metadata(n_kv);
    read_alignment();
    read_tensor_infos(n_tensors);
    check_layout();

    Result res;
    res.version = version_;
    res.alignment = alignment_;
    res.data_offset = data_offset_;
    res.meta = std::move(meta_);
    res.kv_types = std::move(kv_types_);
    res.array_types = std::move(array_types_);
    res.tensors = std::move(tensors_);
    return res;
  }

 private:
  void read_metadata(uint64_t n_kv) {
    meta_ = json::object();
    for (uint64_t i = 0; i < n_kv; ++i) {
      const std::string key = r_.read_gguf_string("the key of metadata entry " + std::to_string(i));
      const std::string what = "the value of metadata key '" + shown(key) + "'";
      const size_t at = r_.offset();
      const uint32_t raw = r_.read<uint32_t>(what);
      if (raw >= gguf::kNumValueTypes)
        fail("'{}': metadata key '{}' has unknown value type {} (offset {})", name_, shown(key), raw, at);
      if (meta_.contains(key)) fail("'{}': metadata key '{}' appears twice", name_, shown(key));
      kv_types_.emplace_back(key, ValueType(raw));
      meta_[key] = read_value(ValueType(raw), key, what, 0);
    }
  }

  void read_alignment() {
    auto it = meta_.find(gguf::kAlignmentKey);
    if (it == meta_.end()) return;
    ValueType t{};
    for (const auto& [k, vt] : kv_types_)
      if (k == gguf::kAlignmentKey) t = vt;
    if (t != ValueType::UINT32)
      fail("'{}': {} must be a uint32, found {}", name_, gguf::kAlignmentKey, gguf::value_type_name(t));
    const uint64_t a = it->get<uint64_t>();
    if (a == 0 || (a & (a - 1)) != 0)
      fail("'{}': {} is {}, which is not a power of two", name_, gguf::kAlignmentKey, a);
    alignment_ = a;
  }

  void read_tensor_infos(uint64_t n_tensors) {
    std::unordered_set<std::string> names;
    tensors_.reserve(size_t(n_tensors));
    offsets_.reserve(size_t(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TensorView t;
      t.name = r_.read_gguf_string("the name of tensor " + std::to_string(i));
      const std::string nm = shown(t.name);
      const std::string what = "the info of tensor '" + nm + "'";
      if (t.name.empty()) fail("'{}': tensor {} has an empty name", name_, i);
      if (!names.insert(t.name).second) fail("'{}': tensor '{}' appears twice", name_, nm);
      const uint32_t n_dims = r_.read<uint32_t>(what);
      if (n_dims > gguf::kMaxDims)
        fail("'{}': tensor '{}' has {} dimensions (GGUF allows at most {})", name_, nm, n_dims, gguf::kMaxDims);
      int64_t ne[gguf::kMaxDims] = {1, 1, 1, 1};
      int64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        ne[d] = r_.read<int64_t>(what);
        if (ne[d] <= 0) fail("'{}': tensor '{}' has dimension {} = {} (must be > 0)", name_, nm, d, ne[d]);
        if (__builtin_mul_overflow(numel, ne[d], &numel))
          fail("'{}': tensor '{}' has an element count that overflows 64 bits", name_, nm);
      }
      const uint32_t type = r_.read<uint32_t>(what);
      if (!dtype_is_known(type)) {
        const auto known = gguf::unsupported_ggml_type_name(type);
        if (!known.empty())
          fail("'{}': tensor '{}' has GGUF type {} ({}), which longctx does not support", name_, nm, type, known);
        fail("'{}': tensor '{}' has unknown GGUF type {}", name_, nm, type);
      }
      t.dtype = DType(type);
      const DTypeInfo& di = dtype_info(t.dtype);
      if (ne[0] % di.block_size != 0)
        fail("'{}': tensor '{}' of type {} has innermost dimension {}, not a multiple of the block size {}",
             name_, nm, di.name, ne[0], di.block_size);
      uint64_t row_bytes = 0, nbytes = 0;
      if (__builtin_mul_overflow(uint64_t(ne[0] / di.block_size), uint64_t(di.block_bytes), &row_bytes) ||
          __builtin_mul_overflow(row_bytes, uint64_t(numel / ne[0]), &nbytes) ||
          nbytes > std::numeric_limits<size_t>::max())
        fail("'{}': tensor '{}' has a byte size that overflows 64 bits", name_, nm);
      t.nbytes = size_t(nbytes);
      const uint64_t offset = r_.read<uint64_t>(what);  // relative to the data section
      if (offset % alignment_ != 0)
        fail("'{}': tensor '{}' has data offset {}, not a multiple of the alignment {}", name_, nm, offset, alignment_);
      for (int d = int(n_dims) - 1; d >= 0; --d) t.shape.push_back(ne[d]);  // row-major: outermost first
      tensors_.push_back(std::move(t));
      offsets_.push_back(offset);
    }
  }

  void check_layout() {
    const uint64_t header_end = r_.offset();
    data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;  // alignment <= 2^32
    const uint64_t file_size = r_.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      auto& t = tensors_[i];
      uint64_t begin = 0, end = 0;
      if (__builtin_add_overflow(data_offset_, offsets_[i], &begin) ||
          __builtin_add_overflow(begin, uint64_t(t.nbytes), &end))
        fail("'{}': tensor '{}' has data offset {} that overflows 64 bits", name_, shown(t.name), offsets_[i]);
      if (end > file_size)
        fail("'{}' is truncated or corrupt: tensor '{}' ({} {}, {} bytes at data offset {}) ends at byte {} "
             "but the file has {} bytes ({} bytes missing)",
             name_, shown(t.name), dtype_info(t.dtype).name, t.shape_str(), t.nbytes, offsets_[i], end,
             file_size, end - file_size);
      t.data = base_ + begin;
    }
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets_[a] < offsets_[b]; });
    for (size_t k = 1; k < order.size(); ++k) {
      const size_t a = order[k - 1], b = order[k];
      if (offsets_[a] + tensors_[a].nbytes > offsets_[b])
        fail("'{}': tensors '{}' (data bytes [{}, {})) and '{}' (data bytes [{}, {})) overlap", name_,
             shown(tensors_[a].name), offsets_[a], offsets_[a] + tensors_[a].nbytes,
             shown(tensors_[b].name), offsets_[b], offsets_[b] + tensors_[b].nbytes);
    }
  }

  ByteReader r_;
  std::string name_;
  const uint8_t* base_;
  uint32_t version_ = 0;
  uint64_t alignment_ = gguf::kDefaultAlignment;
  uint64_t data_offset_ = 0;
  json meta_;
  std::vector<std::pair<std::string, ValueType>> kv_types_, array_types_;
  std::vector<TensorView> tensors_;
  std::vector<uint64_t> offsets_;  // per tensor, relative to the data section
};

}  // namespace

gguf::ValueType GgufFile::array_type(const std::string& key) const {
  for (const auto& [k, t] : array_types_)
    if (k == key) return t;
  fail("'{}': metadata key '{}' is not an array", path_, shown(key));
}

std::unique_ptr<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name,
                                          std::shared_ptr<const void> owner) {
  Parser::Result res = Parser(bytes, name).run();
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->version_ = res.version;
  f->alignment_ = res.alignment;
  f->data_offset_ = res.data_offset;
  f->meta_ = std::move(res.meta);
  f->kv_types_ = std::move(res.kv_types);
  f->array_types_ = std::move(res.array_types);
  f->tensors_ = std::move(res.tensors);
  f->owner_ = std::move(owner);
  return f;
}

std::unique_ptr<GgufFile> open_gguf_file(const std::string& path) {
  auto map = std::make_shared<const MappedFile>(path);
  return GgufFile::parse(map->bytes(), path, map);
}

std::unique_ptr<GgufFile> open_gguf_bytes(std::span<const uint8_t> bytes, std::string name) {
  return GgufFile::parse(bytes, std::move(name));
}

}  // namespace longctx
