// Readings of request header fields the HTTP library takes too literally, and the Date
// field every answer carries. Pure functions of the fields' text (tests/unit/test_http_headers.cpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace qwenrt::server {

// True when a Connection field's list (several fields joined by ", ") holds `option`, in
// any case (RFC 9110 7.6.1: "Close", "keep-alive, close").
bool has_connection_option(const std::string& field, const std::string& option);

// An Accept-Encoding field as a list the library can search by name: the codings it
// accepts, in lower case, without their weights; a coding weighted q=0 ("not acceptable",
// RFC 9110 12.5.3) and "identity" are left out.
std::string acceptable_codings(const std::string& field);

// True for a Content-Type whose media type is JSON: application/json or any type with the
// +json suffix, parameters (charset) aside, in any case.
bool json_media_type(const std::string& field);

// The host named by a Host field, in lower case, without its port; an IPv6 literal keeps
// its brackets ("[::1]").
std::string host_name(const std::string& field);
// True when `address` (what the server listens on) reaches only this machine: 127.0.0.0/8,
// ::1, localhost.
bool loopback_address(const std::string& address);
// True when a request naming `host` (host_name's result) may be served by a server on a
// loopback address: localhost (or a name under .localhost), an address in 127.0.0.0/8, [::1],
// a name under .local or .internal, or one of `allowed` (as host_name gives them; "*": any
// name). A web page reaches a loopback server by another name only by rebinding that name's
// DNS record to it.
bool loopback_host_allowed(const std::string& host, const std::vector<std::string>& allowed);

// True for an Origin ("http://localhost:3000") of a page this machine serves itself:
// localhost, a name under .localhost, 127.0.0.0/8 or [::1], any scheme and port.
bool loopback_origin(const std::string& origin);

// The Date field's value for `when` (RFC 9110 5.6.7: "Sun, 06 Dec 2026 12:00:00 GMT").
std::string http_date(std::chrono::system_clock::time_point when);

}  // namespace qwenrt::server
