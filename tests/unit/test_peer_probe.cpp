// PeerProbe: the socket of a connection found by its two ends, and a client that has gone
// noticed without a write, on real loopback connections.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "server/peer_probe.h"

namespace qwenrt::server {
namespace {

// A listening socket on loopback and connections to it: the accepted end is the server's.
class Loopback {
 public:
  explicit Loopback(int family = AF_INET) : family_(family) {
    listener_ = ::socket(family_, SOCK_STREAM, 0);
    sockaddr_storage address = loopback(0);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length()) != 0 ||
        ::listen(listener_, 8) != 0) {
      return;
    }
    socklen_t size = sizeof(address);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(family_ == AF_INET ? reinterpret_cast<sockaddr_in*>(&address)->sin_port
                                     : reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  ~Loopback() {
    if (listener_ >= 0) ::close(listener_);
  }
  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  std::string host() const { return family_ == AF_INET ? "127.0.0.1" : "::1"; }

  // Connects a client; returns {client, accepted}.
  std::pair<int, int> connect() {
    const int client = ::socket(family_, SOCK_STREAM, 0);
    sockaddr_storage address = loopback(port_);
    EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&address), length()), 0);
    const int accepted = ::accept(listener_, nullptr, nullptr);
    EXPECT_GE(accepted, 0);
    return {client, accepted};
  }

  // The ends as the HTTP library reports them for the accepted socket.
  ConnectionEnds ends_of(int client) const {
    sockaddr_storage address{};
    socklen_t size = sizeof(address);
    ::getsockname(client, reinterpret_cast<sockaddr*>(&address), &size);
    const int client_port =
        ntohs(family_ == AF_INET ? reinterpret_cast<sockaddr_in*>(&address)->sin_port
                                 : reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
    return ConnectionEnds{host(), port_, host(), client_port};
  }

 private:
  sockaddr_storage loopback(int port) const {
    sockaddr_storage address{};
    if (family_ == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&address);
      in->sin_family = AF_INET;
      in->sin_port = htons(static_cast<uint16_t>(port));
      in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
      in6->sin6_family = AF_INET6;
      in6->sin6_port = htons(static_cast<uint16_t>(port));
      in6->sin6_addr = in6addr_loopback;
    }
    return address;
  }
  socklen_t length() const {
    return family_ == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  }

  int family_;
  int listener_ = -1;
  int port_ = -1;
};

// The close reaches the other end through the loopback device: give it a moment.
bool becomes_closed(const PeerProbe& probe) {
  for (int i = 0; i < 200; ++i) {
    if (probe.peer_closed()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(PeerProbe, FindsTheConnectionByItsEndsAndSeesTheClientClose) {
  Loopback server;
  ASSERT_TRUE(server.ok());
  auto [other_client, other_accepted] = server.connect();  // a second connection to tell apart
  auto [client, accepted] = server.connect();
  const PeerProbe probe = PeerProbe::find(server.ends_of(client));
  ASSERT_TRUE(probe.found());
  EXPECT_EQ(probe.descriptor(), accepted);
  EXPECT_FALSE(probe.peer_closed());

  // A request sent ahead (pipelined) is no close, and is left for the server to read.
  ASSERT_EQ(::write(client, "GET / HTTP/1.1\r\n\r\n", 18), 18);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(probe.peer_closed());
  char text[32];
  EXPECT_EQ(::recv(accepted, text, sizeof(text), MSG_DONTWAIT), 18);

  ::close(client);
  EXPECT_TRUE(becomes_closed(probe));
  // The other connection is untouched.
  const PeerProbe other = PeerProbe::find(server.ends_of(other_client));
  ASSERT_TRUE(other.found());
  EXPECT_EQ(other.descriptor(), other_accepted);
  EXPECT_FALSE(other.peer_closed());
  ::close(other_client);
  EXPECT_TRUE(becomes_closed(other));
  ::close(accepted);
  ::close(other_accepted);
}

TEST(PeerProbe, ClosedWithDataUnreadAndHalfClosed) {
  Loopback server;
  ASSERT_TRUE(server.ok());
  {
    auto [client, accepted] = server.connect();
    const PeerProbe probe = PeerProbe::find(server.ends_of(client));
    ASSERT_TRUE(probe.found());
    ASSERT_EQ(::write(client, "unread", 6), 6);
    ::close(client);
    EXPECT_TRUE(becomes_closed(probe));
    ::close(accepted);
  }
  {
    auto [client, accepted] = server.connect();
    const PeerProbe probe = PeerProbe::find(server.ends_of(client));
    ASSERT_TRUE(probe.found());
    ::shutdown(client, SHUT_WR);
    EXPECT_TRUE(becomes_closed(probe));
    ::close(client);
    ::close(accepted);
  }
}

TEST(PeerProbe, ANewConnectionOnTheSameThreadIsFoundAfresh) {
  Loopback server;
  ASSERT_TRUE(server.ok());
  auto [first, first_accepted] = server.connect();
  const ConnectionEnds first_ends = server.ends_of(first);
  ASSERT_TRUE(PeerProbe::find(first_ends).found());
  ::close(first);
  ::close(first_accepted);
  // Often the same descriptor number again, now another connection.
  auto [second, second_accepted] = server.connect();
  const PeerProbe probe = PeerProbe::find(server.ends_of(second));
  ASSERT_TRUE(probe.found());
  EXPECT_EQ(probe.descriptor(), second_accepted);
  EXPECT_FALSE(probe.peer_closed());
  EXPECT_FALSE(PeerProbe::find(first_ends).found());
  ::close(second);
  EXPECT_TRUE(becomes_closed(probe));
  ::close(second_accepted);
}

TEST(PeerProbe, EndsOfNoConnectionAreNotFound) {
  Loopback server;
  ASSERT_TRUE(server.ok());
  const PeerProbe probe =
      PeerProbe::find(ConnectionEnds{"127.0.0.1", server.port(), "127.0.0.1", 1});
  EXPECT_FALSE(probe.found());
  EXPECT_FALSE(probe.peer_closed());
  EXPECT_FALSE(PeerProbe::find(ConnectionEnds{}).found());
}

TEST(PeerProbe, Ipv6Loopback) {
  Loopback server(AF_INET6);
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here";
  auto [client, accepted] = server.connect();
  const PeerProbe probe = PeerProbe::find(server.ends_of(client));
  ASSERT_TRUE(probe.found());
  EXPECT_FALSE(probe.peer_closed());
  ::close(client);
  EXPECT_TRUE(becomes_closed(probe));
  ::close(accepted);
}

// A dual-stack listener names an IPv4 client by its mapped address, "::ffff:127.0.0.1", on
// both ends, as the HTTP library reports them.
TEST(PeerProbe, Ipv4ClientOfADualStackListener) {
  const int listener = ::socket(AF_INET6, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  int no = 0;
  ::setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  sockaddr_in6 any{};
  any.sin6_family = AF_INET6;
  any.sin6_addr = in6addr_any;
  socklen_t size = sizeof(any);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
      ::listen(listener, 4) != 0) {
    ::close(listener);
    GTEST_SKIP() << "no dual-stack socket here";
  }
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&any), &size);
  const int port = ntohs(any.sin6_port);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  const int accepted = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  sockaddr_in from{};
  size = sizeof(from);
  ::getsockname(client, reinterpret_cast<sockaddr*>(&from), &size);
  const ConnectionEnds ends{"::ffff:127.0.0.1", port, "::ffff:127.0.0.1", ntohs(from.sin_port)};
  const PeerProbe probe = PeerProbe::find(ends);
  ASSERT_TRUE(probe.found());
  EXPECT_EQ(probe.descriptor(), accepted);
  EXPECT_FALSE(PeerProbe::find({"127.0.0.1", port, "127.0.0.1", ntohs(from.sin_port)}).found());
  ::close(client);
  EXPECT_TRUE(becomes_closed(probe));
  ::close(accepted);
  ::close(listener);
}

}  // namespace
}  // namespace qwenrt::server
