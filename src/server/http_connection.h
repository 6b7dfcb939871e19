// The server's connections under cpp-httplib: its request parsing and routing, with our own
// stream for each connection and our own keep-alive loop. httplib 0.11 sets no bound on a
// request head in all (only 8 KiB a line), bounds each read but not a whole request, and
// builds a new stream (with a new read buffer) for each request, so that bytes read past
// one request (a pipelined one) are lost. ConnectionStream bounds the head's size and the
// whole request's time, answers a breach itself (431, 408), and keeps its buffer for the
// connection's life. It also refuses (400) header lines that httplib 0.11 passes over
// unread and a front proxy may read otherwise (RFC 9112 5.1, 5.2): no colon, whitespace
// before the colon, a name that is no token, a folded line, a NUL or a bare CR; a length
// written so would leave its body to be read as the next request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <httplib.h>

namespace qwenrt::server {

struct ApiError;  // api.h

struct ConnectionLimits {
  size_t max_head_bytes = 64 * 1024;         // request line and headers together
  std::chrono::milliseconds request_time{60000};  // a request's head and body, from its first byte (and any one read)
  std::chrono::milliseconds write_wait{30000};    // one write to a client that does not read
  // Told of each answer refuse() gives (/metrics, the access log): its status, as much of
  // the request line as had arrived (bounded; empty if none) and the answer's X-Request-Id.
  std::function<void(int status, const std::string& request_line, const std::string& id)> refused;
  std::string refusal_headers;  // header lines ("Name: value\r\n") each answer refuse() gives carries besides its own
};

class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, ConnectionLimits limits);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return sock_; }

  // Waits up to `idle` for the first byte of the next request, looking at `keep_going`
  // every 100 ms (the server stopping). Empty lines before a request are passed over (RFC
  // 9112 2.2: some clients end a body with one more CRLF). False: none came, the peer
  // closed, or stopped.
  template <typename KeepGoing>
  bool wait_for_request(std::chrono::milliseconds idle, KeepGoing keep_going) {
    const auto until = std::chrono::steady_clock::now() + idle;
    while (keep_going()) {
      while (begin_ < end_ && (buffer_[begin_] == '\r' || buffer_[begin_] == '\n')) ++begin_;
      if (begin_ < end_) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      const int ready = poll_socket(/*write=*/false, std::min(left, std::chrono::milliseconds(100)));
      if (ready < 0) return false;
      if (ready > 0 && fill() <= 0) return false;
    }
    return false;
  }
  // A new request starts with the bytes buffered now: its deadline and head count begin.
  void begin_request();
  // Its response is written: no deadline until the next request.
  void end_request();
  // Bytes of the request being served (or the last one) read so far: its head and body.
  size_t request_bytes() const { return request_bytes_; }
  // This connection's request broke a bound and was answered here: it is closed after.
  bool refused() const { return refused_; }
  // Answers 503 (with Retry-After) before reading a request: the server serves as many
  // connections as it may. The connection is closed after.
  void refuse_busy(size_t connections);
  // Close the connection once the response being made is written (see close_after_response).
  void request_close() { close_requested_ = true; }
  // The response being made is not sent, and the connection is closed (see drop_response).
  void drop_response() { dropping_ = close_requested_ = true; }
  // A read found the client's end of the connection (it shut its sending side, or closed).
  bool peer_ended() const { return peer_ended_; }
  bool close_requested() const { return close_requested_; }
  // When the request being served began to arrive (its first byte); none before the first.
  std::optional<std::chrono::steady_clock::time_point> request_started() const { return started_; }
  // The client's address, "ip:port" ("-" where the socket says none).
  std::string peer() const;

 private:
  // poll() for reading or writing up to `wait`: 1 ready, 0 not, -1 error.
  int poll_socket(bool write, std::chrono::milliseconds wait) const;
  // One send of what the socket takes now, within limits_.write_wait: bytes sent, -1 on error.
  ssize_t send_some(const char* ptr, size_t size);
  // All of `data`, within limits_.write_wait a send: false on an error.
  bool send_all(std::string_view data);
  // Reads what the socket has into the buffer (it is empty), waiting up to the request's
  // deadline (408 past it): bytes read, 0 at the peer's end, -1 on error or timeout.
  // With `append`, the bytes read go after those unread (moved to the buffer's front).
  ssize_t fill(bool append = false);
  // Reads until the buffer holds a whole request line (or is full, or the peer has ended):
  // false on an error or the request's deadline (refused with 408).
  bool gather_request_line();
  // Answers the request here with `error` (its status line's `reason`, `extra` header lines)
  // and closes the connection after.
  void refuse(const ApiError& error, const char* reason, const std::string& extra = "");
  // Checks one byte of the head's lines: a reason to refuse it, or null.
  const char* check_head_byte(char c);
  // A gathered request line's version: HTTP/1.2 to 1.9 mended to read 1.1; past 1.x
  // refused with 505 (false).
  bool check_version();

  socket_t sock_;
  ConnectionLimits limits_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  std::chrono::steady_clock::time_point deadline_{};
  std::optional<std::chrono::steady_clock::time_point> started_;
  bool in_request_ = false;
  bool in_head_ = false;
  size_t head_bytes_ = 0;
  size_t request_bytes_ = 0;
  int head_end_match_ = 0;  // bytes of "\r\n\r\n" matched at the head's end so far
  // The head's current line: which (0: the request line), bytes into it, past its colon, after a CR.
  size_t head_line_ = 0, line_bytes_ = 0;
  bool past_colon_ = false, after_cr_ = false;
  bool space_in_name_ = false;  // whitespace inside this field line's name (refused at its colon)
  // The request line as far as it has arrived (a bounded prefix); its method is what comes
  // before its first space.
  std::string request_line_;
  // The request line was gathered (whole in the buffer, or as much as could be) before its
  // first byte went to httplib.
  bool line_gathered_ = false;
  bool method_ended_ = false;
  bool refused_ = false;
  bool close_requested_ = false;
  bool in_response_head_ = false;  // writing a response's status line and headers
  bool dropping_ = false;
  bool peer_ended_ = false;
};

// Has the connection whose request the calling thread serves (a route's handler, httplib's
// error handler, a content provider: httplib calls them on the connection's thread) closed
// once its response is written, whatever httplib would do: for an answer given without
// reading the request's body, which must not be read as the next request. No effect off a
// connection's thread.
void close_after_response();
// Whether the connection the calling thread serves has answered its request itself (408,
// 431): httplib then logs an answer of its own that never went out.
bool connection_refused();
// For a client seen gone: the response being made (a status for /metrics) is not sent,
// and the connection is closed, as nginx does with its 499. No effect off a connection's thread.
void drop_response();
// Whether a read on the calling thread's connection found the client's end (false off one).
bool connection_peer_ended();
// For the access log: seconds since the request the calling thread's connection serves
// began to arrive (negative off a connection's thread, or before its first request), and the
// client's "ip:port" ("-" off one), for answers the connection gives with no httplib Request.
double connection_request_seconds();
std::string connection_peer();
// A client's address as the access log shows it: "ip:port", "[ip6]:port", "-" for none.
std::string peer_text(const std::string& ip, int port);

// A server's pre-routing step (the key, the route, the method: answers its request's head
// alone decides), run once a request. httplib asks about a request waiting for "100
// Continue" twice: its expect handler before the 100, then, after it, its pre-routing
// handler as for any request. expect_100() runs the step, and sends a refusal it gives (a
// status of 400 or more), or one `before_continue` gives, in place of the 100; any other
// outcome is kept (on the connection's thread, for this request alone) and handed over by
// the route() httplib calls next for it, the step not run again. The connection's loop
// forgets what is kept before each request it reads.
class PreRouting {
 public:
  using Outcome = httplib::Server::HandlerResponse;
  using Step = std::function<Outcome(const httplib::Request&, httplib::Response&)>;
  // Writes a refusal into the response and returns true, or returns false.
  using Check = std::function<bool(const httplib::Request&, httplib::Response&)>;
  explicit PreRouting(Step step, Check before_continue = {})
      : step_(std::move(step)), before_continue_(std::move(before_continue)) {}
  // httplib's pre-routing handler.
  Outcome route(const httplib::Request& req, httplib::Response& res) const;
  // httplib's expect handler: 100, or the status of the refusal `res` now holds.
  int expect_100(const httplib::Request& req, httplib::Response& res) const;

 private:
  Step step_;
  Check before_continue_;
};

// Bounds what glibc's malloc keeps of memory a thread freed; called once, before the server's
// threads start. With a thread a connection, each with an arena of its own (up to 8 a
// core), glibc's dynamic thresholds let every arena keep up to twice the largest block it
// freed (up to 64 MiB) unreturned: a client sending prompts of megabytes grew the server by
// 8 MiB a connection thread, for good (malloc_trim returns no arena's top but the main
// one's). Fixed thresholds instead: blocks of 1 MiB and more are mapped on their own (and
// returned when freed), and an arena gives back what is free past 1 MiB at its top. A
// MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ in the environment is left to rule.
void bound_malloc_retention();

// Lingering closes, on one thread of their own. A connection that ends with bytes of the
// client's perhaps unread (a refused request, a 503 given before reading anything) must not
// simply be closed: closing a socket with unread bytes resets the connection, and the
// client may lose the answer. Its sending side is shut here and what the client still
// sends is read and dropped for a moment (`wait`, `max_bytes`), then it is closed, while
// the connection's own thread goes back to serving at once (one per idle client would
// hold up the 503s that must go out at once).
class LingeringCloser {
 public:
  LingeringCloser();  // starts its thread (not later, on a connection's thread, where it could fail)
  LingeringCloser(const LingeringCloser&) = delete;
  LingeringCloser& operator=(const LingeringCloser&) = delete;
  ~LingeringCloser();  // closes the sockets still held
  // Takes `sock` over: it is closed here.
  void add(socket_t sock, std::chrono::milliseconds wait, size_t max_bytes);

 private:
  struct Held {
    socket_t sock;
    std::chrono::steady_clock::time_point until;
    size_t left;  // bytes still to read and drop
  };
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Held> incoming_;
  bool stopping_ = false;
  std::thread thread_;
};

// httplib's server with ConnectionStream and its own keep-alive loop.
class BoundedServer final : public httplib::Server {
 public:
  explicit BoundedServer(size_t max_head_bytes = 64 * 1024) : max_head_bytes_(max_head_bytes) {}
  // Connections served at once; one past them is answered 503 at once (its thread pool
  // needs a few threads more than this to do so).
  void set_max_connections(size_t count) { max_connections_ = count; }
  // Told of each request a connection answers itself (408, 431), with its status.
  void on_refused(std::function<void(int status, const std::string& request_line, const std::string& id)> hook) {
    refused_hook_ = std::move(hook);
  }
  // Header lines ("Name: value\r\n") those answers carry besides their own (Vary: Origin).
  void set_refusal_headers(std::string lines) { refusal_headers_ = std::move(lines); }
  // Shuts every connection's socket, now and as they come: a read or write that waits on a
  // client (a head never finished, a client that stopped reading) ends at once rather than
  // at its timeout. After stop(), so that the server's end is not held by a slow client.
  void cut_connections();

 private:
  bool process_and_close_socket(socket_t sock) override;
  // process_request's two signatures: 0.11's, and later releases' with the addresses.
  template <typename Self>
  static auto process(Self& self, httplib::Stream& strm, bool close, bool& closed, int)
      -> decltype(self.process_request(strm, std::string(), 0, std::string(), 0, close, closed, nullptr)) {
    std::string remote, local;
    int remote_port = 0, local_port = 0;
    strm.get_remote_ip_and_port(remote, remote_port);
    strm.get_local_ip_and_port(local, local_port);
    return self.process_request(strm, remote, remote_port, local, local_port, close, closed, nullptr);
  }
  template <typename Self>
  static auto process(Self& self, httplib::Stream& strm, bool close, bool& closed, long)
      -> decltype(self.process_request(strm, close, closed, nullptr)) {
    return self.process_request(strm, close, closed, nullptr);
  }

  size_t max_head_bytes_;
  size_t max_connections_ = SIZE_MAX;
  std::function<void(int status, const std::string& request_line, const std::string& id)> refused_hook_;
  std::string refusal_headers_;
  std::mutex live_mutex_;
  std::unordered_set<socket_t> live_;  // the sockets being served (taken out before they are closed)
  bool cut_ = false;
  LingeringCloser closer_;
};

}  // namespace qwenrt::server
