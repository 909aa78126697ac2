// http_server.cpp: the routes of `longctx serve` (cpp-httplib), the SSE streaming of tokens from
// a request's Channel, and the process lifetime: SIGTERM/SIGINT drain, then stop.
#include <httplib.h>
#include <semaphore.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "server/channel.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/server.h"
#include "util/error.h"

namespace longctx::server {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// How often a waiting HTTP thread wakes to look at its channel (also bounds how late it notices
// a shutdown).
constexpr auto kPoll = 200ms;
// HTTP threads beyond one per open or queued request (health, metrics, tokenize).
constexpr int kSpareHttpThreads = 8;
// How long, after the engine is idle on SIGTERM, the last responses may take to be written.
constexpr auto kFlushGrace = 5s;
constexpr const char* kJson = "application/json";

// The signal that asked the server to stop (0: none), and the semaphore its handler posts.
volatile sig_atomic_t g_signal = 0;
sem_t g_signal_sem;
extern "C" void on_signal(int sig) {
  g_signal = sig;
  sem_post(&g_signal_sem);  // async-signal-safe
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_body(e)), kJson);
}

ApiError engine_error(int status, const std::string& msg) {
  return {status, msg, status >= 500 ? "server_error" : "invalid_request_error", "", ""};
}

std::string default_model_id(const LoadOptions& lo) {
  if (!lo.random_weights.empty()) return "random-" + lo.random_weights;
  const std::string path = lo.model_path.empty() ? default_model_path() : lo.model_path;
  std::filesystem::path p(path);
  if (p.has_filename() && std::filesystem::is_regular_file(p)) return p.stem().string();
  return p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
}

// Everything the routes share.
struct App {
  App(std::unique_ptr<Engine> e, std::string model_id, std::string attn)
      : eng(std::move(e)), ctx{*eng, std::move(model_id), std::move(attn)} {}
  std::unique_ptr<Engine> eng;
  ApiContext ctx;
  std::unique_ptr<Scheduler> sched;
  HttpCounters http;
  std::atomic<int64_t> next_id{1};
  std::atomic<int> in_flight{0};  // completion requests being answered
};

// Counts a completion request as in flight for its handler (and its stream) .
struct InFlight {
  App& app;
  explicit InFlight(App& a) : app(a) { ++app.in_flight; }
  ~InFlight() { --app.in_flight; }
};

// Answers a finished non-streaming request from its channel.
void answer_whole(App& app, const ApiRequest& r, Channel& ch, httplib::Response& res, const std::string& id) {
  Completion c;
  c.prompt_tokens = int64_t(r.seq.prompt.size());
  for (;;) {
    for (SequenceEvent& e : ch.take(kPoll)) {
      c.text += e.text;
      if (e.token >= 0) {
        c.tokens.push_back(e.token);
        c.logprobs.push_back(e.logprob);
      }
      if (e.finished) {
        c.finish_reason = finish_reason(e.stop_reason);
        res.set_content(dump(response_body(r, c, id, unix_time(), app.ctx)), kJson);
        return;
      }
    }
    if (ch.error_status()) return send_error(res, engine_error(ch.error_status(), ch.error()));
  }
}

// Streams a request's events as server-sent events.
void answer_stream(App& app, const ApiRequest& r, std::shared_ptr<Channel> ch, httplib::Response& res,
                   const std::string& id) {
  struct State {
    bool started = false;
    int64_t completion_tokens = 0;
  };
  auto st = std::make_shared<State>();
  auto inflight = std::make_shared<InFlight>(app);
  const int64_t created = unix_time();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&app, r, ch, st, id, created, inflight](size_t, httplib::DataSink& sink) {
        auto send = [&](const json& j) {
          const std::string line = "data: " + dump(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        auto gone = [&] {
          ch->cancel();
          app.sched->poke();
          return false;
        };
        if (!st->started) {  // chat: the first chunk names the role
          st->started = true;
          if (r.endpoint == Endpoint::chat) {
            json first = chunk_body(r, "", "", nullptr, id, created, app.ctx);
            first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
            if (!send(first)) return gone();
          }
        }
        for (const SequenceEvent& e : ch->take(kPoll)) {
          st->completion_tokens = e.completion_tokens;
          const std::string fin = e.finished ? finish_reason(e.stop_reason) : "";
          if (!e.text.empty() || !fin.empty() || (r.logprobs && e.token >= 0))
            if (!send(chunk_body(r, e.text, fin, &e, id, created, app.ctx))) return gone();
          if (e.finished) {
            if (r.include_usage && !send(usage_chunk(r, e.prompt_tokens, e.completion_tokens, id, created, app.ctx)))
              return gone();
            static const std::string kDone = "data: [DONE]\n\n";
            if (!sink.write(kDone.data(), kDone.size())) return gone();
            sink.done();
            return true;
          }
        }
        if (const int status = ch->error_status()) {  // the engine failed after admission
          send(error_body(engine_error(status, ch->error())));
          sink.done();
          return true;
        }
        return true;
      },
      [ch, &app](bool) {  // the response is over (or the client went away): free the sequence
        ch->cancel();
        app.sched->poke();
      });
}

void completion_route(App& app, Endpoint ep, const httplib::Request& req, httplib::Response& res) {
  InFlight fl(app);
  ApiRequest r;
  try {
    r = parse_request(ep, req.body, app.ctx);
  } catch (const ApiError& e) {
    return send_error(res, e);
  } catch (const Error& e) {  // from the tokenizer (e.g. a model without a chat template)
    return send_error(res, engine_error(400, e.what()));
  }
  auto ch = std::make_shared<Channel>();
  if (const std::string busy = app.sched->submit(r.seq, ch); !busy.empty())
    return send_error(res, engine_error(503, busy));
  while (!ch->wait_admitted(kPoll)) {
  }
  if (ch->error_status()) return send_error(res, engine_error(ch->error_status(), ch->error()));
  const std::string id = (ep == Endpoint::chat ? "chatcmpl-" : "cmpl-") + std::to_string(app.next_id++);
  if (r.stream) return answer_stream(app, r, ch, res, id);
  answer_whole(app, r, *ch, res, id);
  ch->cancel();  // finished already (a no-op) unless the engine failed
}

void json_route(httplib::Response& res, const std::function<json()>& f) {
  try {
    res.set_content(dump(f()), kJson);
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, engine_error(400, e.what()));
  }
}

void add_routes(httplib::Server& svr, App& app) {
  svr.Post("/v1/completions", [&](const httplib::Request& q, httplib::Response& s) {
    completion_route(app, Endpoint::completions, q, s);
  });
  svr.Post("/v1/chat/completions", [&](const httplib::Request& q, httplib::Response& s) {
    completion_route(app, Endpoint::chat, q, s);
  });
  svr.Get("/v1/models", [&](const httplib::Request&, httplib::Response& s) {
    const json m = {{"id", app.ctx.model_id},     {"object", "model"},
                    {"created", unix_time()},      {"owned_by", "longctx"},
                    {"max_model_len", app.eng->max_context()}};
    s.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), kJson);
  });
  svr.Get("/health", [&](const httplib::Request&, httplib::Response& s) {
    const bool draining = app.sched->stats().draining;
    s.status = draining ? 503 : 200;
    s.set_content(dump({{"status", draining ? "draining" : "ok"}}), kJson);
  });
  svr.Get("/metrics", [&](const httplib::Request&, httplib::Response& s) {
    s.set_content(prometheus_text(app.sched->stats(), app.http.snapshot(), app.ctx.model_id),
                  "text/plain; version=0.0.4");
  });
  svr.Post("/tokenize", [&](const httplib::Request& q, httplib::Response& s) {
    json_route(s, [&] { return tokenize_response(q.body, app.ctx); });
  });
  svr.Post("/detokenize", [&](const httplib::Request& q, httplib::Response& s) {
    json_route(s, [&] { return detokenize_response(q.body, app.ctx); });
  });
  // Errors httplib makes itself (404 route, 413 body too large, 400 bad HTTP) get an OpenAI body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([&](const httplib::Request& q, httplib::Response& s) {
    if (s.body.empty()) {
      std::string msg = fmt::format("HTTP {} for {} {}", s.status, q.method, q.path);
      if (s.status == 404) msg = fmt::format("no route {} {}", q.method, q.path);
      if (s.status == 413) msg = "the request body is too large";
      send_error(s, engine_error(s.status, msg));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([&](const httplib::Request&, httplib::Response& s, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(s, engine_error(500, "internal error: " + what));
  });
  svr.set_logger([&](const httplib::Request&, const httplib::Response& s) { app.http.count(s.status); });
}

}  // namespace

int run_server(const ServerOptions& o) {
  // SIGTERM/SIGINT post a semaphore that one waiting thread takes (a handler, not a blocked mask:
  // OpenBLAS starts its threads before main); a client hanging up must not kill the process.
  sem_init(&g_signal_sem, 0, 0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  App app(Engine::load(o.load), o.model_id.empty() ? default_model_id(o.load) : o.model_id, o.load.attn);
  SchedulerOptions so = o.scheduler;
  if (so.batch.kv_tokens <= 0) so.batch.kv_tokens = o.kv_contexts * app.eng->max_context();
  app.sched = std::make_unique<Scheduler>(*app.eng, so);

  httplib::Server svr;
  const int threads = o.http_threads > 0 ? o.http_threads
                                         : o.scheduler.batch.max_sequences + o.scheduler.max_queue + kSpareHttpThreads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  svr.set_payload_max_length(size_t(o.max_body_bytes));
  add_routes(svr, app);
  if (!svr.bind_to_port(o.host, o.port))
    fail("cannot listen on {}:{} (address in use, or not an address of this machine)", o.host, o.port);

  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    while (sem_wait(&g_signal_sem) != 0) {  // EINTR: wait again
    }
    const int sig = g_signal;
    if (sig == 0) return;  // the server stopped on its own
    signalled = true;
    std::fprintf(stderr, "longctx: serve: %s: draining (no new requests; running ones finish)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT");
    app.sched->drain();
    const auto until = Clock::now() + std::chrono::duration<double>(o.drain_timeout_s);
    while (!app.sched->idle() && Clock::now() < until) std::this_thread::sleep_for(50ms);
    const auto flush_until = Clock::now() + kFlushGrace;
    while (app.in_flight > 0 && Clock::now() < flush_until) std::this_thread::sleep_for(20ms);
    svr.stop();
  });
  std::fprintf(stderr, "longctx: serve: %s (%s, attn %s, context %lld) on http://%s:%d\n", app.ctx.model_id.c_str(),
               app.eng->device().c_str(), o.load.attn.c_str(), (long long)app.eng->max_context(), o.host.c_str(), o.port);
  const bool ok = svr.listen_after_bind();
  if (!signalled) sem_post(&g_signal_sem);
  waiter.join();
  app.sched.reset();  // cancels whatever is left (after a drain timeout)
  if (!ok && !signalled) fail("the HTTP server on {}:{} stopped unexpectedly", o.host, o.port);
  std::fprintf(stderr, "longctx: serve: stopped\n");
  return 0;
}

}  // namespace longctx::server
