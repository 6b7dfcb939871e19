#include "server/http_headers.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string_view>

namespace qwenrt::server {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trimmed(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

// The comma-separated members of a list field, trimmed, empty ones left out.
std::vector<std::string_view> members(std::string_view field) {
  std::vector<std::string_view> out;
  while (!field.empty()) {
    const size_t comma = field.find(',');
    const std::string_view member = trimmed(field.substr(0, comma));
    if (!member.empty()) out.push_back(member);
    if (comma == std::string_view::npos) break;
    field.remove_prefix(comma + 1);
  }
  return out;
}

// The weight of a member's parameters ("gzip;q=0.5" → 0.5; none: 1).
double weight(std::string_view parameters) {
  while (!parameters.empty()) {
    const size_t semicolon = parameters.find(';');
    const std::string_view parameter = trimmed(parameters.substr(0, semicolon));
    if (parameter.size() >= 2 && (parameter[0] == 'q' || parameter[0] == 'Q') &&
        trimmed(parameter.substr(1)).starts_with('=')) {
      const std::string value(trimmed(trimmed(parameter.substr(1)).substr(1)));
      char* end = nullptr;
      const double q = std::strtod(value.c_str(), &end);
      return end == value.c_str() ? 1.0 : q;
    }
    if (semicolon == std::string_view::npos) break;
    parameters.remove_prefix(semicolon + 1);
  }
  return 1.0;
}

// A dotted-quad IPv4 address's first byte is 127.
bool ipv4_loopback(const std::string& host) {
  if (!host.starts_with("127.")) return false;
  int dots = 0;
  for (const char c : host) {
    if (c == '.') {
      ++dots;
    } else if (!std::isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return dots == 3;
}

// A name (as host_name gives it) that only ever means this machine: localhost and the names
// under it, 127.0.0.0/8, [::1].
bool loopback_name(const std::string& host) {
  return host == "localhost" || host.ends_with(".localhost") || host == "[::1]" || ipv4_loopback(host);
}

}  // namespace

bool has_connection_option(const std::string& field, const std::string& option) {
  const std::string wanted = lower(option);
  for (const std::string_view member : members(field)) {
    if (lower(member) == wanted) return true;
  }
  return false;
}

std::string acceptable_codings(const std::string& field) {
  std::string out;
  for (const std::string_view member : members(field)) {
    const size_t semicolon = member.find(';');
    const std::string coding = lower(trimmed(member.substr(0, semicolon)));
    if (coding.empty() || coding == "identity") continue;
    if (semicolon != std::string_view::npos && weight(member.substr(semicolon + 1)) <= 0) continue;
    if (!out.empty()) out += ", ";
    out += coding;
  }
  return out;
}

bool json_media_type(const std::string& field) {
  const std::string type = lower(trimmed(std::string_view(field).substr(0, field.find(';'))));
  const size_t slash = type.find('/');
  if (slash == std::string::npos || slash == 0) return false;
  return type == "application/json" || (type.size() > slash + 6 && type.ends_with("+json"));
}

std::string host_name(const std::string& field) {
  std::string host = lower(trimmed(field));
  if (host.starts_with('[')) {
    const size_t close = host.find(']');
    return close == std::string::npos ? host : host.substr(0, close + 1);
  }
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos) host.resize(colon);
  if (host.ends_with('.')) host.pop_back();  // "localhost." is localhost
  return host;
}

bool loopback_address(const std::string& address) {
  const std::string host = lower(address);
  return host == "localhost" || host == "::1" || host == "[::1]" || ipv4_loopback(host);
}

bool loopback_host_allowed(const std::string& host, const std::vector<std::string>& allowed) {
  if (loopback_name(host)) return true;
  // Names a public DNS record cannot give: the LAN's (mDNS) and a container runtime's
  // (host.docker.internal).
  if (host.ends_with(".local") || host.ends_with(".internal")) return true;
  return std::any_of(allowed.begin(), allowed.end(),
                     [&](const std::string& name) { return name == "*" || lower(name) == host; });
}

bool loopback_origin(const std::string& origin) {
  const size_t scheme = origin.find("://");
  if (scheme == std::string::npos) return false;
  return loopback_name(host_name(origin.substr(scheme + 3)));
}

std::string http_date(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char text[40];
  std::snprintf(text, sizeof(text), "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[utc.tm_wday], utc.tm_mday,
                kMonths[utc.tm_mon], utc.tm_year + 1900, utc.tm_hour, utc.tm_min, utc.tm_sec);
  return text;
}

}  // namespace qwenrt::server
