// qwenrt serve: the OpenAI-compatible HTTP server (src/server) over the scheduler.
// SIGTERM/SIGINT: stop taking requests, let running ones finish up to --drain-timeout (a
// second signal cuts it short), then end the rest with an error event and close every
// connection, also one a slow client holds.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/json.h"
#include "core/random_bits.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"
#ifdef QWENRT_HAVE_HTTP
#include "server/http_connection.h"
#include "server/http_server.h"
#endif

namespace qwenrt::cli {
namespace {

#ifdef QWENRT_HAVE_HTTP
// The responses' system_fingerprint: what the answers depend on besides the request and its
// seed, hashed: this build's version, the device (its name: "cuda:0 (NVIDIA H200)", "cpu")
// and the activation dtype, and the model's config.json. A client that sees it change knows
// a seeded request may answer differently.
std::string system_fingerprint(const std::string& model_dir, const std::string& device, const std::string& dtype) {
  std::string what = std::string("qwenrt ") + QWENRT_VERSION + '\0' + device + '\0' + dtype + '\0';
  std::ifstream config(std::filesystem::path(model_dir) / "config.json", std::ios::binary);
  what.append(std::istreambuf_iterator<char>(config), std::istreambuf_iterator<char>());
  uint64_t hash = splitmix64(what.size());
  for (unsigned char c : what) hash = splitmix64(hash ^ c);
  char text[24];
  std::snprintf(text, sizeof(text), "fp_%016llx", static_cast<unsigned long long>(hash));
  return text;
}
#endif

struct ServeArgs {
  ModelArgs model;
  std::string chat_template;  // a file replacing the folder's template
  std::string default_template_kwargs;  // JSON object
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key, api_key_file;
  int max_seqs = 0;          // 0: 256 on a GPU, 16 on the CPU
  int max_batch_tokens = 0;  // 0: 1024 on a GPU, 512 on the CPU (at least max_seqs)
  double kv_memory_fraction = 0.9;
  int max_queue = 1024;
  std::string served_model_name;
  int max_n = 8, max_prompts = 64, max_stop = 32, max_stop_bytes = 256, max_logprobs = 20;
  double max_body_mb = 4;
  int max_connections = 1024;
  int read_timeout = 60, write_timeout = 30, drain_timeout = 30, keep_alive_timeout = 5;
  std::vector<std::string> allowed_hosts;
  int heartbeat_ms = 0, sse_keepalive_ms = 15000;
  std::string client_check = "socket";
  std::vector<std::string> cors_origins;
  bool no_access_log = false;
  bool prompt_tokens_details = false;
  int log_stats_interval = 10;  // seconds; 0: none
  bool api_key_given = false;
};

// The key as a client sends it: whitespace around it (a file's or a variable's newline, a
// secret stored with one) dropped, as every source is read alike. A key that is empty then
// would serve everyone, and one with a space or control character inside is no bearer
// token (RFC 6750's have neither, and clients trim or refuse them): both are refused at start.
std::string checked_key(std::string key, const std::string& source, const char* empty_hint = "") {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!key.empty() && blank(key.back())) key.pop_back();
  size_t start = 0;
  while (start < key.size() && blank(key[start])) ++start;
  key.erase(0, start);
  if (key.empty()) throw Error(ErrorCategory::kInvalidArgument, source + " is empty" + empty_hint);
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte == 0x7f) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "the API key of " + source + " has a space or a control character inside, which a bearer "
                  "token cannot have");
    }
  }
  return key;
}

// Its first line only: a terminal or a pipe (/dev/stdin) ends the key with Enter, not at its end.
std::string read_key_file(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw Error(ErrorCategory::kIo, "--api-key-file " + path + ": is a folder, not a file");
  }
  std::ifstream in(path);
  if (!in) throw Error(ErrorCategory::kIo, "--api-key-file " + path + ": cannot read it");
  constexpr size_t kMaxKeyBytes = 64 * 1024;
  std::string line;
  for (char c; line.size() <= kMaxKeyBytes && in.get(c) && c != '\n';) line += c;
  if (line.size() > kMaxKeyBytes) {
    throw Error(ErrorCategory::kInvalidArgument, "--api-key-file " + path + ": its first line is past 64 KiB");
  }
  return checked_key(line, "--api-key-file " + path);
}

// Stops the process on SIGTERM/SIGINT until stop(): while the server starts, there is
// nothing to drain and loading is not worth waiting for.
class StartWatch {
 public:
  explicit StartWatch(const sigset_t& signals)
      : signals_(signals), thread_([this] {
          const timespec tick{0, 50'000'000};
          while (starting_.load()) {
            const int number = sigtimedwait(&signals_, nullptr, &tick);
            if (number > 0) {
              // write(2), not stdio: the main thread may hold stderr's lock.
              char line[96];
              const int length =
                  std::snprintf(line, sizeof(line), "signal %d during start-up: stopping, nothing served\n", number);
              if (::write(STDERR_FILENO, line, static_cast<size_t>(length)) < 0) {
                // nothing more to say
              }
              std::_Exit(kExitOk);
            }
          }
        }) {}
  ~StartWatch() { stop(); }
  StartWatch(const StartWatch&) = delete;
  StartWatch& operator=(const StartWatch&) = delete;
  void stop() {
    starting_ = false;
    if (thread_.joinable()) thread_.join();
  }

 private:
  sigset_t signals_;
  std::atomic<bool> starting_{true};
  std::thread thread_;
};

int run_serve(const ServeArgs& args) {
#ifndef QWENRT_HAVE_HTTP
  (void)args;
  throw Error(ErrorCategory::kUnsupported, "this build has no HTTP server (cpp-httplib was not found at configure time)");
#else
  // The key: --api-key or --api-key-file (one of them), else QWENRT_API_KEY.
  std::string api_key;
  if (args.api_key_given) {
    api_key = checked_key(args.api_key, "--api-key");
  } else if (!args.api_key_file.empty()) {
    api_key = read_key_file(args.api_key_file);
  } else if (const char* env = std::getenv("QWENRT_API_KEY"); env != nullptr) {
    api_key = checked_key(env, "QWENRT_API_KEY", " (unset it to serve without a key)");
  }
  server::bound_malloc_retention();
  // Signals go to the waiting thread below only: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a vanished client is a failed write, not a signal
  // A signal while starting (loading can take minutes) stops the start at once: nothing is
  // served yet, so nothing drains. The watch ends once the address is bound.
  StartWatch start_watch(signals);

  ModelArgs model_args = args.model;
  if (model_args.device == "auto") model_args.device = gpu_backend_available() ? "cuda" : "cpu";
  const bool gpu = model_args.device != "cpu";
  EngineOptions options = engine_options(model_args);
  options.max_seqs = args.max_seqs > 0 ? args.max_seqs : (gpu ? 256 : 16);
  // A pass takes a token of every running sequence: --max-batch-tokens below the sequences
  // is refused when both are given, and lowers the default sequence count when only it is.
  if (args.max_batch_tokens > 0 && args.max_batch_tokens < options.max_seqs) {
    if (args.max_seqs > 0) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "--max-batch-tokens " + std::to_string(args.max_batch_tokens) + " is below --max-seqs " +
                      std::to_string(options.max_seqs) +
                      " (a pass takes a token of every running sequence): raise it, or lower --max-seqs");
    }
    std::fprintf(stderr, "--max-batch-tokens %d: at most %d sequences per step (the default is %d)\n",
                 args.max_batch_tokens, args.max_batch_tokens, options.max_seqs);
    options.max_seqs = args.max_batch_tokens;
  }
  options.max_batch_tokens = std::max(args.max_batch_tokens > 0 ? args.max_batch_tokens : (gpu ? 1024 : 512), options.max_seqs);
  if (args.model.kv_cache_gb == 0) {
    if (gpu) {
      options.kv_memory_fraction = args.kv_memory_fraction;
    } else {
      options.kv_cache_tokens = 65536;
    }
  }
  nlohmann::ordered_json default_template_kwargs = nlohmann::ordered_json::object();
  if (!args.default_template_kwargs.empty()) {
    default_template_kwargs = parse_ordered_json(args.default_template_kwargs, "--default-chat-template-kwargs",
                                                 {ErrorCategory::kInvalidArgument});
    if (!default_template_kwargs.is_object()) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "--default-chat-template-kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}' (got " +
                      args.default_template_kwargs + ")");
    }
  }
  // The address, the tokenizer and the template first: a mistake there is told before the
  // weights load.
  if (std::string why; !server::can_listen(args.host, args.port, why)) {
    throw Error(ErrorCategory::kIo, "cannot listen on " + args.host + ":" + std::to_string(args.port) + ": " + why);
  }
  const std::string& tokenizer_dir = args.model.tokenizer_folder();
  Tokenizer tokenizer = Tokenizer::load(tokenizer_dir);
  std::unique_ptr<ChatTemplate> chat_template;
  bool chat_template_failed = false;
  if (!args.chat_template.empty()) {
    chat_template = std::make_unique<ChatTemplate>(ChatTemplate::load(tokenizer_dir, args.chat_template));
  } else {
    try {
      if (auto loaded = ChatTemplate::load_if_present(tokenizer_dir)) {
        chat_template = std::make_unique<ChatTemplate>(std::move(*loaded));
      } else {
        std::fprintf(stderr,
                     "no chat template in %s (no chat_template.jinja, no chat_template in tokenizer_config.json): "
                     "/v1/chat/completions is refused; --chat-template FILE gives one\n",
                     printable_line(tokenizer_dir).c_str());
      }
    } catch (const Error& error) {
      // The folder has a template (its text or its file) that failed to load.
      chat_template_failed = true;
      std::fprintf(stderr, "the chat template failed to load (%s): /v1/chat/completions is refused\n",
                   printable_line(error.what()).c_str());
    }
  }
  std::fprintf(stderr, "loading %s on %s...\n", args.model.model_dir.c_str(), model_args.device.c_str());
  Engine engine(args.model.model_dir, options);

  server::Metrics metrics;
  server::EngineServiceOptions service_options;
  service_options.max_requests = options.max_seqs + args.max_queue;
  server::EngineService service(engine, tokenizer, metrics, service_options);
  server::ServerOptions server_options;
  server_options.host = args.host;
  server_options.port = args.port;
  server_options.api_key = api_key;
  server_options.max_body_bytes = static_cast<size_t>(args.max_body_mb * (1 << 20));
  server_options.max_connections = args.max_connections;
  server_options.read_timeout_s = args.read_timeout;
  server_options.write_timeout_s = args.write_timeout;
  server_options.heartbeat_ms = args.heartbeat_ms;
  server_options.sse_keepalive_ms = args.sse_keepalive_ms;
  server_options.find_sockets = args.client_check == "socket";
  server_options.cors_origins = args.cors_origins;
  server_options.keep_alive_s = args.keep_alive_timeout;
  server_options.allowed_hosts = args.allowed_hosts;
  server_options.access_log = !args.no_access_log;
  server_options.system_fingerprint = system_fingerprint(args.model.model_dir, engine.backend().device_info().name,
                                                         dtype_name(engine.backend().activation_dtype()));
  server::RequestLimits& limits = server_options.limits;
  limits.max_n = args.max_n;
  limits.max_prompts = args.max_prompts;
  limits.max_stop = args.max_stop;
  limits.max_stop_bytes = args.max_stop_bytes;
  limits.max_logprobs = args.max_logprobs;
  limits.prompt_tokens_details = args.prompt_tokens_details;
  // One sequence can hold at most the whole pool: a smaller pool than --max-context is the
  // context a request may use (else it would end early with "length").
  const int64_t pool_tokens = engine.kv_pool_tokens();
  limits.max_context = static_cast<int>(std::min<int64_t>(engine.max_context(), pool_tokens));
  if (pool_tokens < engine.max_context()) {
    std::fprintf(stderr, "the KV pool holds %lld tokens, fewer than the context of %d: requests are limited to %lld\n",
                 static_cast<long long>(pool_tokens), engine.max_context(), static_cast<long long>(pool_tokens));
  }
  limits.vocab_size = engine.config().vocab_size;
  limits.served_model_name = args.served_model_name.empty()
                                 ? std::filesystem::path(args.model.model_dir).lexically_normal().filename().string()
                                 : args.served_model_name;
  if (limits.served_model_name.empty()) limits.served_model_name = args.model.model_dir;
  server::ModelText model_text{&tokenizer, chat_template.get(), &engine.config(), default_template_kwargs,
                               chat_template_failed};
  server::HttpServer http(service, model_text, server_options, metrics);
  if (!http.bind()) {
    throw Error(ErrorCategory::kIo, "cannot listen on " + args.host + ":" + std::to_string(args.port) +
                                        " (in use, or not an address of this machine)");
  }
  start_watch.stop();
  if (args.model.memory_report) print_memory_report(engine);
  http.set_ready(true);

  // Whether the line that says the server is up was written: a signal before it (the
  // connection threads still starting) stops the start as one during loading does.
  std::mutex up_mutex;
  bool up = false, stopped_before_up = false;
  std::thread waiter([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    {
      std::lock_guard<std::mutex> lock(up_mutex);
      stopped_before_up = !up;
      if (stopped_before_up) {
        std::fprintf(stderr, "signal %d during start-up: stopping, nothing served\n", signal_number);
      } else {
        std::fprintf(stderr, "signal %d: draining (up to %d s)\n", signal_number, args.drain_timeout);
      }
    }
    http.begin_drain();
    const auto first = std::chrono::steady_clock::now();
    const auto deadline = first + std::chrono::seconds(args.drain_timeout);
    const timespec tick{0, 20'000'000};
    while (service.active_requests() > 0 && std::chrono::steady_clock::now() < deadline) {
      // A second signal ends the drain at once (an operator's second Ctrl-C); one within a
      // second of the first is taken for the same one, passed on by a wrapper (npm, make)
      // to a process the terminal already signalled.
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        if (std::chrono::steady_clock::now() - first >= std::chrono::seconds(1)) {
          std::fprintf(stderr, "second signal: ending the running requests now\n");
          break;
        }
        std::fprintf(stderr, "signal again within a second of the first: taken for the same one (another, a "
                             "second or more after the first, ends the running requests now)\n");
      }
    }
    service.shut_down("the server is shutting down");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the last events reach their clients
    http.stop();
  });
  // What the engine did, every --log-stats-interval seconds while it has work.
  std::mutex stats_mutex;
  std::condition_variable stats_wake;
  bool stats_stop = false;
  std::thread stats_logger;
  if (args.log_stats_interval > 0) {
    stats_logger = std::thread([&] {
      SchedulerStats before = service.scheduler_stats();
      auto last = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lock(stats_mutex);
      while (!stats_wake.wait_for(lock, std::chrono::seconds(args.log_stats_interval), [&] { return stats_stop; })) {
        const SchedulerStats now = service.scheduler_stats();
        const auto time = std::chrono::steady_clock::now();
        const std::string line =
            server::stats_log_line(now, before, std::chrono::duration<double>(time - last).count());
        if (!line.empty()) server::write_log_line(line);
        before = now;
        last = time;
      }
    });
  }
  // The line that says the server is up comes once its connection threads exist.
  http.serve([&] {
    std::lock_guard<std::mutex> lock(up_mutex);
    if (stopped_before_up) return;
    up = true;
    std::fprintf(stderr, "serving '%s' on http://%s:%d (%d sequence%s per step, %d KV blocks of %d tokens)%s\n",
                 limits.served_model_name.c_str(), args.host.c_str(), http.bound_port(), engine.max_seqs(),
                 engine.max_seqs() == 1 ? "" : "s",
                 engine.memory_plan().kv_blocks, engine.memory_plan().kv_block_size,
                 api_key.empty() ? "" : ", API key required");
    std::fflush(stderr);
  });
  // serve() also returns when listening fails; wake the waiter so it can finish.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats_stop = true;
  }
  stats_wake.notify_all();
  if (stats_logger.joinable()) stats_logger.join();
  return kExitOk;
#endif
}

}  // namespace

void add_serve_command(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = root.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_model_options(cmd, args->model);
  // A value given empty is a mistake (an unset shell variable), not a request for the default.
  const CLI::Validator not_empty(
      [](std::string& value) { return value.empty() ? std::string("must not be empty") : std::string(); }, "", "");
  // The server's pool is shared by every running sequence: its 0 means a large pool, not one sequence's.
  cmd->get_option("--kv-cache-gb")
      ->description("KV cache size in GiB, shared by all sequences (0: on a GPU, --kv-memory-fraction of the free "
                    "memory less weights and workspace; on the CPU, 65,536 tokens)");
  add_tokenizer_option(cmd, args->model);
  cmd->add_option("--chat-template", args->chat_template,
                  "file with the chat template to use instead of the folder's: a Jinja template (e.g. a "
                  "chat_template.jinja) or a tokenizer_config.json whose chat_template is taken; the special "
                  "tokens stay the folder's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--default-chat-template-kwargs", args->default_template_kwargs,
                  "JSON object of template variables every chat request starts from, e.g. "
                  "'{\"enable_thinking\": false}' to answer without thinking unless a request asks for it (its "
                  "chat_template_kwargs and reasoning_effort override these key by key)")
      ->check(not_empty);
  cmd->add_option("--host", args->host, "address to listen on")->check(not_empty)->capture_default_str();
  cmd->add_option("--port", args->port, "port (0: any free port)")->check(between(0, 65535))->capture_default_str();
  cmd->add_option("--api-key", args->api_key,
                  "require 'Authorization: Bearer KEY' on every route but /health (visible in ps: prefer "
                  "--api-key-file or QWENRT_API_KEY); an empty key, file or variable is refused");
  CLI::Option* key_file =
      cmd->add_option("--api-key-file", args->api_key_file,
                      "read the API key from the first line of this file (whitespace around it is dropped; "
                      "--api-key or this file, either one, takes the place of QWENRT_API_KEY)");
  cmd->get_option("--api-key")->excludes(key_file);
  cmd->add_option("--max-seqs", args->max_seqs, "sequences per forward pass (default: 256 on a GPU, 16 on the CPU)")
      ->check(more_than(0));
  cmd->add_option("--max-batch-tokens", args->max_batch_tokens,
                  "tokens per forward pass: decodes plus prefill chunks; smaller keeps inter-token latency low while prompts are prefilled, larger prefills long prompts faster (default: 1024 on a GPU, 512 on the CPU)")
      ->check(more_than(0));
  cmd->add_option("--kv-memory-fraction", args->kv_memory_fraction,
                  "GPU: share of the free device memory for weights, workspace and KV cache when --kv-cache-gb is 0")
      ->check(between(0.05, 0.99))
      ->capture_default_str();
  cmd->add_option("--max-queue", args->max_queue, "requests waiting beyond --max-seqs; more get 429")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--served-model-name", args->served_model_name, "the model name clients use (default: the folder's name)")
      ->check(not_empty);
  cmd->add_option("--max-n", args->max_n, "largest n (choices) per request")->check(more_than(0))->capture_default_str();
  cmd->add_option("--max-prompts", args->max_prompts,
                  "most prompts in one /v1/completions request (an array of texts or of id arrays; each gets n choices)")
      ->check(more_than(0))
      ->capture_default_str();
  cmd->add_option("--max-stop", args->max_stop, "stop strings per request (OpenAI takes 4; evaluation harnesses send more, e.g. lm-eval's code tasks 6)")->check(at_least(0))->capture_default_str();
  cmd->add_option("--max-stop-bytes", args->max_stop_bytes, "bytes per stop string")->check(more_than(0))->capture_default_str();
  cmd->add_option("--max-logprobs", args->max_logprobs,
                  "largest top_logprobs / logprobs (at most 32: the device reduces up to that many a row at once)")
      ->check(between(0, 32))
      ->capture_default_str();
  cmd->add_flag("--enable-prompt-tokens-details", args->prompt_tokens_details,
                "each answer's usage also gives prompt_tokens_details.cached_tokens: how many of the prompt's tokens "
                "the prefix cache held (whole KV blocks of a prompt seen before), as OpenAI's and vLLM's option");
  cmd->add_option("--max-body-mb", args->max_body_mb, "request body size limit in MiB (larger: 413)")
      ->check(more_than(0))
      ->capture_default_str();
  cmd->add_option("--max-connections", args->max_connections,
                  "connections served at once (a thread each); one more is answered 503 with Retry-After")
      ->check(more_than(0))
      ->capture_default_str();
  cmd->add_option("--read-timeout", args->read_timeout, "seconds a request (head and body) may take to arrive from its first byte; then 408")
      ->check(more_than(0))
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", args->keep_alive_timeout,
                  "seconds an idle connection stays open for its next request (each holds a thread). Behind a "
                  "proxy that keeps connections to this server (nginx's upstream keepalive, a load balancer), "
                  "set it longer than the proxy's idle timeout (nginx: 60 s), or the proxy may send a request "
                  "just as this server closes the connection (a 502 for a POST)")
      ->check(more_than(0))
      ->capture_default_str();
  cmd->add_option("--write-timeout", args->write_timeout,
                  "seconds a write may block on a client that stops reading; then its request is cancelled")
      ->check(more_than(0))
      ->capture_default_str();
  cmd->add_option("--heartbeat-ms", args->heartbeat_ms,
                  "non-streamed responses. 0: sent whole once ready, with their own status, nothing written "
                  "before. N > 0, for proxies that cut a connection silent longer than your longest request: "
                  "a response not ready within N ms is sent as blank bytes every N ms, then its body (an error "
                  "after that can only come as the body of a 200). A client that goes is noticed from its "
                  "socket either way")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--sse-keepalive-ms", args->sse_keepalive_ms,
                  "streams: an SSE comment (': keep-alive') after this long without tokens, e.g. while queued "
                  "or behind a long prompt, for proxies that cut idle connections; 0: none")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--client-check", args->client_check,
                  "how a client that has gone is noticed. socket: its connection's socket is found (in "
                  "/proc/self/fd) and checked between engine steps, and failing writes; writes: failing writes "
                  "alone, at least every 500 ms (blank bytes ahead of a non-streamed body, which then starts as "
                  "200; keep-alive comments in a stream), what socket falls back to where the socket is not found")
      ->check(CLI::IsMember({"socket", "writes"}))
      ->capture_default_str();
  cmd->add_option("--allowed-host", args->allowed_hosts,
                  "on a loopback --host (the default), a host name requests may name besides this machine's own "
                  "(localhost and names under .localhost, 127.0.0.0/8, [::1], its host name, names under .local "
                  "and .internal) (e.g. one mapped to 127.0.0.1 in /etc/hosts, or a tunnel's public name that "
                  "reaches the server unchanged); repeat for several; '*' for any. Others get 421: a web page can "
                  "reach a loopback server by another name only by pointing its own name's DNS at it (DNS "
                  "rebinding). Not checked on other addresses")
      ->check(not_empty);
  cmd->add_option("--cors-origin", args->cors_origins,
                  "a web page's origin (e.g. http://localhost:3000) whose scripts may call the API from a browser; "
                  "repeat for several, '*' for any page. Default: none (browsers refuse cross-origin calls). "
                  "Pages still need the API key when one is set")
      ->check([](const std::string& origin) -> std::string {
        // As browsers send it: scheme://host[:port], no path, no trailing slash.
        const size_t sep = origin.find("://");
        const bool ok = origin == "*" || (sep != std::string::npos && sep > 0 && sep + 3 < origin.size() &&
                                          origin.find_first_of("/ \t", sep + 3) == std::string::npos);
        return ok ? "" : "an origin is scheme://host[:port] with no path (e.g. http://localhost:3000), or *";
      });
  cmd->add_flag("--no-access-log", args->no_access_log,
                "no line on stderr for each request (by default: 'access TIME CLIENT \"METHOD TARGET VERSION\" "
                "STATUS DURATION id=REQUEST-ID', the duration from the request's first byte to its answer's last)");
  cmd->add_option("--log-stats-interval", args->log_stats_interval,
                  "seconds between the lines on stderr that say what the engine did (running and waiting "
                  "sequences, prefill and generated tok/s, KV blocks, prefix-cache hits, preemptions), written "
                  "while it has work; 0: none")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--drain-timeout", args->drain_timeout,
                  "on SIGTERM or SIGINT, seconds running requests may take to finish before they are ended with an "
                  "error and every connection is closed (a second signal, a second or more after the first, ends them at "
                  "once; a signal while the server starts stops it at once)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->callback([args, cmd, &exit_code]() {
    args->api_key_given = cmd->count("--api-key") > 0;
    exit_code = run_serve(*args);
  });
}

}  // namespace qwenrt::cli
