// ConnectionStream over a socket pair: the bounds httplib does not set (a request head in
// all, a request's time), pipelined bytes kept between requests, empty lines before one.
// PreRouting: the server's pre-routing run once a request, also under Expect: 100-continue.
#ifdef QWENRT_HAVE_HTTP

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "server/http_connection.h"

namespace qwenrt::server {
namespace {

struct Pair {
  int server = -1, client = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    server = fds[0];
    client = fds[1];
  }
  ~Pair() {
    ::close(server);
    ::close(client);
  }
  void send(const std::string& text) const { ASSERT_EQ(::write(client, text.data(), text.size()), static_cast<ssize_t>(text.size())); }
  std::string received() const {
    std::string out(4096, '\0');
    const ssize_t got = ::recv(client, out.data(), out.size(), MSG_DONTWAIT);
    out.resize(got > 0 ? static_cast<size_t>(got) : 0);
    return out;
  }
};

// Reads until the head's blank line (true) or a failed read (false), as httplib's line
// reader does, a byte at a time.
bool read_head(ConnectionStream& stream, std::string& head) {
  char c;
  while (stream.read(&c, 1) == 1) {
    head += c;
    if (head.size() >= 4 && head.compare(head.size() - 4, 4, "\r\n\r\n") == 0) return true;
  }
  return false;
}

ConnectionLimits limits(size_t head_bytes, int request_ms) {
  ConnectionLimits l;
  l.max_head_bytes = head_bytes;
  l.request_time = std::chrono::milliseconds(request_ms);
  l.write_wait = std::chrono::milliseconds(1000);
  return l;
}

const auto kForever = [] { return true; };

// A request begun on what was sent, its head read as read_head reads it.
bool read_request_head(ConnectionStream& stream, std::string& head) {
  if (!stream.wait_for_request(std::chrono::milliseconds(1000), kForever)) {
    ADD_FAILURE() << "no request came";
    return false;
  }
  stream.begin_request();
  return read_head(stream, head);
}

TEST(ConnectionStream, PipelinedRequestsAndEmptyLinesBetweenThem) {
  Pair pair;
  ConnectionStream stream(pair.server, limits(1024, 2000));
  pair.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
  stream.begin_request();
  std::string first;
  ASSERT_TRUE(read_head(stream, first));
  EXPECT_EQ(first, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  stream.end_request();
  // The second request was read with the first: it is served from the buffer, the empty
  // line before it passed over.
  ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(0), kForever));
  stream.begin_request();
  std::string second;
  ASSERT_TRUE(read_head(stream, second));
  EXPECT_EQ(second, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_FALSE(stream.refused());
}

// A later HTTP/1.x is read as 1.1 (RFC 9110 2.5), also pipelined; 1.0, 1.1 and what is no
// version pass as they came (httplib answers those itself).
TEST(ConnectionStream, ALaterMinorVersionIsReadAs11) {
  Pair pair;
  ConnectionStream stream(pair.server, limits(1024, 2000));
  pair.send("GET /a HTTP/1.2\r\nHost: x\r\n\r\nGET /b HTTP/1.9\r\nHost: x\r\n\r\nGET /c HTTP/1.0\r\n\r\n"
            "GET /d HTTP/1.a\r\n\r\nGET /HTTP/1.2 HTTP/1.1\r\n\r\n");
  for (const char* expected : {"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
                               "GET /c HTTP/1.0\r\n\r\n", "GET /d HTTP/1.a\r\n\r\n", "GET /HTTP/1.2 HTTP/1.1\r\n\r\n"}) {
    ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
    stream.begin_request();
    std::string head;
    ASSERT_TRUE(read_head(stream, head));
    EXPECT_EQ(head, expected);
    stream.end_request();
  }
  EXPECT_FALSE(stream.refused());
}

// The same when the request line comes in pieces, the last one its minor digit and line end.
TEST(ConnectionStream, ALaterMinorVersionSplitAcrossReadsIsReadAs11) {
  Pair pair;
  ConnectionStream stream(pair.server, limits(1024, 2000));
  pair.send("GET /a HT");
  std::thread writer([&pair] {
    for (const char* piece : {"TP/1.", "2", "\r", "\nHost: x\r\n\r\n"}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      pair.send(piece);
    }
  });
  std::string head;
  const bool whole = read_request_head(stream, head);
  writer.join();
  ASSERT_TRUE(whole);
  EXPECT_EQ(head, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_FALSE(stream.refused());
}

// A request line that never ends within the request's time is refused with 408, as a head
// is; the refusal's log line shows what of it had come.
TEST(ConnectionStream, ARequestLineThatNeverEndsGets408) {
  Pair pair;
  ConnectionLimits with_log = limits(1024, 200);
  int logged_status = 0;
  std::string logged_line;
  with_log.refused = [&](int status, const std::string& line, const std::string&) {
    logged_status = status;
    logged_line = line;
  };
  ConnectionStream stream(pair.server, with_log);
  pair.send("GET /a HTTP/1.");
  std::string head;
  EXPECT_FALSE(read_request_head(stream, head));
  EXPECT_TRUE(head.empty());
  EXPECT_TRUE(stream.refused());
  EXPECT_EQ(pair.received().rfind("HTTP/1.1 408 ", 0), 0u);
  EXPECT_EQ(logged_status, 408);
  EXPECT_EQ(logged_line, "GET /a HTTP/1.");
}

// An unknown method is answered once its space has come, not when the line ends (which may
// be never: 501 at once rather than 408 after the request's time).
TEST(ConnectionStream, AnUnknownMethodIsAnsweredBeforeItsLineEnds) {
  Pair pair;
  ConnectionStream stream(pair.server, limits(1024, 5000));
  pair.send("BREW / HT");
  const auto start = std::chrono::steady_clock::now();
  std::string head;
  EXPECT_FALSE(read_request_head(stream, head));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
  EXPECT_EQ(pair.received().rfind("HTTP/1.1 501 ", 0), 0u);
}

TEST(ConnectionStream, AResponseItClosesAfterLosesHttplibsKeepAliveLine) {
  Pair pair;
  ConnectionStream stream(pair.server, limits(1024, 1000));
  const std::string head = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nKeep-Alive: timeout=5, max=1000\r\n"
                           "Content-Length: 2\r\n\r\n";
  // Kept open: the response as httplib wrote it.
  ASSERT_EQ(stream.write(head.data(), head.size()), static_cast<ssize_t>(head.size()));
  EXPECT_EQ(pair.received(), head);
  // To be closed after: the Keep-Alive line is gone, the rest as it was, and the body (a
  // later write, which may hold the same text) untouched.
  stream.request_close();
  ASSERT_EQ(stream.write(head.data(), head.size()), static_cast<ssize_t>(head.size()));
  EXPECT_EQ(pair.received(), "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 2\r\n\r\n");
  const std::string body = "{}\r\nKeep-Alive: x\r\n";
  ASSERT_EQ(stream.write(body.data(), body.size()), static_cast<ssize_t>(body.size()));
  EXPECT_EQ(pair.received(), body);
  // A head written a line at a time: the same.
  std::string sent;
  for (const std::string piece : {"HTTP/1.1 404 Not Found\r\n", "Connection: close\r\n", "Keep-Alive: timeout=5, max=9\r\n",
                                  "Content-Length: 2\r\n", "\r\n", "Keep-Alive: body"}) {
    ASSERT_EQ(stream.write(piece.data(), piece.size()), static_cast<ssize_t>(piece.size()));
    sent += pair.received();
  }
  EXPECT_EQ(sent, "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 2\r\n\r\nKeep-Alive: body");
}

TEST(ConnectionStream, HeadOverTheBoundIsRefusedWith431) {
  Pair pair;
  ConnectionStream stream(pair.server, limits(64, 2000));
  pair.send("GET / HTTP/1.1\r\nX-Filler: " + std::string(100, 'y') + "\r\n\r\n");
  ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
  stream.begin_request();
  std::string head;
  EXPECT_FALSE(read_head(stream, head));
  EXPECT_LE(head.size(), 64u);
  EXPECT_TRUE(stream.refused());
  EXPECT_EQ(pair.received().rfind("HTTP/1.1 431 ", 0), 0u);
  EXPECT_EQ(stream.write("x", 1), -1);  // httplib's own answer after it is dropped
}

TEST(ConnectionStream, HeaderLinesAProxyCouldReadOtherwiseAreRefusedWith400) {
  // httplib 0.11 passes over such lines: a length written so left its body to be read as
  // the next request.
  // Each with what its 400 says is wrong.
  const std::pair<std::string, const char*> cases[] = {
      {"Content-Length : 5\r\n", "whitespace before its colon"},
      {"Content-Length\t: 5\r\n", "whitespace before its colon"},
      {"X-A: 1\r\n Content-Length: 5\r\n", "folded"},
      {"Content-Length 5\r\n", "has no colon"},
      {"Content-Length\r\n", "has no colon"},
      {": 5\r\n", "empty name"},
      {"Content\"Length: 5\r\n", "not a token"},
      {std::string("X-A: 1\0\r\n", 9), "NUL"},
      {"X-A: 1\r2\r\n", "CR not followed by LF"},
  };
  for (const auto& [line, why] : cases) {
    Pair pair;
    ConnectionStream stream(pair.server, limits(4096, 2000));
    pair.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + line + "\r\nhello");
    ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
    stream.begin_request();
    std::string head;
    EXPECT_FALSE(read_head(stream, head)) << line;
    EXPECT_TRUE(stream.refused()) << line;
    const std::string answer = pair.received();
    EXPECT_EQ(answer.rfind("HTTP/1.1 400 ", 0), 0u) << line;
    EXPECT_NE(answer.find(why), std::string::npos) << line << answer;
  }
  // Values may hold colons, spaces and tabs; the request line is not a field line.
  Pair pair;
  ConnectionStream stream(pair.server, limits(4096, 2000));
  pair.send("GET http://x:1/a%20b HTTP/1.1\r\nHost: x:1\r\nX-Odd:\t a: b \t\r\nX-Empty:\r\n\r\n");
  ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
  stream.begin_request();
  std::string head;
  EXPECT_TRUE(read_head(stream, head));
  EXPECT_FALSE(stream.refused());
}

TEST(ConnectionStream, HeaderLineVerdictsDoNotDependOnHowTheHeadArrives) {
  // Each head sent whole and a byte a send, read as httplib reads a head (a byte a read):
  // refused alike (the checker's state lives across reads); after a good head the next
  // pipelined one is read afresh, its checks begun anew.
  const std::pair<std::string, bool> heads[] = {
      {"GET / HTTP/1.1\r\nHost: x\r\nX-A: b:c\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nHost: x\r\n\tX-A: b\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nHost: x\r\nX-A: b\rc\r\n\r\n", true},
      {"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", false},  // the request line is httplib's to judge
  };
  for (const auto& [head, refused] : heads) {
    for (const bool bytewise : {false, true}) {
      Pair pair;
      ConnectionStream stream(pair.server, limits(4096, 2000));
      if (bytewise) {
        for (const char c : head) pair.send(std::string(1, c));
      } else {
        pair.send(head);
      }
      pair.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
      ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
      stream.begin_request();
      std::string first;
      EXPECT_EQ(read_head(stream, first), !refused) << head;
      EXPECT_EQ(stream.refused(), refused) << head;
      if (refused) continue;
      stream.end_request();
      ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
      stream.begin_request();
      std::string second;
      EXPECT_TRUE(read_head(stream, second)) << head;
      EXPECT_EQ(second, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
    }
  }
}

TEST(ConnectionStream, AMethodHttplibDoesNotKnowIsAnswered501) {
  // RFC 9110 15.6.2: a method the server does not recognise is a 501 (httplib: 400).
  // Methods are case-sensitive; a request line that is no request line stays httplib's. A
  // version past 1.x (an HTTP/2 preface) is a 505 (RFC 9110 15.6.6); a later 1.x is read as
  // 1.1 (ALaterMinorVersionIsReadAs11).
  const std::pair<std::string, int> lines[] = {
      {"BREW /pot HTTP/1.1", 501}, {"get / HTTP/1.1", 501}, {"M-SEARCH * HTTP/1.1", 501},
      {"GET / HTTP/1.1", 0},       {"PATCH /v1/models HTTP/1.1", 0}, {"TRACE / HTTP/1.1", 0},
      {"PRI * HTTP/2.0", 505},     {"GET / HTTP/3.0", 505},    {"G(T / HTTP/1.1", 0},  {std::string(40, 'X') + " / HTTP/1.1", 0},
      {"GET /" + std::string(600, 'a') + " HTTP/2.0", 505},  // past the 512 bytes a log line keeps
  };
  for (const auto& [line, status] : lines) {
    for (const bool bytewise : {false, true}) {
      // (A socket pair holds a few hundred one-byte writes: a long line goes in one.)
      if (bytewise && line.size() > 100) continue;
      Pair pair;
      ConnectionStream stream(pair.server, limits(4096, 2000));
      const std::string head = line + "\r\nHost: x\r\n\r\n";
      if (bytewise) {
        for (const char c : head) pair.send(std::string(1, c));
      } else {
        pair.send(head);
      }
      ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
      stream.begin_request();
      std::string got;
      EXPECT_EQ(read_head(stream, got), status == 0) << line;
      EXPECT_EQ(stream.refused(), status != 0) << line;
      const std::string answer = pair.received();
      if (status == 505) {
        EXPECT_EQ(answer.rfind("HTTP/1.1 505 HTTP Version Not Supported\r\n", 0), 0u) << line;
        EXPECT_NE(answer.find("\"code\":\"http_version_not_supported\""), std::string::npos) << answer;
      } else if (status != 0) {
        EXPECT_EQ(answer.rfind("HTTP/1.1 501 Not Implemented\r\n", 0), 0u) << line;
        EXPECT_NE(answer.find("\"code\":\"method_not_implemented\""), std::string::npos) << answer;
        EXPECT_NE(answer.find("method " + line.substr(0, line.find(' ')) + " is not implemented"), std::string::npos)
            << answer;
      } else {
        EXPECT_EQ(got, head) << line;
        EXPECT_EQ(answer, "") << line;
      }
    }
  }
}

TEST(ConnectionStream, HeadWithinTheBoundIsNotRefused) {
  Pair pair;
  const std::string request = "GET / HTTP/1.1\r\nX-Filler: " + std::string(30, 'y') + "\r\n\r\n";
  ConnectionStream stream(pair.server, limits(request.size(), 2000));
  pair.send(request + "body bytes past the head are not counted");
  ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
  stream.begin_request();
  std::string head;
  ASSERT_TRUE(read_head(stream, head));
  char body[64];
  EXPECT_GT(stream.read(body, sizeof(body)), 0);
  EXPECT_FALSE(stream.refused());
}

TEST(ConnectionStream, RequestNotInWithinItsTimeIsRefusedWith408) {
  Pair pair;
  ConnectionStream stream(pair.server, limits(1024, 200));
  pair.send("GET / HTTP/1.1\r\n");  // and nothing more
  ASSERT_TRUE(stream.wait_for_request(std::chrono::milliseconds(1000), kForever));
  const auto start = std::chrono::steady_clock::now();
  stream.begin_request();
  std::string head;
  EXPECT_FALSE(read_head(stream, head));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_LT(waited, std::chrono::milliseconds(1500));
  EXPECT_TRUE(stream.refused());
  EXPECT_EQ(pair.received().rfind("HTTP/1.1 408 ", 0), 0u);
}

TEST(ConnectionStream, WaitingForARequestEndsWhenToldOrWhenThePeerCloses) {
  Pair pair;
  ConnectionStream stream(pair.server, limits(1024, 2000));
  EXPECT_FALSE(stream.wait_for_request(std::chrono::milliseconds(5000), [] { return false; }));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(stream.wait_for_request(std::chrono::milliseconds(150), kForever));  // idle
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  ::shutdown(pair.client, SHUT_WR);
  EXPECT_FALSE(stream.wait_for_request(std::chrono::milliseconds(5000), kForever));
}

// httplib asks about a request that waits for "100 Continue" twice, in this order: its
// expect handler, then (after the 100) its pre-routing handler. The server's pre-routing step
// runs once either way; a refusal goes out in place of the 100, anything else is handed over
// after it to that request alone.
TEST(PreRouting, RunsOnceARequestAlsoWhenItWaitsFor100Continue) {
  using Outcome = PreRouting::Outcome;
  int runs = 0;
  const PreRouting routing(
      [&runs](const httplib::Request& req, httplib::Response& res) {
        ++runs;
        if (req.path == "/refused") {
          res.status = 401;
          res.set_content("{\"error\":{}}", "application/json");
          return Outcome::Handled;
        }
        if (req.path == "/answered") {
          res.set_content("{\"id\":\"m\"}", "application/json");
          return Outcome::Handled;
        }
        return Outcome::Unhandled;
      },
      [](const httplib::Request& req, httplib::Response& res) {  // the body's framing
        if (req.get_header_value("Content-Length") != "huge") return false;
        res.status = 413;
        return true;
      });
  const auto request = [](const std::string& path, const std::string& length = "") {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    if (!length.empty()) req.set_header("Content-Length", length);
    return req;
  };
  // Without "Expect": once, where httplib routes.
  {
    const httplib::Request req = request("/go");
    httplib::Response res;
    EXPECT_EQ(routing.route(req, res), Outcome::Unhandled);
    EXPECT_EQ(runs, 1);
  }
  // A request the step lets through: a 100, then routed, the step not run again.
  {
    runs = 0;
    const httplib::Request req = request("/go", "2");
    httplib::Response res;
    EXPECT_EQ(routing.expect_100(req, res), 100);
    EXPECT_EQ(routing.route(req, res), Outcome::Unhandled);
    EXPECT_EQ(runs, 1);
  }
  // One it answers (a success): a 100, then its answer as the step gave it.
  {
    runs = 0;
    const httplib::Request req = request("/answered");
    httplib::Response res;
    EXPECT_EQ(routing.expect_100(req, res), 100);
    EXPECT_TRUE(res.body.empty()) << "nothing is answered before the 100";
    EXPECT_EQ(routing.route(req, res), Outcome::Handled);
    EXPECT_EQ(res.body, "{\"id\":\"m\"}");
    EXPECT_EQ(runs, 1);
  }
  // One it refuses: the refusal in place of the 100. Nothing is kept: the next request
  // (here in the same place) is asked anew.
  {
    runs = 0;
    const httplib::Request req = request("/refused", "2");
    httplib::Response res;
    EXPECT_EQ(routing.expect_100(req, res), 401);
    EXPECT_EQ(res.status, 401);
    EXPECT_EQ(res.body, "{\"error\":{}}");
    EXPECT_EQ(runs, 1);
    httplib::Response next;
    EXPECT_EQ(routing.route(req, next), Outcome::Handled);
    EXPECT_EQ(runs, 2);
  }
  // One whose body the head refuses after the step let it through: that refusal, nothing kept.
  {
    runs = 0;
    const httplib::Request req = request("/answered", "huge");
    httplib::Response res;
    EXPECT_EQ(routing.expect_100(req, res), 413);
    EXPECT_TRUE(res.body.empty());
    EXPECT_EQ(runs, 1);
    httplib::Response next;
    EXPECT_EQ(routing.route(req, next), Outcome::Handled);
    EXPECT_EQ(runs, 2);
  }
  // What is kept is for its own request alone.
  {
    runs = 0;
    const httplib::Request asked = request("/answered");
    httplib::Response res;
    EXPECT_EQ(routing.expect_100(asked, res), 100);
    const httplib::Request other = request("/go");
    EXPECT_EQ(routing.route(other, res), Outcome::Unhandled);
    EXPECT_EQ(runs, 2);
  }
}

}  // namespace
}  // namespace qwenrt::server

#endif  // QWENRT_HAVE_HTTP
