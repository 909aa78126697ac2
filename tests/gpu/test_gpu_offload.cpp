// test_gpu_offload.cpp: KV offload in the GPU model (gpu/gpu_offload.h, GpuOptions::kv_offload).
//
// Checks: (1) the up-front plan (no GPU needed): on Llama-3-8B geometry at 1M tokens with an H200's
// budgets the dense-decoding layers stay in HBM and the rest fill HBM before any goes to the host;
// 2M bf16 does not fit and the message names both budgets; a forced split is honoured; (2) on a
// 4-layer Llama-3-8B geometry (random weights) with HiP (k 64, window 64, sinks 16, refresh 4,
// layer 0 dense): logits of every step with the K/V of 0, 2 (a split) or all 4 layers in host
// memory are bit-identical, prefill in one call or two (the second reads the first's rows back
// from host memory), decode by CUDA graph replay; offload on == off bit for bit when the prompt
// is one chunk (the layer-major prefill then runs the same launches as the chunk-major one), and
// within the bf16 tolerance with the same argmax for a prompt of several chunks (the GEMMs of the
// two orders may pick other algorithms); the caches are used (refresh and cached steps counted,
// K/V hits on cached steps); (3) options the offload cannot serve are refused up front; (4) the
// fp8 cache (--kv-cache fp8): the plan sizes 1 byte an element (2M fits an H200's budgets, 3M's
// outcome printed), host layers == HBM layers and offload on == off bit for bit (both prefill
// layer-major: a prompt of several chunks is bit-identical too); (5) the prefill's residual stream
// in pinned host memory (prefill_residual.h): the plan's GPU staging is two chunks + one layer's
// K/V at 256K-1M, the 3M fp8 automatic split puts fewer layers on the host; through 128-token chunk
// buffers the model's logits equal the GPU-resident stream's bit for bit (bf16 and fp8, 0 or all
// layers on the host, one or two prefill calls); (6) --kv-page-table: the hash map's sizes, and auto
// taking it only when the vector map does not fit.
//   build-gpu/tests/gpu/test_gpu --gtest_filter='KvOffload*'
#ifdef LONGCTX_WITH_GPU
#include <cstring>

#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_offload.h"
#include "gpu/gpu_transformer.h"
#include "gpu/memory_plan.h"
#include "test_util.h"
#include "util/error.h"

namespace longctx {
namespace {

using test::random_ids;

constexpr size_t kGiB = size_t(1) << 30;
// HiP small enough that a 1.5K-token context is sparse (n_kv - window - sinks > k) and refreshes often.
const std::string kHip = "hip=k=64,window=64,sinks=16,refresh=4,dense_layers=1";

gpu::OffloadBudget h200_budget(const ModelConfig& c, int64_t cap, int dense_layers, bool fp8 = false) {
  gpu::OffloadBudget b;
  b.elem = fp8 ? KvElem::fp8_e4m3 : KvElem::bf16;
  b.capacity = cap;
  b.line_tokens = 2;
  b.gpu_free = 139 * kGiB - gpu::weight_bytes(c) - 2 * kGiB;  // weights and an activation arena held
  b.gpu_fixed = gpu::stage_layout(c, cap, fp8 ? gpu::KvCacheType::fp8 : gpu::KvCacheType::bf16, true).total +
                gpu::decode_ws_bytes(c, cap);
  b.host_free = 125 * int64_t(kGiB);
  b.device_name = "NVIDIA H200";
  b.decodes_dense = [dense_layers](int l) { return l < dense_layers; };
  return b;
}

TEST(KvOffloadPlan, SplitsLayersBetweenHbmAndHost) {
  const ModelConfig c = gpu::geometry_config("llama3-8b");
  const int64_t cap = int64_t(1) << 20;
  const gpu::OffloadPlan p = gpu::plan_offload(c, {.on = true}, h200_budget(c, cap, 3));
  EXPECT_EQ(p.hbm_layer_bytes, 4 * kGiB);  // 1M x 8 heads x 128 x bf16, K and V
  EXPECT_GT(p.host_layers, 0);
  EXPECT_LT(p.host_layers, c.n_layer);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(p.tier_layer[size_t(l)], -1) << "dense layer " << l << " must stay in HBM";
  int host = 0;
  for (int l = 0; l < c.n_layer; ++l) host += p.tier_layer[size_t(l)] >= 0;
  EXPECT_EQ(host, p.host_layers);
  EXPECT_EQ(p.tier.n_layer, p.host_layers);
  EXPECT_EQ(size_t(p.tier_sizes.host_bytes), size_t(p.host_layers) * 4 * kGiB);
  // One HBM layer more would not fit: the plan keeps as few layers on the host as the GPU allows.
  const gpu::OffloadBudget b = h200_budget(c, cap, 3);
  const size_t gpu_need = b.gpu_fixed + gpu::kReserveBytes + p.hbm_bytes + size_t(p.tier_sizes.gpu_bytes);
  EXPECT_LE(gpu_need, b.gpu_free);
  const std::string one_less = test::error_of(
      [&] { (void)gpu::plan_offload(c, {.on = true, .host_layers = p.host_layers - 1}, h200_budget(c, cap, 3)); });
  EXPECT_TRUE(test::contains(one_less, "GPU memory") && test::contains(one_less, "(short)")) << one_less;
  std::printf("[ plan ] 1M: %d layers in HBM, %d on the host (%.1f GiB pinned, caches %.2f GiB)\n",
              c.n_layer - p.host_layers, p.host_layers, double(p.tier_sizes.host_bytes) / double(kGiB),
              double(p.tier_sizes.gpu_bytes) / double(kGiB));

  // A forced split.
  const gpu::OffloadPlan all = gpu::plan_offload(c, {.on = true, .host_layers = 20}, h200_budget(c, cap, 3));
  EXPECT_EQ(all.host_layers, 20);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(all.tier_layer[size_t(l)], -1);

  // 2M bf16 (256 GiB of K/V) fits neither: one message with both budgets.
  const std::string e =
      test::error_of([&] { (void)gpu::plan_offload(c, {.on = true}, h200_budget(c, 2 * cap, 3)); });
  EXPECT_TRUE(test::contains(e, "GPU memory") && test::contains(e, "host memory") && test::contains(e, "NVIDIA H200") &&
              test::contains(e, "(short)"))
      << e;
  std::printf("[ message ] %s\n", e.c_str());
  EXPECT_TRUE(test::contains(test::error_of([&] {
                (void)gpu::plan_offload(c, {.on = true, .host_layers = 33}, h200_budget(c, cap, 3));
              }),
                             "33"));
}

// fp8: 1 byte an element in HBM and host memory; 2M fits an H200 (139 GiB) with a 125 GiB host.
TEST(KvOffloadPlan, Fp8SizesOneByteAnElement) {
  const ModelConfig c = gpu::geometry_config("llama3-8b");
  const int64_t m = int64_t(1) << 20;
  const gpu::OffloadPlan p2 = gpu::plan_offload(c, {.on = true}, h200_budget(c, 2 * m, 3, true));
  EXPECT_EQ(p2.hbm_layer_bytes, 4 * kGiB);  // 2M x 8 heads x 128 x 1 byte, K and V
  EXPECT_EQ(p2.tier.elem, KvElem::fp8_e4m3);
  EXPECT_EQ(size_t(p2.tier_sizes.host_bytes), size_t(p2.host_layers) * 4 * kGiB);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(p2.tier_layer[size_t(l)], -1) << "dense layer " << l;
  // The fp8 budget holds the staging already: the plan adds none for host layers.
  const gpu::OffloadBudget b = h200_budget(c, 2 * m, 3, true);
  EXPECT_LE(b.gpu_fixed + gpu::kReserveBytes + p2.hbm_bytes + size_t(p2.tier_sizes.gpu_bytes), b.gpu_free);
  std::printf("[ plan ] fp8 2M: %d layers in HBM, %d on the host (%.1f GiB pinned)\n", c.n_layer - p2.host_layers,
              p2.host_layers, double(p2.tier_sizes.host_bytes) / double(kGiB));
  const std::string e3 = gpu::offload_plan_problem(c, {.on = true}, h200_budget(c, 3 * m, 3, true));
  if (e3.empty()) {
    const gpu::OffloadPlan p3 = gpu::plan_offload(c, {.on = true}, h200_budget(c, 3 * m, 3, true));
    std::printf("[ plan ] fp8 3M: %d layers in HBM, %d on the host (%.1f GiB pinned)\n", c.n_layer - p3.host_layers,
                p3.host_layers, double(p3.tier_sizes.host_bytes) / double(kGiB));
  } else {
    EXPECT_TRUE(test::contains(e3, "x fp8)")) << e3;
    std::printf("[ message ] fp8 3M: %s\n", e3.c_str());
  }
}

// The residual stream in host memory (KvOffloadOptions::host_residual): the budget the model
// gives plan_offload then has two 16K-token chunks of it on the GPU and the whole stream pinned.
gpu::OffloadBudget host_residual_budget(const ModelConfig& c, int64_t cap, bool fp8) {
  gpu::OffloadBudget b = h200_budget(c, cap, 3, fp8);
  const gpu::StageLayout sl = gpu::stage_layout(c, cap, fp8 ? gpu::KvCacheType::fp8 : gpu::KvCacheType::bf16, true,
                                                gpu::kDefaultChunk);
  b.gpu_fixed = sl.total + gpu::decode_ws_bytes(c, cap);
  b.gpu_residual = sl.x_bytes;
  b.host_fixed = gpu::PrefillResidual::host_bytes({.rows = cap, .n_embd = c.n_embd});
  return b;
}

TEST(KvOffloadPlan, HostResidualKeepsStagingFlat) {
  const ModelConfig c = gpu::geometry_config("llama3-8b");
  const int64_t k = 1024;
  const size_t two_chunks = 2 * size_t(gpu::kDefaultChunk) * size_t(c.n_embd) * 2;  // 256 MiB
  for (const int64_t cap : {256 * k, 512 * k, 1024 * k}) {
    const gpu::OffloadPlan p = gpu::plan_offload(c, {.on = true, .host_layers = 29}, host_residual_budget(c, cap, true));
    EXPECT_EQ(p.stage_residual_bytes, two_chunks) << cap;
    EXPECT_EQ(p.host_residual_bytes, size_t(cap) * size_t(c.n_embd) * 2) << cap;
    EXPECT_EQ(p.stage_kv_bytes, 2 * size_t(cap) * size_t(c.n_kv_head) * size_t(c.head_dim) * 2) << cap;
    std::printf("[ plan ] %s\n", gpu::offload_plan_summary(p).c_str());
  }
  // 3M fp8, automatic split: the GPU's 24 GiB of residual stream go back to HBM layers.
  const gpu::OffloadPlan on = gpu::plan_offload(c, {.on = true}, host_residual_budget(c, 3072 * k, true));
  const gpu::OffloadPlan off = gpu::plan_offload(c, {.on = true}, h200_budget(c, 3072 * k, 3, true));
  EXPECT_LT(on.host_layers, off.host_layers);
  std::printf("[ plan ] 3M fp8 auto: %d host layers with the residual stream in host memory, %d without\n",
              on.host_layers, off.host_layers);
  // A host that cannot pin the stream is named in the message.
  gpu::OffloadBudget tight = host_residual_budget(c, 3072 * k, true);
  tight.host_free = int64_t(20) << 30;
  const std::string e = gpu::offload_plan_problem(c, {.on = true, .host_layers = 29}, tight);
  EXPECT_TRUE(test::contains(e, "for the residual stream") && test::contains(e, "one layer's K/V in bf16")) << e;
}

// --kv-page-table: the hash map's tables are O(slots) (5 MiB a host layer) where the vector map's
// grow with T (32 MiB a host layer at 1M); auto keeps the vector map while it fits and takes the
// hash map when only that fits.
TEST(KvOffloadPlan, PageTableAutoTakesTheHashMapWhenMemoryIsTight) {
  const ModelConfig c = gpu::geometry_config("llama3-8b");
  const int64_t cap = int64_t(1) << 20;
  gpu::OffloadBudget b = h200_budget(c, cap, 3);
  const gpu::KvOffloadOptions vec{.on = true, .host_layers = 29, .page_table = gpu::PageTableChoice::vector};
  const gpu::KvOffloadOptions hash{.on = true, .host_layers = 29, .page_table = gpu::PageTableChoice::hash};
  const gpu::KvOffloadOptions automatic{.on = true, .host_layers = 29};
  const gpu::OffloadPlan pv = gpu::plan_offload(c, vec, b), ph = gpu::plan_offload(c, hash, b);
  EXPECT_EQ(pv.page_table, kv::PageTable::vector);
  EXPECT_EQ(ph.page_table, kv::PageTable::hash);
  EXPECT_EQ(ph.tier.keys_buckets, 65536);  // 4 x 16384 slots
  EXPECT_EQ(ph.tier.kv_buckets, 16384);
  const size_t per_layer_vec = size_t(pv.tier_sizes.gpu_layer_bytes), per_layer_hash = size_t(ph.tier_sizes.gpu_layer_bytes);
  // tables: vector 2 x 8 heads x 512K lines x 4 B = 32 MiB; hash 8 x (65536 + 16384) x 8 B = 5 MiB
  EXPECT_EQ(per_layer_vec - per_layer_hash, size_t(32 << 20) - size_t(5 << 20));  // hash_used fits miss_count's 256 B
  EXPECT_EQ(gpu::plan_offload(c, automatic, b).page_table, kv::PageTable::vector);  // room: the vector map
  // A GPU budget between the two needs: auto falls back to the hash map, vector is refused.
  b.gpu_free = b.gpu_fixed + gpu::kReserveBytes + pv.hbm_bytes + pv.stage_kv_bytes +
               (size_t(pv.tier_sizes.gpu_bytes) + size_t(ph.tier_sizes.gpu_bytes)) / 2;
  EXPECT_EQ(gpu::plan_offload(c, automatic, b).page_table, kv::PageTable::hash);
  EXPECT_NE(gpu::offload_plan_problem(c, vec, b), "");
  EXPECT_TRUE(test::contains(gpu::offload_plan_summary(gpu::plan_offload(c, automatic, b)), "hash-map page tables"));
  EXPECT_TRUE(test::contains(test::error_of([] { (void)gpu::parse_page_table("tree"); }), "auto, vector, hash"));
}

struct OffloadRun {
  std::vector<std::vector<float>> logits;  // per call: the last position's row
  gpu::GpuOffloadStats stats;
  int host_layers = 0;
};

// Prefill `parts` (one forward each), then decode `steps` (teacher-forced ids) with logits.
OffloadRun run_model(const ModelConfig& cfg, const gpu::KvOffloadOptions& off, const std::vector<std::vector<int32_t>>& parts,
        const std::vector<int32_t>& steps, gpu::KvCacheType kv = gpu::KvCacheType::bf16, int64_t chunk = 512) {
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 41, nullptr),
                        {.chunk = chunk, .attn = kHip, .kv_cache = kv, .kv_offload = off});
  int64_t cap = int64_t(steps.size());
  for (const auto& p : parts) cap += int64_t(p.size());
  g.reset(cap);
  OffloadRun r;
  std::vector<float> lg;
  for (const auto& p : parts) {
    g.forward(p, 1, &lg);
    r.logits.push_back(lg);
  }
  for (int32_t id : steps) {
    g.forward({&id, 1}, 1, &lg);
    r.logits.push_back(lg);
  }
  r.stats = g.offload_stats();
  r.host_layers = g.offload_plan() ? g.offload_plan()->host_layers : 0;
  return r;
}

void expect_identical(const OffloadRun& a, const OffloadRun& b, const std::string& what) {
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i)
    ASSERT_EQ(std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * sizeof(float)), 0)
        << what << ": logits of call " << i << " differ";
}

TEST(KvOffloadModel, HostLayersEqualHbmLayersBitForBit) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("llama3-8b:4");
  const std::vector<int32_t> prompt = random_ids(1500, cfg.vocab_size, 7), steps = random_ids(40, cfg.vocab_size, 8);
  const std::vector<std::vector<int32_t>> one{prompt};
  const std::vector<std::vector<int32_t>> two{{prompt.begin(), prompt.begin() + 1000}, {prompt.begin() + 1000, prompt.end()}};
  const OffloadRun hbm = run_model(cfg, {.on = true, .host_layers = 0}, one, steps);
  const OffloadRun all = run_model(cfg, {.on = true, .host_layers = 4}, one, steps);
  const OffloadRun split = run_model(cfg, {.on = true, .host_layers = 2}, one, steps);
  EXPECT_EQ(hbm.host_layers, 0);
  EXPECT_EQ(all.host_layers, 4);
  EXPECT_EQ(split.host_layers, 2);
  expect_identical(hbm, all, "all 4 layers on the host vs none");
  expect_identical(hbm, split, "2 layers on the host vs none");
  // Two prefill calls: the second reads the host layers' first rows back into the staging.
  const OffloadRun hbm2 = run_model(cfg, {.on = true, .host_layers = 0}, two, steps);
  const OffloadRun all2 = run_model(cfg, {.on = true, .host_layers = 4}, two, steps);
  expect_identical(hbm2, all2, "prefill in two calls, all on the host vs none");
  // The caches were read: refresh steps (the estimator's keys) and cached steps (K/V only).
  const gpu::GpuOffloadStats& s = all.stats;
  EXPECT_TRUE(s.on);
  EXPECT_EQ(s.refresh.steps + s.cached.steps, int64_t(steps.size()));
  EXPECT_GT(s.refresh.steps, 0);
  EXPECT_GT(s.cached.steps, 0);
  EXPECT_GT(s.refresh.keys.reads, 0u);
  EXPECT_EQ(s.cached.keys.reads, 0u);
  EXPECT_GT(s.cached.kv.reads, 0u);
  EXPECT_GT(s.cached.kv.hit_ratio(), 0.9) << "the K/V cache holds what cached steps re-read";
  std::printf("[ stats ] %lld refresh / %lld cached steps; K/V hits %.4f cached, %.4f refresh; keys %.4f\n",
              (long long)s.refresh.steps, (long long)s.cached.steps, s.cached.kv.hit_ratio(),
              s.refresh.kv.hit_ratio(), s.refresh.keys.hit_ratio());
}

// 2112 lines per head (a 4.1K-token sequence): the keys cache's LRU sort takes exactly 48 KiB of
// dynamic shared memory, past the default limit once the kernel's static part is added.
TEST(KvOffloadModel, UpdateSortOfTwoThousandSlots) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("llama3-8b:2");
  const std::vector<std::vector<int32_t>> prompt{random_ids(4096, cfg.vocab_size, 12)};
  const std::vector<int32_t> steps = random_ids(8, cfg.vocab_size, 13);
  expect_identical(run_model(cfg, {.on = true, .host_layers = 0}, prompt, steps),
                   run_model(cfg, {.on = true, .host_layers = 2}, prompt, steps), "4.1K tokens, host vs HBM");
}

TEST(KvOffloadModel, OnEqualsOff) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("llama3-8b:4");
  const std::vector<int32_t> steps = random_ids(24, cfg.vocab_size, 9);
  // One chunk (<= 512 tokens): the same launches in both prefill orders, bit for bit.
  const std::vector<std::vector<int32_t>> short_prompt{random_ids(480, cfg.vocab_size, 10)};
  expect_identical(run_model(cfg, {}, short_prompt, steps), run_model(cfg, {.on = true, .host_layers = 4}, short_prompt, steps),
                   "one-chunk prompt, offload off vs all layers on the host");
  // Several chunks: within the bf16 tolerance, same argmax.
  const std::vector<std::vector<int32_t>> long_prompt{random_ids(1500, cfg.vocab_size, 11)};
  const OffloadRun off = run_model(cfg, {}, long_prompt, steps), on = run_model(cfg, {.on = true, .host_layers = 4}, long_prompt, steps);
  double worst = 0;
  int exact = 0;
  for (size_t i = 0; i < off.logits.size(); ++i) {
    const test::LogitDiff d = test::compare_row(off.logits[i].data(), on.logits[i].data(), cfg.vocab_size);
    EXPECT_LE(d.max_abs, d.tol()) << "call " << i;
    if (d.margin_a > d.tol()) {
      EXPECT_EQ(d.argmax_a, d.argmax_b) << "call " << i;
    }
    worst = std::max(worst, d.max_abs / std::max(d.scale, 1e-30));
    exact += d.max_abs == 0;
  }
  std::printf("[ on vs off ] 1500-token prompt: %d of %zu calls bit-identical, worst %.2e of max |logit|\n", exact,
              off.logits.size(), worst);
}

TEST(KvOffloadModel, RefusedUpFront) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("llama3-8b:2");  // layer 1 decodes sparse (dense_layers=1)
  auto make = [&](const gpu::GpuOptions& o) {
    return test::error_of([&] { gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 1, nullptr), o); });
  };
  EXPECT_TRUE(test::contains(make({.attn = "dense", .kv_offload = {.on = true}}), "--attn hip"));
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 1, nullptr), {.attn = kHip, .kv_offload = {.on = true}});
  const std::string e = g.kv_fit_problem(int64_t(1) << 30);  // 1G tokens: 128 GiB per layer
  EXPECT_TRUE(test::contains(e, "GPU memory") && test::contains(e, "host memory")) << e;
  EXPECT_TRUE(test::contains(test::error_of([&] { g.reset(int64_t(1) << 30); }), "host memory"));
  const int64_t caps[2] = {100, 100};
  EXPECT_TRUE(test::contains(test::error_of([&] { g.reserve_sequences(caps); }), "one sequence"));
}

// The prefill's residual stream in pinned host memory, through two chunk buffers of 128 tokens
// (a 1500-token prompt: 12 chunks, each buffer reused 6 times per layer, copies on a side stream):
// bit-identical to the same layer-major prefill with the stream on the GPU, with 0 or all layers on
// the host, in one prefill call or two, bf16 and fp8; the GPU staging then holds two chunks only.
TEST(KvOffloadModel, HostResidualChunkedStagingBitForBit) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("llama3-8b:4");
  const int64_t chunk = 128;
  const std::vector<int32_t> prompt = random_ids(1500, cfg.vocab_size, 27), steps = random_ids(16, cfg.vocab_size, 28);
  const std::vector<std::vector<int32_t>> one{prompt};
  const std::vector<std::vector<int32_t>> two{{prompt.begin(), prompt.begin() + 700}, {prompt.begin() + 700, prompt.end()}};
  const auto bf16 = gpu::KvCacheType::bf16, fp8 = gpu::KvCacheType::fp8;
  for (const auto kv : {bf16, fp8})
    for (int host : {0, 4})
      for (const auto* parts : {&one, &two}) {
        const std::string what = std::string(kv == fp8 ? "fp8" : "bf16") + ", " + std::to_string(host) +
                                 " host layers, " + (parts == &one ? "one prefill call" : "two prefill calls");
        const OffloadRun gpu_x = run_model(cfg, {.on = true, .host_layers = host, .host_residual = false}, *parts,
                                           steps, kv, chunk);
        const OffloadRun host_x = run_model(cfg, {.on = true, .host_layers = host}, *parts, steps, kv, chunk);
        expect_identical(gpu_x, host_x, "residual stream on the GPU vs in host memory, " + what);
        EXPECT_EQ(gpu_x.stats.residual_host_bytes, 0u) << what;
        EXPECT_EQ(host_x.stats.residual_host_bytes, size_t(prompt.size() + steps.size() + 127) / 128 * 128 *
                                                        size_t(cfg.n_embd) * 2)
            << what << ": the whole sequence's stream (rows rounded to pages) is pinned";
        // the staging's residual part: whole prompt [rows, E] vs two chunks [2, 128, E]
        EXPECT_EQ(gpu_x.stats.stage_bytes - host_x.stats.stage_bytes,
                  gpu::align_up(host_x.stats.residual_host_bytes) - gpu::align_up(size_t(2 * chunk * cfg.n_embd * 2)))
            << what;
      }
  // fp8 offload off (layer-major too, stream on the GPU) == all layers on the host with the stream
  // in host memory.
  expect_identical(run_model(cfg, {}, one, steps, fp8, chunk), run_model(cfg, {.on = true, .host_layers = 4}, one, steps, fp8, chunk),
                   "fp8, offload off vs all on the host with the residual stream in host memory");
}

// The fp8 cache: e4m3 K/V in HBM and host memory alike, the estimator and sparse decode reading the
// codes through the caches. Both sides prefill layer-major, so every call is bit-identical.
TEST(KvOffloadModel, Fp8HostLayersAndOffloadOffBitForBit) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("llama3-8b:4");
  const auto fp8 = gpu::KvCacheType::fp8;
  const std::vector<int32_t> prompt = random_ids(1500, cfg.vocab_size, 17), steps = random_ids(40, cfg.vocab_size, 18);
  const std::vector<std::vector<int32_t>> one{prompt};
  const std::vector<std::vector<int32_t>> two{{prompt.begin(), prompt.begin() + 1000}, {prompt.begin() + 1000, prompt.end()}};
  const OffloadRun off = run_model(cfg, {}, one, steps, fp8);
  const OffloadRun hbm = run_model(cfg, {.on = true, .host_layers = 0}, one, steps, fp8);
  const OffloadRun all = run_model(cfg, {.on = true, .host_layers = 4}, one, steps, fp8);
  const OffloadRun split = run_model(cfg, {.on = true, .host_layers = 2}, one, steps, fp8);
  EXPECT_EQ(all.host_layers, 4);
  EXPECT_EQ(split.host_layers, 2);
  expect_identical(off, all, "fp8: offload off vs all 4 layers on the host");
  expect_identical(hbm, all, "fp8: all 4 layers on the host vs none");
  expect_identical(hbm, split, "fp8: 2 layers on the host vs none");
  // Two prefill calls: the second dequantizes the first's codes from host memory into the staging.
  expect_identical(run_model(cfg, {}, two, steps, fp8), run_model(cfg, {.on = true, .host_layers = 4}, two, steps, fp8),
                   "fp8: prefill in two calls, offload off vs all on the host");
  // fp8 is not bf16: the logits differ from the bf16 cache's, but stay close (same argmax mostly).
  const OffloadRun bf = run_model(cfg, {.on = true, .host_layers = 4}, one, steps);
  int same_argmax = 0;
  for (size_t i = 0; i < bf.logits.size(); ++i) {
    const test::LogitDiff d = test::compare_row(bf.logits[i].data(), all.logits[i].data(), cfg.vocab_size);
    same_argmax += d.argmax_a == d.argmax_b;
  }
  const gpu::GpuOffloadStats& s = all.stats;
  EXPECT_GT(s.refresh.keys.reads, 0u);
  EXPECT_GT(s.cached.kv.reads, 0u);
  EXPECT_GT(s.cached.kv.hit_ratio(), 0.9);
  std::printf("[ fp8 ] %lld refresh / %lld cached steps; K/V hits %.4f cached; argmax as with bf16 in %d of %zu calls\n",
              (long long)s.refresh.steps, (long long)s.cached.steps, s.cached.kv.hit_ratio(), same_argmax,
              bf.logits.size());
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU
