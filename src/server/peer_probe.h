// Whether the client of a connection has gone, asked without writing to it. The HTTP
// library hands a request's handler the connection's addresses but not its socket, so the
// socket is found by them (once a connection: the handler's thread keeps it), and then
// asked each engine step whether its peer has closed. A non-streamed response can then wait
// for its whole result, with its own status, and still cancel a client that has gone.
#pragma once

#include <string>

namespace qwenrt::server {

// The two ends of a TCP connection as the HTTP library names them: numeric host text
// (getnameinfo with NI_NUMERICHOST) and port.
struct ConnectionEnds {
  std::string local_addr;
  int local_port = -1;
  std::string remote_addr;
  int remote_port = -1;
};

class PeerProbe {
 public:
  PeerProbe() = default;
  // The open socket of this process whose ends are these; none found: found() is false.
  // Meant for the thread that serves the connection (the socket stays open while it does);
  // the last connection a thread found is checked first.
  static PeerProbe find(const ConnectionEnds& ends);
  bool found() const { return fd_ >= 0; }
  int descriptor() const { return fd_; }  // -1 when not found
  // True once the peer has closed the connection (or shut down its sending side: HTTP
  // clients do not do that while they wait for a response) or the connection has failed.
  // Data the client sent ahead (a pipelined request) is left unread. False when not found.
  bool peer_closed() const;

 private:
  explicit PeerProbe(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace qwenrt::server
