#include "server/peer_probe.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace qwenrt::server {
namespace {

// Whether one end of a socket is this host and port, the host as the HTTP library writes it
// (numeric); false for a socket without such an end (not connected, not an internet socket).
bool end_is(int fd, bool remote, const std::string& host, int port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int got = remote ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                         : ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  if (got != 0) return false;
  int its_port = -1;
  if (address.ss_family == AF_INET) {
    its_port = ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  } else if (address.ss_family == AF_INET6) {
    its_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  if (its_port != port) return false;  // the cheap test first: most sockets differ here
  char text[NI_MAXHOST];
  return ::getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, text, sizeof(text),
                       nullptr, 0, NI_NUMERICHOST) == 0 &&
         host == text;
}

bool has_ends(int fd, const ConnectionEnds& ends) {
  return end_is(fd, true, ends.remote_addr, ends.remote_port) &&
         end_is(fd, false, ends.local_addr, ends.local_port);
}

}  // namespace

PeerProbe PeerProbe::find(const ConnectionEnds& ends) {
  // A thread serves one connection at a time, often several requests on it (keep-alive).
  thread_local int last_found = -1;
  if (last_found >= 0 && has_ends(last_found, ends)) return PeerProbe(last_found);
  DIR* listing = ::opendir("/proc/self/fd");
  if (listing == nullptr) return PeerProbe();
  int found = -1;
  const int listing_fd = ::dirfd(listing);
  while (const dirent* entry = ::readdir(listing)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == listing_fd) continue;
    if (has_ends(static_cast<int>(fd), ends)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(listing);
  last_found = found;
  return PeerProbe(found);
}

bool PeerProbe::peer_closed() const {
  if (fd_ < 0) return false;
  pollfd request{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (::poll(&request, 1, 0) <= 0) return false;
  if (request.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (request.revents & POLLIN) {
    char byte;
    const ssize_t got = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

}  // namespace qwenrt::server
