// RequestStream: the queue of a request's events between the engine's thread and the
// connection's.
#include <gtest/gtest.h>

#include "server/generation.h"

namespace qwenrt::server {
namespace {

ChoiceEvent token_event() {
  ChoiceEvent event;
  event.text = "x";
  return event;
}

TEST(RequestStream, EventsTakenInOrderAndFinishedOnceEveryChoiceEnds) {
  RequestStream stream(2, 5);
  stream.push(token_event());
  ChoiceEvent end = token_event();
  end.finish_reason = "length";
  stream.push(end);
  EXPECT_FALSE(stream.finished());  // one choice still runs
  EXPECT_EQ(stream.wait(std::chrono::milliseconds(0)).size(), 2u);
  end.choice = 1;
  stream.push(end);
  EXPECT_FALSE(stream.finished());  // its last event not yet taken
  EXPECT_EQ(stream.wait(std::chrono::milliseconds(0)).size(), 1u);
  EXPECT_TRUE(stream.finished());
  EXPECT_FALSE(stream.cancelled());
}

// A connection stuck on a client that stopped reading takes nothing: past the cap the
// request is cancelled (the engine ends it) instead of its output piling up.
TEST(RequestStream, UnreadEventsPastTheCapCancelTheRequest) {
  RequestStream stream(1, 1);
  for (size_t i = 0; i < RequestStream::kMaxUnreadEvents; ++i) stream.push_quietly(token_event());
  EXPECT_FALSE(stream.cancelled());
  stream.push_quietly(token_event());
  EXPECT_TRUE(stream.cancelled());
  // A reader that keeps up is never cancelled.
  RequestStream read(1, 1);
  for (size_t i = 0; i < 3 * RequestStream::kMaxUnreadEvents; ++i) {
    read.push_quietly(token_event());
    if (i % 1000 == 0) read.wait(std::chrono::milliseconds(0));
  }
  EXPECT_FALSE(read.cancelled());
}

}  // namespace
}  // namespace qwenrt::server
