// Header readings the HTTP library takes too literally (server/http_headers.h).
#include "server/http_headers.h"

#include <gtest/gtest.h>

namespace qwenrt::server {
namespace {

TEST(HttpHeaders, ConnectionOptionsInAnyCaseAndInAList) {
  EXPECT_TRUE(has_connection_option("close", "close"));
  EXPECT_TRUE(has_connection_option("Close", "close"));
  EXPECT_TRUE(has_connection_option("keep-alive, CLOSE", "close"));
  EXPECT_TRUE(has_connection_option(" ,close ,", "close"));
  EXPECT_FALSE(has_connection_option("keep-alive", "close"));
  EXPECT_FALSE(has_connection_option("closed", "close"));
  EXPECT_FALSE(has_connection_option("", "close"));
}

TEST(HttpHeaders, AcceptedCodingsWithoutTheRefusedOnes) {
  EXPECT_EQ(acceptable_codings("gzip, deflate, br"), "gzip, deflate, br");
  EXPECT_EQ(acceptable_codings("GZIP"), "gzip");
  EXPECT_EQ(acceptable_codings("gzip;q=0"), "");
  EXPECT_EQ(acceptable_codings("gzip; q=0.0, deflate"), "deflate");
  EXPECT_EQ(acceptable_codings("br;q=0, gzip;q=0.5"), "gzip");
  EXPECT_EQ(acceptable_codings("br;Q=0.001"), "br");
  EXPECT_EQ(acceptable_codings("identity, *;q=0"), "");
  EXPECT_EQ(acceptable_codings(""), "");
}

TEST(HttpHeaders, JsonMediaTypes) {
  EXPECT_TRUE(json_media_type("application/json"));
  EXPECT_TRUE(json_media_type("Application/JSON; charset=utf-8"));
  EXPECT_TRUE(json_media_type(" application/vnd.api+json "));
  EXPECT_FALSE(json_media_type("text/plain"));
  EXPECT_FALSE(json_media_type("application/x-www-form-urlencoded"));
  EXPECT_FALSE(json_media_type("multipart/form-data; boundary=x"));
  EXPECT_FALSE(json_media_type("application/jsonx"));
  EXPECT_FALSE(json_media_type("+json"));
  EXPECT_FALSE(json_media_type(""));
}

TEST(HttpHeaders, HostNamesOfALoopbackServer) {
  EXPECT_EQ(host_name("LocalHost:8080"), "localhost");
  EXPECT_EQ(host_name("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(host_name("[::1]:8080"), "[::1]");
  EXPECT_EQ(host_name("localhost.:80"), "localhost");
  EXPECT_TRUE(loopback_address("127.0.0.1"));
  EXPECT_TRUE(loopback_address("127.1.2.3"));
  EXPECT_TRUE(loopback_address("::1"));
  EXPECT_TRUE(loopback_address("localhost"));
  EXPECT_FALSE(loopback_address("0.0.0.0"));
  EXPECT_FALSE(loopback_address("::"));
  EXPECT_FALSE(loopback_address("192.168.1.5"));
  EXPECT_FALSE(loopback_address("127.example.com"));
  const std::vector<std::string> none;
  for (const char* host : {"localhost", "app.localhost", "127.0.0.1", "127.9.9.9", "[::1]", "printer.local",
                           "host.docker.internal"}) {
    EXPECT_TRUE(loopback_host_allowed(host, none)) << host;
  }
  for (const char* host : {"evil.example", "localhost.evil.example", "127.0.0.1.evil.example", "0.0.0.0", ""}) {
    EXPECT_FALSE(loopback_host_allowed(host, none)) << host;
  }
  EXPECT_TRUE(loopback_host_allowed("devbox", {"DevBox"}));
  EXPECT_FALSE(loopback_host_allowed("devbox", {"devbox.lan"}));
  EXPECT_TRUE(loopback_host_allowed("tunnel.example", {"*"}));
  EXPECT_FALSE(loopback_host_allowed("evil.localhost.example", none));
  EXPECT_FALSE(loopback_host_allowed("internal", none));
}

TEST(HttpHeaders, OriginsOfPagesThisMachineServes) {
  for (const char* origin : {"http://localhost:3000", "https://localhost", "http://127.0.0.1:8080", "http://[::1]:5173",
                             "http://app.localhost", "tauri://localhost"}) {
    EXPECT_TRUE(loopback_origin(origin)) << origin;
  }
  for (const char* origin : {"http://evil.example", "null", "", "http://localhost.evil.example", "http://127.0.0.1.nip.io",
                             "file://"}) {
    EXPECT_FALSE(loopback_origin(origin)) << origin;
  }
}

TEST(HttpHeaders, DateInTheFormatOfRfc9110) {
  // 2026-12-06T12:00:05Z, a Sunday.
  const auto when = std::chrono::system_clock::time_point(std::chrono::seconds(1796558405));
  EXPECT_EQ(http_date(when), "Sun, 06 Dec 2026 12:00:05 GMT");
  EXPECT_EQ(http_date(std::chrono::system_clock::time_point{}), "Thu, 01 Jan 1970 00:00:00 GMT");
}

}  // namespace
}  // namespace qwenrt::server
