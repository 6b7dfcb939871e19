#include "server/http_server.h"

#include <httplib.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <iterator>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/random_bits.h"
#include "server/http_connection.h"
#include "server/http_headers.h"
#include "server/peer_probe.h"
#include "server/responses.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::server {
namespace {

constexpr int kListenBacklog = 4096;
// How long a connection's thread waits for its request's events before it looks at the
// client again (events come every engine step while the request runs).
constexpr std::chrono::milliseconds kWaitSlice{50};
// Heartbeats when the connection's socket is not found (PeerProbe): at least this often.
constexpr int kFallbackHeartbeatMs = 500;

void warn_no_probe() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::fprintf(stderr,
                 "qwenrt serve: a connection's socket was not found among the process's descriptors "
                 "(/proc/self/fd); such clients are checked by a write every %d ms instead of each step\n",
                 kFallbackHeartbeatMs);
  });
}

// The routes, named once: registered under these, answered with their methods, and counted
// by these names in /metrics ("other" for any other path: a path is the client's text).
constexpr const char* kChatRoute = "/v1/chat/completions";
constexpr const char* kCompletionsRoute = "/v1/completions";
constexpr const char* kModelsRoute = "/v1/models";
constexpr const char* kModelPrefix = "/v1/models/";  // + a model's name
constexpr const char* kHealthRoute = "/health";
constexpr const char* kMetricsRoute = "/metrics";
constexpr const char* kTokenizeRoute = "/tokenize";
constexpr const char* kDetokenizeRoute = "/detokenize";

struct Route {
  const char* path;
  const char* label;    // in /metrics
  const char* methods;  // Allow (HEAD: httplib answers it as GET)
  bool prefix;          // the path is this and one or more characters more
};
constexpr Route kRouteTable[] = {
    {kChatRoute, kChatRoute, "POST, OPTIONS", false},
    {kCompletionsRoute, kCompletionsRoute, "POST, OPTIONS", false},
    {kModelsRoute, kModelsRoute, "GET, HEAD, OPTIONS", false},
    {kModelPrefix, "/v1/models/{id}", "GET, HEAD, OPTIONS", true},
    {kHealthRoute, kHealthRoute, "GET, HEAD, OPTIONS", false},
    {kMetricsRoute, kMetricsRoute, "GET, HEAD, OPTIONS", false},
    {kTokenizeRoute, kTokenizeRoute, "POST, OPTIONS", false},
    {kDetokenizeRoute, kDetokenizeRoute, "POST, OPTIONS", false},
};

const Route* find_route(const std::string& path) {
  for (const Route& route : kRouteTable) {
    const std::string_view name = route.path;
    if (route.prefix ? path.size() > name.size() && path.rfind(name, 0) == 0 : path == name) return &route;
  }
  return nullptr;
}

bool allows(const Route& route, const std::string& method) {
  std::string_view methods = route.methods;
  while (!methods.empty()) {
    const size_t comma = methods.find(", ");
    if (methods.substr(0, comma) == method) return true;
    methods = comma == std::string_view::npos ? std::string_view() : methods.substr(comma + 2);
  }
  return false;
}

// A request that may carry a body: one answered without reading it has its connection
// closed after the answer rather than read on from the middle of it (close_after).
bool may_carry_body(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  const auto lengths = req.headers.equal_range("Content-Length");  // any of them, not the first alone
  return std::any_of(lengths.first, lengths.second, [](const auto& header) { return header.second != "0"; });
}

std::string ascii_lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

ApiError no_route(const httplib::Request& req) {
  return ApiError(404, "invalid_request_error", "no route " + req.method + " " + req.path);
}

// A client's X-Request-Id is echoed when it is short visible ASCII; otherwise one is made.
bool usable_request_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// Compares in time that depends only on the lengths, not on where the texts differ.
bool same_secret(const std::string& given, const std::string& expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    difference |= static_cast<unsigned char>(given[i] ^ expected[i % std::max<size_t>(expected.size(), 1)]);
  }
  return difference == 0;
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  if (error.status == 429 || error.status == 503) res.set_header("Retry-After", "1");
  res.set_content(error_body(error), "application/json");
}

// Sends the response as it stands, then closes the connection: the request's body (or what
// is left of it) is never read, so it must not be read as the next request. httplib keeps
// a connection open after any response unless the request itself asked to close, whatever
// the response's own Connection header says: the connection's loop (http_connection.h)
// closes it instead.
void close_after(httplib::Response& res) {
  res.headers.erase("Connection");
  res.set_header("Connection", "close");
  close_after_response();
}

void send_error_and_close(httplib::Response& res, const ApiError& error) {
  send_error(res, error);
  close_after(res);
}

// Methods whose body httplib reads before a route's handler runs (or hands to it to read).
bool reads_body(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// What a request's failure answers: an ApiError as it is; bad or unsupported input (an
// Error of those kinds) is the client's; anything else (a broken invariant, the system) is
// the server's.
ApiError answer_to(const std::exception& failure) {
  if (const auto* api = dynamic_cast<const ApiError*>(&failure)) return *api;
  if (const auto* error = dynamic_cast<const Error*>(&failure)) {
    const bool clients = error->category() == ErrorCategory::kInvalidArgument ||
                         error->category() == ErrorCategory::kUnsupported;
    if (clients) return invalid_request(error->message(), error->param());
  }
  return ApiError(500, "server_error", failure.what());
}

ApiError body_too_large() {
  return ApiError(413, "invalid_request_error", "the request body is over the size limit", "", "request_too_large");
}

// What of an over-limit body is still read and dropped, so that a client still sending gets
// the 413 rather than a reset connection. httplib 0.18 stops a chunked body at its limit
// itself: there the rest is not drained, and such a client may see the connection reset.
constexpr size_t kDrainBytes = size_t{64} << 20;

// The answer to a request whose client has gone: /metrics counts it under this status
// (nginx's "client closed request"); the caller drops it (drop_response), unsent.
ApiError client_gone() {
  return ApiError(499, "invalid_request_error", "the client closed the connection before the response", "",
                  "client_closed_request");
}

// How a request's head frames its body (RFC 9112 6.3): by its length, chunked, or not at
// all (neither: no body).
struct BodyFraming {
  std::optional<uint64_t> length;  // Content-Length, as read once
  bool chunked = false;            // Transfer-Encoding: chunked
};

// What a request's head alone says against its body: framing that two readers could take
// differently (RFC 9112 6.3: a length that is not a plain decimal number, two different
// lengths, a length beside a transfer coding), a transfer coding other than chunked, a
// content coding nothing unpacks (415), a Content-Length over `limit` (413). A request with
// neither a length nor a transfer coding has no body: nothing to say. The error to answer
// with (the caller closes the connection: the body stays unread), if any; else `framing`,
// when given, holds the body's framing.
std::optional<ApiError> body_head_error(const httplib::Request& req, size_t limit, BodyFraming* framing = nullptr) {
  const auto lengths = req.headers.equal_range("Content-Length");
  const auto codings = req.headers.equal_range("Transfer-Encoding");
  const bool has_length = lengths.first != lengths.second;
  const bool has_coding = codings.first != codings.second;
  if (!has_length && !has_coding) {
    if (framing != nullptr) *framing = BodyFraming();
    return std::nullopt;
  }
  std::optional<uint64_t> length;
  if (has_length) {
    const std::string& content_length = lengths.first->second;  // the first's
    const bool decimal = !content_length.empty() && content_length.size() <= 18 &&
                         std::all_of(content_length.begin(), content_length.end(),
                                     [](char c) { return c >= '0' && c <= '9'; });
    if (!decimal) return invalid_request("Content-Length '" + content_length + "' is not a length in bytes");
    for (auto it = lengths.first; it != lengths.second; ++it) {
      if (it->second != content_length) return invalid_request("two different Content-Length headers");
    }
    if (has_coding) return invalid_request("Content-Length beside Transfer-Encoding");
    length = std::strtoull(content_length.c_str(), nullptr, 10);  // up to 18 digits: no overflow
  }
  if (has_coding) {
    if (std::distance(codings.first, codings.second) > 1) return invalid_request("two Transfer-Encoding headers");
    const std::string& coding = codings.first->second;
    if (ascii_lower(coding) != "chunked") {
      return invalid_request("Transfer-Encoding '" + coding + "' is not supported (only chunked)");
    }
  }
  // A body compressed in a way the HTTP library does not unpack: 415, not a broken body.
  if (req.has_header("Content-Encoding")) {
    const std::string coding = ascii_lower(req.get_header_value("Content-Encoding"));
    if (coding != "gzip" && coding != "deflate" && coding != "br" && coding != "identity") {
      return ApiError(415, "invalid_request_error",
                      "Content-Encoding '" + req.get_header_value("Content-Encoding") +
                          "' is not supported (gzip, deflate, br)",
                      "", "unsupported_media_type");
    }
  }
  // A Content-Length over the limit is refused unread, as httplib's own check does.
  if (length && *length > limit) return body_too_large();
  if (framing != nullptr) *framing = BodyFraming{length, has_coding};
  return std::nullopt;
}

// Reads a request body into `body`, counted as it arrives: httplib 0.11's own limit sees only
// a Content-Length, not a chunked body or what a compressed one unpacks to. Past the limit the
// rest is read and dropped (up to kDrainBytes). Later releases (0.18) stop a chunked body at
// their limit themselves, before the chunk that crosses it reaches this count, and set
// `res.status` to 413: that is answered as the limit too, not as a broken body. The error to
// answer with, if any.
std::optional<ApiError> read_body_within(const httplib::Request& req, httplib::Response& res,
                                         const httplib::ContentReader& read_body, size_t limit,
                                         std::string& body) {
  BodyFraming framing;
  if (std::optional<ApiError> error = body_head_error(req, limit, &framing)) return error;
  // Neither a length nor a chunked encoding: no body (RFC 9112 6.3), nothing to wait for.
  // httplib knows "chunked" alone; any other coding it would read to the connection's end.
  if (!framing.length && !framing.chunked) return std::nullopt;
  // httplib 0.11's chunked reader can report a body read whole that it left unread (a
  // chunk's data not followed by CRLF ends its loop before the last chunk): whatever the
  // answer, the connection is closed after it, so no rest is read as the next request.
  if (framing.chunked) close_after(res);
  size_t received = 0;
  const bool read = read_body([&](const char* data, size_t length) {
    received += length;
    if (received > limit) {
      std::string().swap(body);
      return received - limit <= kDrainBytes;
    }
    body.append(data, length);
    return true;
  });
  if (received > limit || (!read && res.status == 413)) return body_too_large();
  if (!read && connection_peer_ended()) {
    // Sent (a client that only shut its sending side reads it; nginx answers 400 too).
    return invalid_request("the client's side of the connection ended before the request body did (" +
                           std::to_string(received) + " bytes came" +
                           (framing.length ? " of " + std::to_string(*framing.length) : std::string()) + ")");
  }
  if (!read) {
    return invalid_request("the request body could not be read in full: a broken chunked encoding or compression");
  }
  return std::nullopt;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

void write_log_line(const std::string& line) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::string access_log_line(std::chrono::system_clock::time_point when, const std::string& peer,
                            const std::string& request, int status, double seconds, const std::string& id) {
  const auto since_epoch = when.time_since_epoch();
  const std::time_t whole = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count() % 1000;
  std::tm utc{};
  gmtime_r(&whole, &utc);
  char stamp[48];
  const size_t length = std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(stamp + length, sizeof(stamp) - length, ".%03dZ", static_cast<int>(millis));
  // The request line is the client's text: nothing in it may break the log's lines.
  constexpr size_t kRequestBytes = 200;
  std::string shown;
  for (size_t i = 0; i < request.size() && i < kRequestBytes; ++i) {
    const char c = request[i];
    shown += c >= 0x20 && c < 0x7f && c != '"' ? c : '?';
  }
  if (request.size() > kRequestBytes) shown += "...";
  char took[32] = "-";
  if (seconds >= 0) std::snprintf(took, sizeof(took), "%.1fms", seconds * 1e3);
  return std::string("access ") + stamp + " " + peer + " \"" + shown + "\" " + std::to_string(status) + " " + took +
         " id=" + (id.empty() ? "-" : id) + "\n";
}

HttpServer::HttpServer(GenerationService& service, ModelText model, ServerOptions options, Metrics& metrics)
    : service_(service), model_(model), options_(std::move(options)), metrics_(metrics),
      http_(std::make_unique<BoundedServer>()), created_(unix_time()), loopback_(loopback_address(options_.host)) {
  // The names a request may give a keyless loopback server besides the loopback ones: this
  // machine's own, and those of --allowed-host as Host fields name them (no port, lower case).
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0) machine_name_ = host_name(name);
  if (!machine_name_.empty()) allowed_hosts_.push_back(machine_name_);
  for (const std::string& allowed : options_.allowed_hosts) {
    allowed_hosts_.push_back(allowed == "*" ? allowed : host_name(allowed));
  }
  // A request a connection answers itself (408, 431) never reaches a route: "other".
  http_->on_refused([this](int status, const std::string& request_line, const std::string& id) {
    metrics_.count_request("other", status);
    if (options_.access_log) {
      write_log_line(access_log_line(std::chrono::system_clock::now(), connection_peer(),
                                     request_line.empty() ? "-" : request_line, status, connection_request_seconds(),
                                     id));
    }
  });
  // Where answers depend on the Origin, so do those the connection gives itself.
  if (!options_.cors_origins.empty()) http_->set_refusal_headers("Vary: Origin\r\n");
  model_json_ = nlohmann::ordered_json{{"id", options_.limits.served_model_name},
                               {"object", "model"},
                               {"created", created_},
                               {"owned_by", "qwenrt"},
                               {"max_model_len", options_.limits.max_context}}
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Threads for the connections served, and a few more that answer one past them with a
  // 503 at once (each such thread is busy only for the answer: its lingering close is the
  // LingeringCloser's).
  constexpr int kSpareThreads = 4;
  http_->set_max_connections(static_cast<size_t>(std::max(options_.max_connections, 1)));
  const int threads = std::max(options_.max_connections, 4) + kSpareThreads;
  http_->new_task_queue = [this, threads] {
    auto* pool = new httplib::ThreadPool(static_cast<size_t>(threads));
    if (accepting_) accepting_();
    return pool;
  };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(options_.read_timeout_s, 0);
  http_->set_write_timeout(options_.write_timeout_s, 0);
  http_->set_keep_alive_max_count(1000);
  http_->set_keep_alive_timeout(options_.keep_alive_s);
  // A response goes out in several writes (headers, body; SSE events): with Nagle's
  // algorithm a write waits for the ACK of the one before, which a client on a kept-alive
  // connection delays by up to 40 ms. httplib sets this on the listening socket; Linux
  // hands it on to the sockets accepted from it.
  http_->set_tcp_nodelay(true);
  add_routes();
}

HttpServer::~HttpServer() { stop(); }

bool can_listen(const std::string& host, int port, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int status = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); status != 0) {
    why = ::gai_strerror(status);
    return false;
  }
  bool ok = false;
  why = "no address";
  for (addrinfo* at = found; at != nullptr && !ok; at = at->ai_next) {
    const int sock = ::socket(at->ai_family, at->ai_socktype, at->ai_protocol);
    if (sock < 0) {
      why = std::strerror(errno);
      continue;
    }
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));  // as bind() sets it
    if (at->ai_family == AF_INET6) {  // dual stack, as cpp-httplib binds IPv6
      int no = 0;
      ::setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
    }
    ok = ::bind(sock, at->ai_addr, at->ai_addrlen) == 0;
    if (!ok) why = std::strerror(errno);
    ::close(sock);
  }
  ::freeaddrinfo(found);
  return ok;
}

bool HttpServer::bind() {
  // cpp-httplib listens with a backlog of 5: hundreds of clients reconnecting at once
  // overflow it (dropped connections, resets). The socket is kept here to listen again
  // with a deep queue once bound (Linux updates the backlog of a listening socket).
  int listen_socket = -1;
  http_->set_socket_options([&listen_socket](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_socket = sock;
  });
  bool bound = false;
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    bound = port_ > 0;
  } else {
    port_ = options_.port;
    bound = http_->bind_to_port(options_.host, options_.port);
  }
  if (bound && listen_socket >= 0) ::listen(listen_socket, kListenBacklog);
  return bound;
}

void HttpServer::serve(std::function<void()> accepting) {
  accepting_ = std::move(accepting);
  http_->listen_after_bind();
}

void HttpServer::stop() {
  if (!http_->is_running()) return;
  http_->stop();
  http_->cut_connections();  // those still reading a request or writing to a slow client end now
}

std::string HttpServer::allowed_origin(const std::string& origin) const {
  if (origin.empty()) return "";
  for (const std::string& allowed : options_.cors_origins) {
    if (allowed == "*" || allowed == origin) return origin;
  }
  return "";
}

void HttpServer::add_routes() {
  const auto pre_route = [this](const httplib::Request& req, httplib::Response& res) {
    auto& request = const_cast<httplib::Request&>(req);  // httplib's Request is no const object
    // Range is for parts of a stored representation (RFC 9110 14.2; on a POST it must be
    // ignored): these answers are computed whole, never 206, whichever answer this is. (A
    // Range httplib cannot read is its own 416, before any handler.)
    request.ranges.clear();
    // A request names its host once, and an HTTP/1.1 one must (RFC 9112 3.2): a proxy
    // before this server may have routed by another.
    if (const size_t hosts = req.get_header_value_count("Host");
        hosts > 1 || (hosts == 0 && req.version == "HTTP/1.1") ||
        req.get_header_value("Host").find(',') != std::string::npos) {
      send_error_and_close(res, invalid_request("a request carries one Host header, naming one host "
                                                "(an HTTP/1.1 request must carry it)"));
      return httplib::Server::HandlerResponse::Handled;
    }
    // A keyless server on a loopback address is open to any web page the machine's browser
    // shows: a page whose name's DNS it points here (DNS rebinding) names itself in Host, and
    // a page that posts here names itself in Origin (which browsers send with every POST).
    // Neither can send an API key, so with one these checks are not needed.
    if (loopback_ && options_.api_key.empty()) {
      if (req.has_header("Host")) {
        const std::string host = host_name(req.get_header_value("Host"));
        if (!loopback_host_allowed(host, allowed_hosts_)) {
          send_error_and_close(res, ApiError(421, "invalid_request_error",
                                             "this server listens on " + options_.host +
                                                 " without an API key and answers requests for this machine's "
                                                 "names (localhost, 127.0.0.1, [::1], " + machine_name_ +
                                                 ", *.local, *.internal), not for '" + host.substr(0, 100) +
                                                 "': a proxy that passes its own Host on, or a web page whose name "
                                                 "resolves here; name it with --allowed-host, or set an API key",
                                             "", "host_not_allowed"));
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      if (const std::string origin = req.get_header_value("Origin");
          req.method == "POST" && !origin.empty() && allowed_origin(origin).empty() && !loopback_origin(origin)) {
        send_error_and_close(res, ApiError(403, "invalid_request_error",
                                           "a web page at '" + origin.substr(0, 100) +
                                               "' may not use this server: allow it with --cors-origin, or set an "
                                               "API key",
                                           "", "origin_not_allowed"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // httplib finds a coding by its name anywhere in the field: it is given only those
    // accepted, in lower case (a coding weighted q=0 is refused, RFC 9110 12.5.3).
    if (req.has_header("Accept-Encoding")) {
      std::string field;
      const auto fields = req.headers.equal_range("Accept-Encoding");  // every one, not the first alone
      for (auto it = fields.first; it != fields.second; ++it) field += (field.empty() ? "" : ", ") + it->second;
      request.headers.erase("Accept-Encoding");
      if (const std::string codings = acceptable_codings(field); !codings.empty()) {
        request.headers.emplace("Accept-Encoding", codings);
      }
    }
    // Connection options in any case, as a list ("Close", "keep-alive, close"): httplib
    // closes only for the exact value "close".
    const auto connection = req.headers.equal_range("Connection");
    for (auto it = connection.first; it != connection.second; ++it) {
      if (has_connection_option(it->second, "close")) close_after(res);
    }
    // A target in absolute form (`http://host/v1/models`, RFC 9112 3.2.2) is served as its
    // path. httplib routes by req.path after this handler, and its Request is no const object.
    if (const std::string scheme = ascii_lower(req.path.substr(0, 8));
        scheme.starts_with("http://") || scheme == "https://") {
      const size_t slash = req.path.find('/', req.path.find("://") + 3);
      const_cast<httplib::Request&>(req).path = slash == std::string::npos ? "/" : req.path.substr(slash);
    }
    // A browser's preflight carries no credentials: it is answered before the key is asked
    // for, with the CORS grant when its page is allowed (the request itself is checked).
    const Route* route = find_route(req.path);
    const bool unread_body = may_carry_body(req);
    // A body on a method whose body nothing reads (GET, HEAD, OPTIONS): refused, the
    // connection closed, so that the body is not taken for the next request.
    if (unread_body && !reads_body(req.method)) {
      send_error_and_close(res, invalid_request("a " + req.method + " request carries no body here"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method == "OPTIONS") {
      // "OPTIONS *": what the server as a whole offers (RFC 9110 9.3.7).
      if (req.path == "*") {
        res.status = 204;
        res.set_header("Allow", "GET, HEAD, POST, OPTIONS");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (route == nullptr) {
        send_error(res, no_route(req));
        return httplib::Server::HandlerResponse::Handled;
      }
      res.status = 204;
      res.set_header("Allow", route->methods);
      if (!allowed_origin(req.get_header_value("Origin")).empty()) {
        res.set_header("Access-Control-Allow-Methods", route->methods);
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        res.set_header("Access-Control-Max-Age", "600");
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!options_.api_key.empty() && req.path != kHealthRoute) {
      // One credential: of two, which one a gateway before this server meant is unknown.
      if (req.get_header_value_count("Authorization") > 1) {
        send_error_and_close(res, invalid_request("a request carries one Authorization header"));
        return httplib::Server::HandlerResponse::Handled;
      }
      const std::string header = req.get_header_value("Authorization");
      // The scheme's name is case-insensitive (RFC 9110 11.1); one or more spaces follow it.
      const size_t space = header.find(' ');
      const std::string scheme = ascii_lower(header.substr(0, space == std::string::npos ? 0 : space));
      const size_t key = space == std::string::npos ? std::string::npos : header.find_first_not_of(' ', space);
      const bool ok = scheme == "bearer" && key != std::string::npos && same_secret(header.substr(key), options_.api_key);
      if (!ok) {
        res.set_header("WWW-Authenticate", "Bearer");
        // OpenAI's own 401: an invalid_request_error whose code names the key.
        send_error(res, ApiError(401, "invalid_request_error",
                                 header.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "invalid API key",
                                 "", "invalid_api_key"));
        if (unread_body) close_after(res);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Unknown paths and wrong methods are answered here, before any body is read.
    if (route == nullptr || !allows(*route, req.method)) {
      if (route == nullptr) {
        send_error(res, no_route(req));
      } else {
        res.set_header("Allow", route->methods);
        send_error(res, ApiError(405, "invalid_request_error",
                                 "method " + req.method + " is not allowed on " + req.path + " (allowed: " +
                                     route->methods + ")"));
      }
      if (unread_body) close_after(res);
      return httplib::Server::HandlerResponse::Handled;
    }
    // A body is JSON. A web page may send a text/plain or form body to any address without
    // asking first (no CORS preflight), so those are refused before they run anything; a
    // request without a Content-Type is read as JSON (curl -d sends a form type: 415).
    if (req.method == "POST" && req.has_header("Content-Type") && !json_media_type(req.get_header_value("Content-Type"))) {
      send_error(res, ApiError(415, "invalid_request_error",
                               "the body's Content-Type is '" + req.get_header_value("Content-Type").substr(0, 100) +
                                   "': send 'Content-Type: application/json'",
                               "", "unsupported_media_type"));
      if (unread_body) close_after(res);
      return httplib::Server::HandlerResponse::Handled;
    }
    // One model by its name, which may hold slashes ("Qwen/Qwen2.5-7B-Instruct").
    if (route->prefix) {
      const std::string name = req.path.substr(std::string_view(kModelPrefix).size());
      if (name != options_.limits.served_model_name) {
        send_error(res, model_not_found(name, options_.limits));
      } else {
        res.set_content(model_json_, "application/json");
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  };
  // A client that asks before sending its body (`Expect: 100-continue`, as curl does past
  // 1 KiB) gets every refusal the head decides (the key, the route, the method, the body's
  // framing, coding and length) in place of the "100 Continue"; the connection is closed
  // after it, the body unsent. The pre-routing runs once, before the 100; whatever else it
  // decided (a success, or nothing) is kept for after it (PreRouting).
  const PreRouting routing(pre_route, [this](const httplib::Request& req, httplib::Response& res) {
    if (!may_carry_body(req)) return false;
    const std::optional<ApiError> error = body_head_error(req, options_.max_body_bytes);
    if (error) send_error_and_close(res, *error);
    return error.has_value();
  });
  http_->set_pre_routing_handler(
      [routing](const httplib::Request& req, httplib::Response& res) { return routing.route(req, res); });
  http_->set_expect_100_continue_handler(
      [routing](const httplib::Request& req, httplib::Response& res) { return routing.expect_100(req, res); });
  // Every response: its request id, and the CORS grant for an allowed page.
  http_->set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.get_header_value("X-Request-Id");
    res.set_header("X-Request-Id", usable_request_id(id) ? id : new_id("req"));
    if (!res.has_header("Date")) res.set_header("Date", http_date(std::chrono::system_clock::now()));
    // httplib may compress a JSON body by the request's Accept-Encoding: caches key it by that.
    if (res.get_header_value("Content-Type").starts_with("application/json")) res.set_header("Vary", "Accept-Encoding");
    // While draining, every connection ends after its answer.
    if (draining_) close_after(res);
    // httplib has added its own "Connection: close" by now where the request asked to close:
    // beside close_after's, one is sent.
    if (res.get_header_value_count("Connection") > 1) {
      res.headers.erase("Connection");
      res.set_header("Connection", "close");
    }
    // httplib gives every response without a body "Content-Length: 0" before this handler
    // runs (0.11 and 0.18 alike), which a 204 (a preflight's answer) must not carry (RFC
    // 9110 8.6): its status alone says that no body follows.
    if (res.status == 204) res.headers.erase("Content-Length");
    // httplib answers HEAD with "Accept-Ranges: bytes", which the GET it stands for does not
    // carry: this server serves no ranges (a Range header is ignored).
    res.headers.erase("Accept-Ranges");
    // An HTTP/1.0 connection stays open only where the client asked for it as httplib reads
    // it ("Keep-Alive") and nothing closes it; else the answer says it closes, not for how long
    // it would stay.
    if (req.version == "HTTP/1.0") {
      if (req.get_header_value("Connection") == "Keep-Alive" && !res.has_header("Connection")) {
        res.set_header("Connection", "keep-alive");
      } else {
        res.headers.erase("Keep-Alive");
        if (!res.has_header("Connection")) res.set_header("Connection", "close");
      }
    }
    if (options_.cors_origins.empty()) return;
    // Answers depend on the Origin from here on: caches must key them by it.
    res.set_header("Vary", "Origin");
    const std::string origin = allowed_origin(req.get_header_value("Origin"));
    if (!origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
    }
  });
  // Errors httplib raises itself (413, 400 for a malformed request line) get the same JSON.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    // A handler's answer: every one given without reading the body (the key, the route,
    // the method, a body nothing reads, a body that could not be read whole) has closed
    // its connection already; after a body read whole (a request that fails validation)
    // the connection stays open for the next request.
    if (!res.body.empty() || res.content_provider_) return;
    // httplib's own answer, given before any handler: a request line or header it could
    // not read (or, in 0.18, more than its 100 headers), a bad Range. What is left of the
    // head, and the body, are unread: the connection is closed after it.
    if (res.status == 413) {
      send_error(res, body_too_large());
    } else if (res.status == 404) {
      send_error(res, no_route(req));
    } else {
      send_error(res, ApiError(res.status, "invalid_request_error", "bad HTTP request"));
    }
    close_after(res);
  });
  // Counted by route: any other path is "other" (a path is the client's text; as a label
  // it could add lines to /metrics and grow its label set without bound).
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (connection_refused()) return;  // counted by the refusal hook, with the status sent
    const Route* known = find_route(req.path);
    const char* route = known != nullptr ? known->label : "other";
    metrics_.count_request(route, res.status);
    if (options_.access_log) {
      write_log_line(access_log_line(std::chrono::system_clock::now(), peer_text(req.remote_addr, req.remote_port),
                                     req.method + " " + req.target + " " + req.version, res.status,
                                     connection_request_seconds(), res.get_header_value("X-Request-Id")));
    }
  });

  http_->Get(kHealthRoute, [this](const httplib::Request&, httplib::Response& res) {
    if (ready_ && !draining_) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    } else {
      res.status = 503;
      res.set_content(draining_ ? "{\"status\":\"draining\"}" : "{\"status\":\"loading\"}", "application/json");
    }
  });
  http_->Get(kModelsRoute, [this](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"object\":\"list\",\"data\":[" + model_json_ + "]}", "application/json");
  });
  http_->Get(kMetricsRoute, [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(service_.scheduler_stats(), service_.active_requests()),
                    "text/plain; version=0.0.4");
  });
  // The tokenizer's routes: a JSON body in, a JSON answer out, no engine work.
  const auto tokenizer_route = [this](auto answer) {
    return [this, answer](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read_body) {
      std::string body_text;
      if (const std::optional<ApiError> error =
              read_body_within(req, res, read_body, options_.max_body_bytes, body_text)) {
        send_error_and_close(res, *error);  // what is left of the body is never read
        return;
      }
      try {
        res.set_content(answer(parse_json_body(body_text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                        "application/json");
      } catch (const std::exception& failure) {
        send_error(res, answer_to(failure));
      }
    };
  };
  http_->Post(kTokenizeRoute, tokenizer_route([this](const nlohmann::ordered_json& body) {
    const TokenizeRequest request = parse_tokenize_request(body, model_, options_.limits);
    nlohmann::ordered_json answer{
        {"count", request.ids.size()}, {"max_model_len", options_.limits.max_context}, {"tokens", request.ids}};
    if (request.token_strs) {
      // The vocabulary's own strings (byte-level BPE shows bytes as its alphabet: "Ġ" for a space).
      nlohmann::ordered_json strings = nlohmann::ordered_json::array();
      for (const int32_t id : request.ids) strings.push_back(model_.tokenizer->id_to_token(id).value_or(""));
      answer["token_strs"] = std::move(strings);
    }
    return answer;
  }));
  http_->Post(kDetokenizeRoute, tokenizer_route([this](const nlohmann::ordered_json& body) {
    return nlohmann::ordered_json{{"prompt", parse_detokenize_request(body, model_, options_.limits)}};
  }));
  auto generation = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read_body) {
      std::string body_text;
      if (const std::optional<ApiError> error =
              read_body_within(req, res, read_body, options_.max_body_bytes, body_text)) {
        send_error_and_close(res, *error);  // what is left of the body is never read
        return;
      }
      if (draining_ || !ready_) {
        send_error(res, ApiError(503, "server_error",
                                 draining_ ? "the server is shutting down" : "the model is still loading", "",
                                 "unavailable"));
        return;
      }
      std::shared_ptr<GenerationRequest> request;
      std::shared_ptr<RequestStream> stream;
      try {
        const nlohmann::ordered_json body = parse_json_body(body_text);
        request = std::make_shared<GenerationRequest>(chat ? parse_chat_request(body, model_, options_.limits)
                                                           : parse_completion_request(body, model_, options_.limits));
        stream = service_.start(*request);
      } catch (const std::exception& failure) {
        send_error(res, answer_to(failure));
        return;
      }
      auto builder = std::make_shared<ResponseBuilder>(*request, new_id(chat ? "chatcmpl" : "cmpl"), unix_time(),
                                                       stream->prompt_tokens(), options_.system_fingerprint);
      const bool streaming = request->stream;
      // The connection's socket, to notice a client that has gone between writes (each
      // engine step). Should it not be found (or not be looked for: --client-check writes),
      // writes every half second notice it: blank bytes ahead of a non-streamed body,
      // keep-alive comments in a stream.
      const PeerProbe peer = options_.find_sockets ? PeerProbe::find({req.local_addr, req.local_port,
                                                                      req.remote_addr, req.remote_port})
                                                   : PeerProbe();
      if (!peer.found() && options_.find_sockets) warn_no_probe();
      const int asked = streaming ? options_.sse_keepalive_ms : options_.heartbeat_ms;
      const auto heartbeat = std::chrono::milliseconds(
          peer.found() ? asked : (asked > 0 ? std::min(asked, kFallbackHeartbeatMs) : kFallbackHeartbeatMs));
      const bool beats = heartbeat.count() > 0;
      const auto slice = beats ? std::min(kWaitSlice, heartbeat) : kWaitSlice;
      if (!streaming) {
        // A non-streamed response is sent whole, with its own status (an engine failure or
        // the drain's end is a 500), once its result is ready; with heartbeats, only if it is
        // ready within one heartbeat period. Until then nothing is written.
        const auto deadline = std::chrono::steady_clock::now() + heartbeat;
        while (!stream->finished()) {
          auto wait = slice;
          if (beats) {
            const auto now = std::chrono::steady_clock::now();
            if (now >= deadline) break;
            wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(deadline - now));
          }
          for (const ChoiceEvent& event : stream->wait(wait)) builder->collect(event);
          if (!stream->finished() && peer.peer_closed()) {
            stream->cancel();
            send_error(res, client_gone());
            drop_response();
            return;
          }
        }
        if (stream->finished()) {
          if (builder->error()) {
            send_error(res, *builder->error());
          } else {
            res.set_content(builder->body(), "application/json");
          }
          return;
        }
      }
      // Streams are sent chunked as SSE; a longer non-streamed response (with heartbeats) as
      // blank bytes (JSON allows leading whitespace) and then the whole body, with status 200
      // already sent. A client seen gone, by its socket or by a failing write, is cancelled
      // rather than run to the end. HTTP/1.0 has no chunked coding (RFC 9112 6.1): there
      // the body is written as it is and the connection's end ends it.
      const bool http10 = req.version == "HTTP/1.0";
      const auto provider =
          [request, stream, builder, streaming, heartbeat, beats, slice, peer](size_t, httplib::DataSink& sink) {
            // A non-streamed response has waited one heartbeat period already: its first
            // heartbeat goes now.
            auto last_write =
                streaming ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
            for (;;) {
              std::vector<ChoiceEvent> events = stream->wait(slice);
              std::string out;
              for (const ChoiceEvent& event : events) {
                if (streaming) {
                  builder->stream(event, out);
                } else {
                  builder->collect(event);
                }
              }
              const bool done = stream->finished();
              if (!done && peer.peer_closed()) {
                stream->cancel();
                return false;
              }
              if (done) out += streaming ? builder->stream_end() : (builder->error() ? error_body(*builder->error()) : builder->body());
              if (out.empty() && beats && std::chrono::steady_clock::now() - last_write >= heartbeat) {
                out = streaming ? ": keep-alive\n\n" : " ";
              }
              if (!out.empty()) {
                if (!sink.is_writable() || !sink.write(out.data(), out.size())) {
                  stream->cancel();
                  return false;
                }
                last_write = std::chrono::steady_clock::now();
              }
              if (done) {
                sink.done();
                return true;
              }
            }
          };
      const auto release = [stream](bool success) {
        if (!success) stream->cancel();
      };
      // The stream's type is exactly text/event-stream: httplib compresses any other text/*
      // type (a charset added) for a client that accepts gzip, which holds the events back.
      const char* type = streaming ? "text/event-stream" : "application/json";
      if (http10) {
        close_after(res);
        res.set_content_provider(type, provider, release);
      } else {
        res.set_chunked_content_provider(type, provider, release);
      }
      if (streaming) {
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
      }
    };
  };
  http_->Post(kChatRoute, generation(true));
  http_->Post(kCompletionsRoute, generation(false));
}

}  // namespace qwenrt::server
