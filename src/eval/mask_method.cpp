// mask_method.cpp: the mask-method registry and the built-in dense and A-shape masks.
#include "eval/mask_method.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>

#include "util/error.h"

namespace longctx::eval {
namespace {

// The engine's A-shape defaults (MInference paper, Table 4): 1024 sinks + 4096 window.
constexpr int64_t kDefaultSink = 1024;
constexpr int64_t kDefaultWindow = 4096;

class DenseMask final : public MaskMethod {
 public:
  std::string name() const override { return "dense"; }
  LayerMask build(const AttnCapture& layer) const override {
    LayerMask m;
    m.n_tokens = layer.n_tokens;
    m.heads.resize(1);
    for (int64_t b = 0; b < m.n_blocks(); ++b) {
      BlockKeys k;
      k.ranges.push_back({0, std::min(layer.n_tokens, (b + 1) * kMaskBlockQ)});
      m.heads[0].push_back(std::move(k));
    }
    return m;
  }
};

class AShapeMask final : public MaskMethod {
 public:
  AShapeMask(std::string spec, int64_t sink, int64_t window) : spec_(std::move(spec)), sink_(sink), window_(window) {}
  std::string name() const override { return spec_; }
  LayerMask build(const AttnCapture& layer) const override {
    LayerMask m;
    m.n_tokens = layer.n_tokens;
    m.heads.resize(1);
    for (int64_t b = 0; b < m.n_blocks(); ++b)
      m.heads[0].push_back(
          a_shape_block(sink_, window_, b * kMaskBlockQ, std::min(layer.n_tokens, (b + 1) * kMaskBlockQ)));
    return m;
  }

 private:
  std::string spec_;
  int64_t sink_, window_;
};

int64_t parse_nonneg(const std::string& text, const std::string& spec, const char* what) {
  int64_t v = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0)
    fail("attention method '{}': {} must be a non-negative integer (got '{}')", spec, what, text);
  return v;
}

std::unique_ptr<MaskMethod> make_a_shape(const std::string& spec, const std::string& arg) {
  int64_t sink = kDefaultSink, window = kDefaultWindow;
  if (!arg.empty()) {
    size_t comma = arg.find(',');
    if (comma == std::string::npos)
      fail("attention method '{}': expected a_shape=SINK,WINDOW (e.g. a_shape=64,1024)", spec);
    sink = parse_nonneg(arg.substr(0, comma), spec, "SINK");
    window = parse_nonneg(arg.substr(comma + 1), spec, "WINDOW");
  }
  return std::make_unique<AShapeMask>(spec, sink, window);
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, MaskMethodFactory>& registry() {
  static std::map<std::string, MaskMethodFactory> r = {
      {"dense",
       [](const std::string& spec, const std::string& arg) -> std::unique_ptr<MaskMethod> {
         if (!arg.empty()) fail("attention method 'dense' takes no parameters (got '{}')", spec);
         return std::make_unique<DenseMask>();
       }},
      {"a_shape", make_a_shape},
      {"minference", make_minference_mask},
  };
  return r;
}

}  // namespace

BlockKeys a_shape_block(int64_t sink, int64_t window, int64_t q0, int64_t q1) {
  BlockKeys k;
  const int64_t w0 = std::max<int64_t>(0, q0 - window + 1);
  if (window == 0) {
    if (sink > 0) k.ranges.push_back({0, sink});
  } else if (sink >= w0) {
    k.ranges.push_back({0, std::max(sink, q1)});
  } else {
    if (sink > 0) k.ranges.push_back({0, sink});
    k.ranges.push_back({w0, q1});
  }
  return k;
}

void register_mask_method(const std::string& name, MaskMethodFactory factory) {
  std::lock_guard lock(registry_mutex());
  registry()[name] = std::move(factory);
}

std::vector<std::string> mask_method_names() {
  std::lock_guard lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [n, f] : registry()) names.push_back(n);
  return names;
}

std::unique_ptr<MaskMethod> make_mask_method(const std::string& spec) {
  const size_t eq = spec.find('=');
  const std::string name = spec.substr(0, eq);
  const std::string arg = eq == std::string::npos ? "" : spec.substr(eq + 1);
  MaskMethodFactory f;
  {
    std::lock_guard lock(registry_mutex());
    auto it = registry().find(name);
    if (it != registry().end()) f = it->second;
  }
  if (!f) {
    std::string valid;
    for (const auto& n : mask_method_names()) valid += (valid.empty() ? "" : ", ") + n;
    fail("attention fidelity has no index for method '{}'; valid: {}", name, valid);
  }
  return f(spec, arg);
}

}  // namespace longctx::eval
