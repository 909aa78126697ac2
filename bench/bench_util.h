// bench_util.h (bench): what every CUDA benchmark binary needs, once: comma lists of lengths,
// median CUDA-event timing (of a call, and of a step replayed from a CUDA graph), and the JSON
// record (device, SMs, date, a "runs" array) written to stdout and optionally a file.
// Header-only; include from .cu/.cpp files built with CUDA.
//   bench::JsonRecord js(dev, "\"inputs\": \"random\"");  js.add(row);  js.finish(json_path);
//   const double ms = bench::graph_ms([&](cuda::Stream s) { attention_decode(d, s); }, 100);
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace longctx::bench {

// "131072,524288" -> {131072, 524288}
inline std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  const std::string str(s);
  size_t pos = 0;
  while (pos < str.size()) {
    size_t e = str.find(',', pos);
    if (e == std::string::npos) e = str.size();
    if (e > pos) v.push_back(std::atoll(str.substr(pos, e - pos).c_str()));
    pos = e + 1;
  }
  return v;
}

// Median time in ms of `reps` runs of fn after `warmup` runs, one event pair per run.
inline double time_ms(const std::function<void()>& fn, int warmup, int reps, cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmup; ++i) fn();
  LC_CUDA_CHECK(cudaDeviceSynchronize(), "bench warmup");
  std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * reps));
  for (auto& e : ev) LC_CUDA_CHECK(cudaEventCreate(&e), "event create");
  for (int i = 0; i < reps; ++i) {
    LC_CUDA_CHECK(cudaEventRecord(ev[2 * i], stream), "event record");
    fn();
    LC_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream), "event record");
  }
  LC_CUDA_CHECK(cudaDeviceSynchronize(), "bench timed runs");
  std::vector<double> t(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    LC_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "event elapsed");
    t[size_t(i)] = ms;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return t[size_t(reps) / 2];
}

// A step as the engine runs a decode step: its launches issued on the stream it is given.
using Step = std::function<void(cuda::Stream)>;

// Median ms of a step launched eagerly and replayed from a CUDA graph (the difference: the launch
// gaps between its kernels).
struct Timing {
  double eager_ms = 0, graph_ms = 0;
};
// On a stream of its own: one eager run first (kernels' one-time attributes must be set before a
// capture), then, with `eager`, 3 warm-up and `reps` timed eager runs, then the capture, 3 warm-up
// and `reps` timed replays. eager_ms stays 0 without `eager`.
inline Timing time_step(const Step& step, int reps, bool eager = true) {
  cuda::Stream st = cuda::stream_create();
  step(st);
  cuda::stream_sync(st);
  Timing t;
  if (eager) t.eager_ms = time_ms([&] { step(st); }, 3, reps, static_cast<cudaStream_t>(st));
  cuda::CudaGraph graph;
  graph.begin_capture(st);
  step(st);
  graph.end_capture(st);
  t.graph_ms = time_ms([&] { graph.launch(st); }, 3, reps, static_cast<cudaStream_t>(st));
  cuda::stream_destroy(st);
  return t;
}
// The replay alone: median ms of `reps` graph launches of step.
inline double graph_ms(const Step& step, int reps) { return time_step(step, reps, false).graph_ms; }

// The JSON every benchmark writes: {"device", "sms", "date", <extra fields>, "runs": [rows]}.
class JsonRecord {
 public:
  // extra: more top-level fields, already formatted ("\"shape\": {...}"), or empty.
  JsonRecord(const cuda::DeviceInfo& dev, const std::string& extra) {
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    js_ = "{\n  \"device\": \"" + dev.name + "\", \"sms\": " + std::to_string(dev.num_sms) + ", \"date\": \"" + date +
          "\",\n";
    if (!extra.empty()) js_ += "  " + extra + ",\n";
    js_ += "  \"runs\": [\n";
  }
  void add(const std::string& row) {
    js_ += first_ ? "    " : ",\n    ";
    js_ += row;
    first_ = false;
  }
  // Closes the record, prints it to stdout and writes it to path (if not null).
  void finish(const char* path) {
    js_ += "\n  ]\n}\n";
    std::fputs(js_.c_str(), stdout);
    if (path) {
      FILE* f = std::fopen(path, "w");
      if (f) std::fputs(js_.c_str(), f), std::fclose(f);
    }
  }

 private:
  std::string js_;
  bool first_ = true;
};

}  // namespace longctx::bench
