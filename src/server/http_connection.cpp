#include "server/http_connection.h"
#include "server/http_headers.h"

#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string_view>

#include "server/api.h"

namespace qwenrt::server {
namespace {

constexpr size_t kReadChunk = 16 * 1024;
// A lingering close: how long and how much of what a client still sends is read and dropped.
constexpr std::chrono::milliseconds kLinger{500};
constexpr size_t kLingerBytes = size_t{1} << 20;
// Requests of this many bytes or more are followed by a malloc_trim (process_and_close_socket).
constexpr size_t kTrimAfterBytes = size_t{1} << 20;

void address_of(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int got = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&address), &length)
                       : ::getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length);
  if (got != 0) return;
  char host[NI_MAXHOST];
  char service[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof(host), service, sizeof(service),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(service);
}

// malloc_trim(0), unless one ran within the last second.
void trim_malloc_now_and_then() {
  static std::atomic<int64_t> last_ms{-1000};
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t last = last_ms.load();
  if (now_ms - last < 1000 || !last_ms.compare_exchange_strong(last, now_ms)) return;
  ::malloc_trim(0);
}

// A client error this layer answers itself (408, 431).
ApiError client_error(int status, std::string message) {
  return ApiError(status, "invalid_request_error", std::move(message));
}

// A character of a token (RFC 9110 5.6.2): a header's name, a method.
bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

// The methods httplib reads a request of; any other is answered 501 here, as RFC 9110 (15.6.2)
// asks, where httplib would answer 400.
constexpr std::string_view kKnownMethods[] = {"GET",     "HEAD",  "POST",  "PUT", "DELETE",
                                              "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI"};
constexpr size_t kMethodBytes = 32;  // kept of a method for the check and the message
constexpr size_t kRequestLineBytes = 512;  // kept of a request line for a refusal's log line

// A method that is a well-formed token and none of kKnownMethods (a malformed request line
// stays httplib's to refuse).
bool unknown_method(const std::string& method) {
  return !method.empty() && method.size() < kMethodBytes && std::all_of(method.begin(), method.end(), token_char) &&
         std::find(std::begin(kKnownMethods), std::end(kKnownMethods), method) == std::end(kKnownMethods);
}

std::string known_methods() {
  std::string list;
  for (const std::string_view method : kKnownMethods) list.append(list.empty() ? "" : ", ").append(method);
  return list;
}

// The stream of the connection this thread is serving (null off a connection's thread).
thread_local ConnectionStream* current_stream = nullptr;

// A pre-routing outcome decided before a "100 Continue", for the request it was decided for.
// httplib routes that request right after the 100, on the same thread, pre-routing first:
// it is taken there, before any other request of the connection is read.
struct KeptRoute {
  const httplib::Request* request = nullptr;
  PreRouting::Outcome outcome = PreRouting::Outcome::Unhandled;
  httplib::Response response;  // the step's answer, where it gave one
};
thread_local KeptRoute kept_route;

// Forgets what is kept, where anything is (a request without Expect builds nothing here).
void forget_kept_route() {
  if (kept_route.request != nullptr) kept_route = KeptRoute();
}

}  // namespace

void close_after_response() {
  if (current_stream != nullptr) current_stream->request_close();
}

bool connection_refused() { return current_stream != nullptr && current_stream->refused(); }

void drop_response() {
  if (current_stream != nullptr) current_stream->drop_response();
}

bool connection_peer_ended() { return current_stream != nullptr && current_stream->peer_ended(); }

double connection_request_seconds() {
  if (current_stream == nullptr || !current_stream->request_started()) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - *current_stream->request_started()).count();
}

std::string connection_peer() { return current_stream != nullptr ? current_stream->peer() : "-"; }

std::string peer_text(const std::string& ip, int port) {
  if (ip.empty()) return "-";
  return (ip.find(':') != std::string::npos ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

PreRouting::Outcome PreRouting::route(const httplib::Request& req, httplib::Response& res) const {
  if (kept_route.request != &req) return step_(req, res);
  const Outcome outcome = kept_route.outcome;
  if (outcome == Outcome::Handled) res = std::move(kept_route.response);
  forget_kept_route();
  return outcome;
}

int PreRouting::expect_100(const httplib::Request& req, httplib::Response& res) const {
  forget_kept_route();
  httplib::Response early;
  const Outcome outcome = step_(req, early);
  // A refusal goes out now, unframed by a 100. A success is framed whole only as the answer
  // to a routed request (httplib gives an early answer no Content-Length unless it is an
  // error): it waits for route().
  if (outcome == Outcome::Handled && early.status >= 400) {
    res = std::move(early);
    return res.status;
  }
  if (before_continue_ && before_continue_(req, res)) return res.status;
  kept_route.request = &req;
  kept_route.outcome = outcome;
  kept_route.response = std::move(early);
  return 100;
}

ConnectionStream::ConnectionStream(socket_t sock, ConnectionLimits limits)
    : sock_(sock), limits_(limits), buffer_(kReadChunk) {}

int ConnectionStream::poll_socket(bool write, std::chrono::milliseconds wait) const {
  pollfd fd{sock_, static_cast<short>(write ? POLLOUT : POLLIN), 0};
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    const int ready = ::poll(&fd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready >= 0) return ready > 0 ? 1 : 0;
    if (errno != EINTR) return -1;
  }
}

bool ConnectionStream::is_readable() const {
  return begin_ < end_ || poll_socket(false, limits_.request_time) > 0;
}

bool ConnectionStream::is_writable() const {
  return !refused_ && poll_socket(true, limits_.write_wait) > 0;
}

void ConnectionStream::end_request() {
  in_request_ = false;
  in_head_ = false;
}

void ConnectionStream::begin_request() {
  in_request_ = true;
  in_head_ = true;
  head_bytes_ = 0;
  request_bytes_ = 0;
  head_end_match_ = 0;
  head_line_ = line_bytes_ = 0;
  past_colon_ = after_cr_ = space_in_name_ = false;
  request_line_.clear();
  line_gathered_ = false;
  method_ended_ = false;
  started_ = std::chrono::steady_clock::now();
  deadline_ = *started_ + limits_.request_time;
}

std::string ConnectionStream::peer() const {
  std::string ip;
  int port = 0;
  address_of(sock_, true, ip, port);
  return peer_text(ip, port);
}

ssize_t ConnectionStream::fill(bool append) {
  // Within a request the wait ends at its deadline; between requests a read waits as long.
  auto wait = limits_.request_time;
  if (in_request_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    wait = std::max(left, std::chrono::milliseconds(0));
  }
  const int ready = poll_socket(false, wait);
  if (ready <= 0) {
    if (ready == 0 && in_request_) {  // the request's deadline
      refuse(client_error(408, "the request did not arrive in full within " +
                                   std::to_string(limits_.request_time.count() / 1000) + " s (--read-timeout)"),
             "Request Timeout");
    }
    return -1;
  }
  // With `append`, the unread bytes go to the buffer's front, the new ones after them.
  const size_t kept = append ? end_ - begin_ : 0;
  if (kept > 0) std::memmove(buffer_.data(), buffer_.data() + begin_, kept);
  for (;;) {
    const ssize_t got = ::recv(sock_, buffer_.data() + kept, buffer_.size() - kept, 0);
    if (got >= 0) {
      begin_ = 0;
      end_ = kept + static_cast<size_t>(got);
      peer_ended_ = peer_ended_ || got == 0;
      return got;
    }
    if (errno != EINTR) return -1;
  }
}

bool ConnectionStream::gather_request_line() {
  for (;;) {
    const std::string_view buffered(buffer_.data() + begin_, end_ - begin_);
    // A line longer than the buffer is left to go as it came (httplib refuses it), and so
    // is one whose method is already known to be refused (501 at once, not at its end).
    if (buffered.find('\n') != std::string_view::npos || buffered.size() >= buffer_.size() || peer_ended_) break;
    const size_t space = buffered.find(' ');
    if (space != std::string_view::npos && unknown_method(std::string(buffered.substr(0, std::min(space, kMethodBytes))))) {
      break;
    }
    // Should the request's time run out (408), its log line shows what had come.
    request_line_.assign(buffered.substr(0, std::min(buffered.size(), kRequestLineBytes)));
    const ssize_t got = fill(true);
    request_line_.clear();  // the line is recorded as it goes to httplib
    if (got < 0) return false;
  }
  return true;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (refused_) return -1;
  if (begin_ == end_) {
    const ssize_t got = fill();
    if (got <= 0) return got;
  }
  if (in_head_ && head_line_ == 0 && !line_gathered_) {
    // Before the request line's first byte goes, the whole line is gathered, so that its
    // version can be read at its end even when it came in pieces.
    if (!gather_request_line() || !check_version()) return -1;
    line_gathered_ = true;
  }
  size_t n = std::min(size, end_ - begin_);
  if (in_head_) {
    // Count the head up to its blank line ("\r\n\r\n"): past the bound it is refused.
    static constexpr char kEnd[] = "\r\n\r\n";
    size_t i = 0;
    for (; i < n; ++i) {
      const char c = buffer_[begin_ + i];
      if (const char* wrong = check_head_byte(c)) {
        refuse(invalid_request(std::string("a request header line ") + wrong), "Bad Request");
        return -1;
      }
      if (c == ' ' && head_line_ == 0 && !method_ended_) {
        method_ended_ = true;
        const std::string method = request_line_.substr(0, kMethodBytes);
        if (unknown_method(method)) {
          refuse(ApiError(501, "invalid_request_error",
                          "method " + method + " is not implemented (known methods: " + known_methods() + ")", "",
                          "method_not_implemented"),
                 "Not Implemented");
          return -1;
        }
      }
      if (head_line_ == 0 && c != '\r' && c != '\n' && request_line_.size() < kRequestLineBytes) request_line_ += c;
      head_end_match_ = c == kEnd[head_end_match_] ? head_end_match_ + 1 : (c == '\r' ? 1 : 0);
      if (head_end_match_ == 4) {
        in_head_ = false;
        ++i;
        break;
      }
    }
    head_bytes_ += i;
    if (in_head_ && head_bytes_ > limits_.max_head_bytes) {
      refuse(client_error(431, "the request line and headers are over " + std::to_string(limits_.max_head_bytes) +
                                   " bytes"),
             "Request Header Fields Too Large");
      return -1;
    }
  }
  std::memcpy(ptr, buffer_.data() + begin_, n);
  begin_ += n;
  request_bytes_ += n;
  return static_cast<ssize_t>(n);
}

// The version at the end of a request line whole in the buffer (`gather_request_line`). A
// later HTTP/1.x is served as 1.1, the highest this server speaks (RFC 9110 2.5): its minor
// digit is mended before httplib (which knows 1.0 and 1.1) reads it. A version past 1.x (an
// HTTP/2 client's preface, "PRI * HTTP/2.0") is one this server does not speak (RFC 9110
// 15.6.6): 505, not a malformed line. Anything else goes to httplib as it came. False when
// refused.
bool ConnectionStream::check_version() {
  const std::string_view buffered(buffer_.data() + begin_, end_ - begin_);
  size_t end = buffered.find('\n');
  if (end == std::string_view::npos) return true;
  if (end > 0 && buffered[end - 1] == '\r') --end;
  const std::string_view line = buffered.substr(0, end);
  const size_t space = line.rfind(' ');
  if (space == std::string_view::npos) return true;
  const std::string_view version = line.substr(space + 1);
  if (version.size() != 8 || !version.starts_with("HTTP/") || version[6] != '.' || version[5] < '1' ||
      version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return true;
  }
  if (version[5] == '1') {
    if (version[7] >= '2') buffer_[begin_ + space + 8] = '1';
    return true;
  }
  request_line_.assign(line.substr(0, std::min(line.size(), kRequestLineBytes)));
  refuse(ApiError(505, "invalid_request_error",
                  std::string(version) + " is not served here: this server speaks HTTP/1.1 (and 1.0)", "",
                  "http_version_not_supported"),
         "HTTP Version Not Supported");
  return false;
}

const char* ConnectionStream::check_head_byte(char c) {
  if (c == '\0') return "holds a NUL byte";
  if (after_cr_ && c != '\n') return "holds a CR not followed by LF";
  after_cr_ = c == '\r';
  if (c == '\r') return nullptr;
  if (c == '\n') {
    // An empty line ends the head; any other field line needs its colon.
    if (head_line_ > 0 && line_bytes_ > 0 && !past_colon_) return "has no colon";
    ++head_line_;
    line_bytes_ = 0;
    past_colon_ = space_in_name_ = false;
    return nullptr;
  }
  const size_t at = line_bytes_++;
  if (head_line_ == 0 || past_colon_) return nullptr;  // the request line, a field's value
  if (c == ':') {
    past_colon_ = true;
    if (at == 0) return "has an empty name";
    return space_in_name_ ? "has whitespace before its colon" : nullptr;
  }
  if (c == ' ' || c == '\t') {
    if (at == 0) return "is folded (obs-fold)";
    // A line with no colon at all ("Foo bar") is told as such at its end.
    space_in_name_ = true;
    return nullptr;
  }
  return token_char(c) ? nullptr : "has a name that is not a token";
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  // After a refusal httplib's own answer (a 400 for the head it could not read) is dropped:
  // the failed write ends the connection.
  if (refused_) return -1;
  if (dropping_) return static_cast<ssize_t>(size);  // nobody reads it: not sent
  // httplib adds "Keep-Alive: timeout=…, max=…" to a response it means to keep open, beside
  // the "Connection: close" of an answer this stream will close after: that line leaves
  // the head, whether the head comes in one write from its status line or a line a write.
  // Only a response's head is looked at, not the body's writes.
  const std::string_view data(ptr, size);
  if (data.starts_with("HTTP/1.")) in_response_head_ = true;
  if (!in_response_head_) return send_some(ptr, size);
  const size_t head_end = data.find("\r\n\r\n");
  in_response_head_ = head_end == std::string_view::npos && data != "\r\n";
  if (!close_requested_) return send_some(ptr, size);
  size_t line = data.starts_with("Keep-Alive:") ? 0 : data.find("\r\nKeep-Alive:");
  if (line == std::string_view::npos || line > head_end) return send_some(ptr, size);
  if (line > 0) line += 2;  // the line after that CRLF
  const size_t line_end = std::min(data.find("\r\n", line), size - 2) + 2;
  std::string head(data.substr(0, line));
  head.append(data.substr(line_end));
  return send_all(head) ? static_cast<ssize_t>(size) : -1;
}

bool ConnectionStream::send_all(std::string_view data) {
  for (size_t offset = 0; offset < data.size();) {
    const ssize_t sent = send_some(data.data() + offset, data.size() - offset);
    if (sent <= 0) return false;
    offset += static_cast<size_t>(sent);
  }
  return true;
}

ssize_t ConnectionStream::send_some(const char* ptr, size_t size) {
  // (The request's deadline runs on through a "100 Continue": its body is still to come.)
  if (poll_socket(true, limits_.write_wait) <= 0) return -1;
  for (;;) {
    const ssize_t sent = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    if (sent >= 0) return sent;
    if (errno != EINTR) return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const { address_of(sock_, true, ip, port); }

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const { address_of(sock_, false, ip, port); }

void ConnectionStream::refuse_busy(size_t connections) {
  refuse(ApiError(503, "server_error",
                  "the server is serving as many connections as it may (" + std::to_string(connections) +
                      ", --max-connections); retry",
                  "", "unavailable"),
         "Service Unavailable", "Retry-After: 1\r\n");
}

void ConnectionStream::refuse(const ApiError& error, const char* reason, const std::string& extra) {
  const std::string body = error_body(error);
  // An id of its own, as every answer carries: the request's, if any, was not read whole.
  const std::string id = new_id("req");
  const std::string response = "HTTP/1.1 " + std::to_string(error.status) + " " + reason + "\r\nConnection: close\r\n" +
                               extra + "X-Request-Id: " + id + "\r\nDate: " +
                               http_date(std::chrono::system_clock::now()) + "\r\n" + limits_.refusal_headers +
                               "Content-Type: application/json\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body;
  end_request();
  send_all(response);
  refused_ = true;
  if (limits_.refused) limits_.refused(error.status, request_line_, id);
}

void bound_malloc_retention() {
  constexpr int kBytes = 1 << 20;
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) ::mallopt(M_MMAP_THRESHOLD, kBytes);
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) ::mallopt(M_TRIM_THRESHOLD, kBytes);
}

LingeringCloser::~LingeringCloser() {
  std::vector<Held> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    left.swap(incoming_);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (const Held& held : left) ::close(held.sock);
}

LingeringCloser::LingeringCloser() : thread_([this] { run(); }) {}

void LingeringCloser::add(socket_t sock, std::chrono::milliseconds wait, size_t max_bytes) {
  ::shutdown(sock, SHUT_WR);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      ::close(sock);
      return;
    }
    incoming_.push_back(Held{sock, std::chrono::steady_clock::now() + wait, max_bytes});
  }
  wake_.notify_one();
}

void LingeringCloser::run() {
  // New sockets are taken at least this often while some are held (none: it sleeps).
  constexpr std::chrono::milliseconds kTick{20};
  std::vector<Held> held;
  std::vector<pollfd> fds;
  std::vector<char> sink(kReadChunk);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (held.empty()) wake_.wait(lock, [this] { return stopping_ || !incoming_.empty(); });
      if (stopping_) break;
      held.insert(held.end(), incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    auto next = std::chrono::steady_clock::now() + kTick;
    fds.clear();
    for (const Held& entry : held) {
      next = std::min(next, entry.until);
      fds.push_back(pollfd{entry.sock, POLLIN, 0});
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait.count(), 0)));
    const auto now = std::chrono::steady_clock::now();
    size_t kept = 0;
    for (size_t i = 0; i < held.size(); ++i) {
      Held entry = held[i];
      bool done = now >= entry.until;
      if (!done && fds[i].revents != 0) {
        const ssize_t got = ::recv(entry.sock, sink.data(), sink.size(), MSG_DONTWAIT);
        if (got > 0) {
          entry.left -= std::min(entry.left, static_cast<size_t>(got));
          done = entry.left == 0;
        } else {
          done = got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
      }
      if (done) {
        ::close(entry.sock);
      } else {
        held[kept++] = entry;
      }
    }
    held.resize(kept);
  }
  for (const Held& entry : held) ::close(entry.sock);
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
  ConnectionLimits limits;
  limits.max_head_bytes = max_head_bytes_;
  limits.request_time = std::chrono::milliseconds(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000);
  limits.write_wait = std::chrono::milliseconds(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000);
  limits.refused = refused_hook_;
  limits.refusal_headers = refusal_headers_;
  ConnectionStream stream(sock, limits);
  bool over = false;
  {
    std::lock_guard<std::mutex> lock(live_mutex_);
    live_.insert(sock);
    over = live_.size() > max_connections_;
    if (cut_) ::shutdown(sock, SHUT_RDWR);
  }
  // One connection more than the server serves: a 503 now, not a wait in the queue for a
  // thread (a load balancer's probe would time out there).
  current_stream = &stream;
  if (over) stream.refuse_busy(max_connections_);
  bool ret = false;
  const auto running = [this] { return svr_sock_ != INVALID_SOCKET; };
  for (size_t count = over ? 0 : keep_alive_max_count_; count > 0; --count) {
    if (!stream.wait_for_request(std::chrono::seconds(keep_alive_timeout_sec_), running)) break;
    stream.begin_request();
    // Nothing a request before decided may reach this one (a Request is a local of
    // httplib's, whose address the next request may well have).
    forget_kept_route();
    bool closed = false;
    ret = process(*this, stream, count == 1, closed, 0);
    stream.end_request();
    // A large request (a prompt of megabytes, answered or refused) leaves tens of MB free in
    // this thread's malloc arena, which glibc keeps for the thread: with a thread a
    // connection and up to 8 arenas a core, refused requests alone grew the server by
    // hundreds of MB. Given back to the system after such a request, at most once a second
    // (a trim locks every arena in turn, the engine thread's too).
    if (stream.request_bytes() >= kTrimAfterBytes) trim_malloc_now_and_then();
    if (!ret || closed || stream.refused() || stream.close_requested()) break;
  }
  current_stream = nullptr;
  {
    std::lock_guard<std::mutex> lock(live_mutex_);  // cut_connections() never shuts a closed (reused) number
    live_.erase(sock);
  }
  // A connection ended with a request (or its body) possibly unread: a lingering close.
  if (over || !ret || stream.refused() || stream.close_requested()) {
    closer_.add(sock, kLinger, kLingerBytes);
  } else {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  return ret;
}

void BoundedServer::cut_connections() {
  std::lock_guard<std::mutex> lock(live_mutex_);
  cut_ = true;
  for (const socket_t sock : live_) ::shutdown(sock, SHUT_RDWR);
}

}  // namespace qwenrt::server
