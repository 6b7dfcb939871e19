// The server's lines on stderr: one a request (the access log) and the engine's periodic
// stats line.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "server/metrics.h"
#ifdef QWENRT_HAVE_HTTP
#include "server/http_server.h"
#endif

namespace qwenrt::server {
namespace {

#ifdef QWENRT_HAVE_HTTP
TEST(AccessLog, OneLineARequestWithItsClientStatusDurationAndId) {
  // 2026-12-06T09:30:01.123Z
  const auto when = std::chrono::system_clock::time_point(std::chrono::milliseconds(1796549401123LL));
  EXPECT_EQ(access_log_line(when, "127.0.0.1:51234", "POST /v1/chat/completions HTTP/1.1", 200, 0.01234, "chatcmpl-7"),
            "access 2026-12-06T09:30:01.123Z 127.0.0.1:51234 \"POST /v1/chat/completions HTTP/1.1\" 200 12.3ms "
            "id=chatcmpl-7\n");
  // What the connection answers itself: no request line, perhaps no time, no id.
  EXPECT_EQ(access_log_line(when, "-", "-", 503, -1, ""), "access 2026-12-06T09:30:01.123Z - \"-\" 503 - id=-\n");
  // The request line is the client's: no byte of it may end the line or fake a field.
  const std::string line = access_log_line(when, "[::1]:9", "GET /a\r\naccess \"x\x01\xff HTTP/1.1", 404, 0, "r");
  EXPECT_EQ(line, "access 2026-12-06T09:30:01.123Z [::1]:9 \"GET /a??access ?x?? HTTP/1.1\" 404 0.0ms id=r\n");
  const std::string long_line = access_log_line(when, "-", "GET /" + std::string(1000, 'a'), 404, 0, "r");
  EXPECT_NE(long_line.find(std::string(195, 'a') + "...\" 404"), std::string::npos) << long_line;
  EXPECT_LT(long_line.size(), 300u);
}
#endif

TEST(StatsLog, WhatTheEngineDidBetweenTwoReadings) {
  SchedulerStats before;
  before.computed_prompt_tokens = 1000;
  before.generated_tokens = 500;
  before.prefix_lookups = 10;
  before.prefix_hits = 4;
  before.preemptions = 1;
  SchedulerStats now = before;
  now.running = 12;
  now.waiting = 3;
  now.computed_prompt_tokens = 3000;
  now.generated_tokens = 5500;
  now.kv_blocks_total = 1000;
  now.kv_blocks_held = 250;
  now.kv_blocks_cached = 40;
  now.prefix_lookups = 50;
  now.prefix_hits = 24;
  now.preemptions = 3;
  EXPECT_EQ(stats_log_line(now, before, 10.0),
            "stats running 12, waiting 3; prefill 200.0 tok/s, generated 500.0 tok/s; KV blocks 250 of 1000 held "
            "(25.0%), 40 cached; prefix hits 50.0% of 40 blocks; preemptions 2\n");
  // Nothing done and nothing held: no line.
  SchedulerStats idle = now;
  idle.running = idle.waiting = 0;
  EXPECT_EQ(stats_log_line(idle, idle, 10.0), "");
  // Work still waiting gives a line even in an interval without tokens.
  SchedulerStats waiting = idle;
  waiting.waiting = 1;
  EXPECT_NE(stats_log_line(waiting, idle, 10.0).find("waiting 1; prefill 0.0 tok/s, generated 0.0 tok/s"),
            std::string::npos);
}

}  // namespace
}  // namespace qwenrt::server
