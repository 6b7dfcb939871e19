// The HTTP side of `qwenrt serve`: OpenAI routes over cpp-httplib (a pool thread per
// connection; the engine runs on the service's own thread, so a slow client never holds up
// a step), SSE streaming, the API key, /health, /metrics and the drain on shutdown.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/generation.h"
#include "server/metrics.h"

namespace qwenrt::server {

class BoundedServer;  // http_connection.h: httplib's server with our connection loop

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (see bound_port())
  std::string api_key;               // "": no authentication
  size_t max_body_bytes = 4u << 20;  // larger bodies get 413
  int max_connections = 1024;        // connection threads
  int read_timeout_s = 60;           // a request (head and body) must arrive within this from its first byte
  int write_timeout_s = 30;          // a client that stops reading: then its request is cancelled
  int heartbeat_ms = 0;              // non-streamed: 0 none; N: not ready within N ms, blank
                                     // bytes every N ms, so its status is 200 whatever follows
  int sse_keepalive_ms = 15000;      // streams: a keep-alive comment after this long silent (0: none)
  bool find_sockets = true;          // check each connection's socket between steps (PeerProbe);
                                     // false: failing writes alone show a client gone, as where
                                     // the socket cannot be found
  // Browser pages (their Origin header) allowed to call the API: answered preflights and
  // Access-Control-Allow-Origin. "*": any page. Empty: no CORS headers (browsers refuse).
  std::vector<std::string> cors_origins;
  // A line on stderr for each request answered (access_log_line).
  bool access_log = true;
  // The responses' system_fingerprint ("": null).
  std::string system_fingerprint;
  // Seconds an idle kept-alive connection stays open for its next request.
  int keep_alive_s = 5;
  // Listening on a loopback address without an API key, requests must name it by a name of
  // this machine (localhost, 127.0.0.1, [::1], its host name, *.local, *.internal) or one of
  // these: a web page that rebinds its own name's DNS record to 127.0.0.1 gets 421
  // (loopback_host_allowed).
  std::vector<std::string> allowed_hosts;
  RequestLimits limits;
};

// The access log's line for one answer, ending in a newline: when (UTC, milliseconds), the
// client, the request line (bytes outside printable ASCII as '?', at most 200 of them), the
// status, the time since the request began to arrive ("-" where unknown) and the request id.
//   access 2026-12-06T09:30:01.123Z 127.0.0.1:51234 "POST /v1/chat/completions HTTP/1.1" 200 12.3ms id=chatcmpl-…
std::string access_log_line(std::chrono::system_clock::time_point when, const std::string& peer,
                            const std::string& request, int status, double seconds, const std::string& id);
// A log line on stderr, written whole: the lines of several threads do not interleave.
void write_log_line(const std::string& line);

// Whether `host`:`port` can be listened on now (port 0: any free one, so only the address
// is tried), tried as bind() will. serve asks before the weights load, so an address in use
// or not of this machine is told at once, not after minutes of loading. `why` gets the
// system's reason.
bool can_listen(const std::string& host, int port, std::string& why);

class HttpServer {
 public:
  HttpServer(GenerationService& service, ModelText model, ServerOptions options, Metrics& metrics);
  ~HttpServer();
  // Binds; returns false (with errno set) when the address cannot be had.
  bool bind();
  int bound_port() const { return port_; }
  // Serves until stop(); call bind() first. `accepting` runs once the connection threads
  // exist, just before the first accept: a client that connects after it is served at
  // once (starting the threads takes tens of milliseconds with a thousand of them).
  void serve(std::function<void()> accepting = {});
  void set_ready(bool ready) { ready_ = ready; }
  // New generation requests get 503 from now on; running ones continue.
  void begin_drain() { draining_ = true; }
  void stop();

 private:
  void add_routes();
  // The Origin of `req` when the server lets that page read its answers, else "".
  std::string allowed_origin(const std::string& origin) const;

  GenerationService& service_;
  ModelText model_;
  ServerOptions options_;
  Metrics& metrics_;
  std::unique_ptr<BoundedServer> http_;
  std::atomic<bool> ready_{false}, draining_{false};
  int port_ = 0;
  int64_t created_ = 0;
  bool loopback_ = false;  // listening on a loopback address: Host names and Origins are checked
  std::string machine_name_;                // gethostname's, as a Host names it
  std::vector<std::string> allowed_hosts_;  // it and --allowed-host's, as Host fields name them
  std::string model_json_;  // the served model's /v1/models entry
  std::function<void()> accepting_;
};

}  // namespace qwenrt::server
