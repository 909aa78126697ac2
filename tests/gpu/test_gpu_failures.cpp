// test_gpu_failures.cpp: the ways the GPU path can fail, each a clear longctx::Error (never a
// crash or a hang): no GPU or a build without CUDA (--device cuda fails, --device auto runs on
// the CPU with a note), a KV cache that will not fit (caught before allocating, saying what is
// needed vs free; --device auto falls back to the CPU), out of GPU memory, bad token ids,
// capacity overrun. The no-GPU cases run where there is no usable GPU (CI, the CPU build);
// the GPU cases need one and fill its memory on purpose with a "hog" allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "longctx/engine.h"
#include "model/tiny_model.h"
#include "test_util.h"
#include "util/error.h"

#ifdef LONGCTX_WITH_GPU
#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_transformer.h"
#include "kernels/cuda/runtime.h"
#endif

namespace longctx {
namespace {

using test::contains;
using test::error_of;

std::string tiny_path(const std::string& name) {
  static std::map<std::string, std::string> made;
  if (!made.count(name)) {
    const auto dir = test::temp_dir(name);
    TinyModelSpec s;
    s.n_embd = 256;
    s.n_head = 4;  // head dim 64: the GPU kernels' smallest
    s.n_ff = 512;
    write_tiny_model(dir.string(), s);
    made[name] = (dir / "tiny.gguf").string();
  }
  return made[name];
}

TEST(DeviceChoice, UnknownDeviceIsAnError) {
  const std::string e = error_of([] { Engine::load({.model_path = tiny_path("dev"), .device = "gpu"}); });
  EXPECT_TRUE(contains(e, "unknown device 'gpu'")) << e;
}

TEST(DeviceChoice, CudaWithoutUsableGpuIsAClearError) {
  if (test::have_usable_gpu()) GTEST_SKIP() << "a usable GPU is present";
  const std::string e = error_of([] { Engine::load({.model_path = tiny_path("dev"), .device = "cuda"}); });
#ifdef LONGCTX_WITH_GPU
  EXPECT_TRUE(contains(e, "--device cuda: ") && (contains(e, "no CUDA device") || contains(e, "Hopper"))) << e;
  EXPECT_TRUE(contains(e, "--device cpu")) << e;
#else
  EXPECT_TRUE(contains(e, "built without CUDA")) << e;
#endif
}

TEST(DeviceChoice, RandomWeightsWithoutUsableGpuIsAClearError) {
  if (test::have_usable_gpu()) GTEST_SKIP() << "a usable GPU is present";
  const std::string e = error_of([] { Engine::load({.model_path = "", .device = "cuda", .random_weights = "llama3-8b"}); });
  EXPECT_FALSE(e.empty());
#ifndef LONGCTX_WITH_GPU
  EXPECT_TRUE(contains(e, "built without CUDA")) << e;
#endif
}

TEST(DeviceChoice, AutoWithoutUsableGpuRunsOnTheCpuWithANote) {
  if (test::have_usable_gpu()) GTEST_SKIP() << "a usable GPU is present";
  ::testing::internal::CaptureStderr();
  auto eng = Engine::load({.model_path = tiny_path("dev"), .n_threads = 2, .device = "auto"});
  const std::string note = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(note, "running on the CPU")) << note;
  EXPECT_EQ(std::count(note.begin(), note.end(), '\n'), 1) << "one line: " << note;
  auto cpu = Engine::load({.model_path = tiny_path("dev"), .n_threads = 2});
  const std::vector<int32_t> ids{5, 17, 42, 99, 3};
  SamplingParams sp;
  sp.max_tokens = 6;
  sp.stop_at_eos = false;
  EXPECT_EQ(eng->generate(ids, sp).tokens, cpu->generate(ids, sp).tokens);
}

#ifdef LONGCTX_WITH_GPU

// Holds all but `leave` bytes of the GPU's free memory while alive.
struct MemoryHog {
  void* p = nullptr;
  explicit MemoryHog(size_t leave) {
    const size_t free_b = cuda::device_info(0).free_mem;
    if (free_b > leave) p = cuda::dev_malloc(free_b - leave);
  }
  ~MemoryHog() { cuda::dev_free(p); }
};
constexpr size_t kGiB = size_t(1) << 30;

TEST(GpuFailure, KvCacheThatWillNotFitFailsBeforeAllocating) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("smollm2-135m:1");
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 1, nullptr), {256});
  const std::string e = error_of([&] { g.reset(int64_t(1) << 36); });
  EXPECT_TRUE(contains(e, "the KV cache for 68719476736 tokens needs")) << e;
  EXPECT_TRUE(contains(e, "GiB free")) << e;
  EXPECT_TRUE(contains(e, "tokens would fit")) << e;
  EXPECT_TRUE(contains(e, "--device cpu")) << e;
  std::printf("[ message ] %s\n", e.c_str());
  // Still usable afterwards.
  g.reset(64);
  std::vector<float> logits;
  const std::vector<int32_t> ids{1, 2, 3, 4};
  g.forward(ids, 1, &logits);
  EXPECT_EQ(logits.size(), size_t(cfg.vocab_size));
}

TEST(GpuFailure, EngineOnCudaSaysWhatTheKvCacheNeeds) {
  REQUIRE_GPU();
  auto eng = Engine::load({.model_path = "", .max_context = int64_t(1) << 40, .device = "cuda", .random_weights = "smollm2-135m:2"});
  SamplingParams sp;
  sp.max_tokens = 2'000'000'000;  // 2G tokens x 1.5 KiB: terabytes of KV cache
  const std::vector<int32_t> ids{1, 2, 3};
  const std::string e = error_of([&] { eng->generate(ids, sp); });
  EXPECT_TRUE(contains(e, "--device cuda: the KV cache for 2000000003 tokens needs")) << e;
  // The engine stays usable for a prompt that fits.
  sp.max_tokens = 4;
  sp.stop_at_eos = false;
  EXPECT_EQ(eng->generate(ids, sp).tokens.size(), 4u);
}

TEST(GpuFailure, AutoFallsBackToTheCpuWhenTheKvCacheWillNotFit) {
  REQUIRE_GPU();
  auto eng = Engine::load({.model_path = tiny_path("auto"), .n_threads = 4, .max_context = int64_t(1) << 24,
                           .device = "auto"});
  // Tiny model: 1 KiB of KV per token; with 1.5 GiB left, 1.5M tokens cannot fit on the GPU
  // (0.5 GiB reserve) but 3 GiB of fp32 cache is fine on the host.
  MemoryHog hog(3 * kGiB / 2);
  SamplingParams sp;
  sp.max_tokens = 1'500'000;
  sp.stop_at_eos = false;
  const std::vector<int32_t> ids{5, 17, 42, 99, 3};
  int n = 0;
  ::testing::internal::CaptureStderr();
  const auto res = eng->generate(ids, sp, {}, [&](int32_t, const std::string&) { return ++n < 4; });
  const std::string note = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(note, "needs") && contains(note, "--device auto: running on the CPU")) << note;
  EXPECT_EQ(res.tokens.size(), 4u);
}

TEST(GpuFailure, OutOfGpuMemoryIsAClearError) {
  REQUIRE_GPU();
  {
    MemoryHog hog(kGiB);
    const ModelConfig cfg = gpu::geometry_config("llama3-8b:4");  // ~4.5 GiB of bf16 weights
    std::string e = error_of([&] { gpu::DeviceWeights::random(cfg, 1, nullptr); });
    EXPECT_TRUE(contains(e, "out of GPU memory")) << e;
    std::printf("[ message ] %s\n", e.c_str());
    e = error_of([] { Engine::load({.model_path = "", .device = "cuda", .random_weights = "llama3-8b"}); });
    EXPECT_TRUE(contains(e, "needs") && contains(e, "free")) << e;
    std::printf("[ message ] %s\n", e.c_str());
  }
  // No sticky error: the GPU works again once the memory is back.
  const ModelConfig cfg = gpu::geometry_config("smollm2-135m:1");
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 1, nullptr), {256});
  g.reset(16);
  std::vector<float> logits;
  const std::vector<int32_t> ids{7, 8};
  g.forward(ids, 1, &logits);
  EXPECT_EQ(logits.size(), size_t(cfg.vocab_size));
}

TEST(GpuFailure, BadTokensAndCapacityOverrun) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("smollm2-135m:1");
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 1, nullptr), {256});
  g.reset(8);
  std::vector<float> logits;
  const std::vector<int32_t> bad{1, cfg.vocab_size};
  EXPECT_TRUE(contains(error_of([&] { g.forward(bad, 1, &logits); }), "outside the vocabulary"));
  const std::vector<int32_t> many(9, 1);
  EXPECT_TRUE(contains(error_of([&] { g.forward(many, 1, &logits); }), "do not fit"));
  const std::vector<int32_t> ok(8, 1);
  g.forward(ok, 1, &logits);
  EXPECT_EQ(g.size(), 8);
}

TEST(GpuFailure, UnknownGeometryListsTheKnownOnes) {
  const std::string e = error_of([] { gpu::geometry_config("llama9-1t"); });
  EXPECT_TRUE(contains(e, "llama3-8b") && contains(e, "qwen2.5-7b")) << e;
  EXPECT_TRUE(contains(error_of([] { gpu::geometry_config("llama3-8b:0"); }), "1..32"));
  EXPECT_EQ(gpu::geometry_config("llama3-8b:2").n_layer, 2);
}

#endif  // LONGCTX_WITH_GPU

}  // namespace
}  // namespace longctx
