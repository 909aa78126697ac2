// safetensors_dir.cpp: opening safetensors files and HF model directories (single or sharded).
//
// A directory needs config.json, and then model.safetensors.index.json (sharded: every tensor it
// lists must be in the shard it names, and no tensor may be in two shards), or model.safetensors,
// or exactly one *.safetensors file. JSON side files become metadata() entries.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "loader/byte_reader.h"
#include "loader/safetensors_reader.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace longctx {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// The JSON side files of an HF model directory and their metadata() keys.
struct SideFile {
  const char* file;
  const char* key;
};
constexpr SideFile kSideFiles[] = {{"config.json", "config"},
                                   {"tokenizer.json", "tokenizer"},
                                   {"tokenizer_config.json", "tokenizer_config"},
                                   {"generation_config.json", "generation_config"}};

json parse_json_file(const fs::path& p) {
  const std::string text = read_text_file(p.string());
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("'{}' is not valid JSON: {}", p.string(), e.what());
  }
}

json read_side_files(const fs::path& dir) {
  json meta = json::object();
  for (const auto& s : kSideFiles) {
    const fs::path p = dir / s.file;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) meta[s.key] = parse_json_file(p);
  }
  return meta;
}

}  // namespace

std::unique_ptr<ModelFile> open_safetensors_bytes(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<SafetensorsModel> m(new SafetensorsModel());
  parse_safetensors(bytes, name, m->tensors_);
  m->meta_ = json::object();
  m->files_ = {name};
  m->path_ = std::move(name);
  return m;
}

std::unique_ptr<ModelFile> open_safetensors_file(const std::string& path) {
  std::unique_ptr<SafetensorsModel> m(new SafetensorsModel());
  auto map = std::make_shared<const MappedFile>(path);
  parse_safetensors(map->bytes(), path, m->tensors_);
  m->owners_.push_back(map);
  m->files_ = {path};
  m->path_ = path;
  m->meta_ = read_side_files(fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path());
  return m;
}

std::unique_ptr<ModelFile> open_safetensors_dir(const std::string& dir_str) {
  const fs::path dir(dir_str);
  std::error_code ec;
  if (!fs::is_regular_file(dir / "config.json", ec))
    fail("'{}' has no config.json: a Hugging Face model directory needs config.json next to its *.safetensors files",
         dir_str);
  std::unique_ptr<SafetensorsModel> m(new SafetensorsModel());
  m->path_ = dir_str;
  m->meta_ = read_side_files(dir);

  auto add_file = [&](const fs::path& p) {
    auto map = std::make_shared<const MappedFile>(p.string());
    std::vector<TensorView> ts;
    parse_safetensors(map->bytes(), p.string(), ts);
    m->owners_.push_back(map);
    m->files_.push_back(p.string());
    return ts;
  };

  const fs::path index_path = dir / kIndexName;
  if (fs::is_regular_file(index_path, ec)) {
    const json index = parse_json_file(index_path);
    const auto wm = index.find("weight_map");
    if (!index.is_object() || wm == index.end() || !wm->is_object())
      fail("'{}' has no \"weight_map\" object", index_path.string());
    std::map<std::string, std::vector<std::string>> by_shard;  // shard -> tensors the index puts there
    for (const auto& [tensor, shard] : wm->items()) {
      if (!shard.is_string())
        fail("'{}': weight_map entry for tensor '{}' is not a file name", index_path.string(), shown(tensor));
      const std::string s = shard.get<std::string>();
      const fs::path sp(s);
      if (s.empty() || sp.is_absolute() || std::find(sp.begin(), sp.end(), fs::path("..")) != sp.end())
        fail("'{}': tensor '{}' names shard '{}', which is not a file inside the directory", index_path.string(),
             shown(tensor), shown(s));
      by_shard[s].push_back(tensor);
    }
    if (by_shard.empty()) fail("'{}': weight_map is empty", index_path.string());
    std::set<std::string> seen;
    for (const auto& [shard, names] : by_shard) {
      const fs::path sp = dir / shard;
      if (!fs::is_regular_file(sp, ec))
        fail("shard '{}' is missing: '{}' lists it for {} tensors (e.g. '{}')", sp.string(), kIndexName, names.size(),
             shown(names.front()));
      std::vector<TensorView> ts = add_file(sp);
      std::set<std::string> in_shard;
      for (auto& t : ts) {
        if (!seen.insert(t.name).second)
          fail("tensor '{}' appears in more than one shard (again in '{}')", shown(t.name), sp.string());
        in_shard.insert(t.name);
        m->tensors_.push_back(std::move(t));
      }
      for (const auto& n : names)
        if (!in_shard.count(n))
          fail("tensor '{}' is listed in '{}' under shard '{}', but that shard does not contain it", shown(n),
               kIndexName, sp.string());
    }
    return m;
  }

  fs::path single = dir / kSingleName;
  if (!fs::is_regular_file(single, ec)) {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") found.push_back(e.path());
    if (found.size() != 1)
      fail("'{}' has config.json but no {} nor {}{}", dir_str, kSingleName, kIndexName,
           found.empty() ? std::string(" (no *.safetensors files at all)")
                         : " (and " + std::to_string(found.size()) + " other *.safetensors files, ambiguous)");
    single = found.front();
  }
  m->tensors_ = add_file(single);
  return m;
}

}  // namespace longctx
