#include <gtest/gtest.h>

#include "engine/stop_strings.h"

namespace qwenrt {
namespace {

// Feeds pieces one by one and returns everything emitted.
std::string feed(StopMatcher& matcher, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& piece : pieces) {
    out += matcher.push(piece);
    if (matcher.stopped()) return out;
  }
  return out + matcher.flush();
}

TEST(StopStrings, StopInsideOnePiece) {
  StopMatcher matcher({"END"});
  EXPECT_EQ(feed(matcher, {"hello END world"}), "hello ");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.matched(), "END");
}

TEST(StopStrings, StopSpanningPieces) {
  StopMatcher matcher({"\nUser:"});
  std::vector<std::string> emitted;
  std::string out;
  for (const char* piece : {"Sure.", "\n", "Us", "er", ":", " more"}) {
    std::string part = matcher.push(piece);
    emitted.push_back(part);
    out += part;
    if (matcher.stopped()) break;
  }
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(out, "Sure.");
  // The newline was held back while it could begin the stop string.
  EXPECT_EQ(emitted[1], "");
}

TEST(StopStrings, FalseStartIsReleased) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("ST"), "");
  EXPECT_EQ(matcher.push("AR"), "STAR");
  EXPECT_EQ(matcher.push("S"), "");
  EXPECT_EQ(matcher.flush(), "S");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopStrings, EarliestOfSeveral) {
  StopMatcher matcher({"bb", "a b"});
  EXPECT_EQ(feed(matcher, {"xa", " bb"}), "x");
  EXPECT_EQ(matcher.matched(), "a b");
}

TEST(StopStrings, NoStopsPassesThrough) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.push("abc"), "abc");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopStrings, MultibyteStop) {
  StopMatcher matcher({"。"});
  EXPECT_EQ(feed(matcher, {"你好", "\xe3\x80", "\x82", "更多"}), "你好");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopStrings, UnarmedTextIsNotSearchedButAStopStartingThereIsFound) {
  // As vLLM's min_tokens: no stop is looked for in the first tokens' text...
  StopMatcher early({"ab"});
  EXPECT_EQ(early.push("xab", /*armed=*/false), "xab");
  EXPECT_EQ(early.push("ab"), "");
  EXPECT_TRUE(early.stopped());
  // ...but one that begins there and ends in armed text is found, the text cut before it.
  StopMatcher spanning({"abc"});
  EXPECT_EQ(spanning.push("xab", /*armed=*/false), "x");
  EXPECT_EQ(spanning.push("cd"), "");
  EXPECT_TRUE(spanning.stopped());
  // A match wholly inside what came unarmed is not taken once armed.
  StopMatcher held({"b", "abc"});
  EXPECT_EQ(held.push("ab", /*armed=*/false), "");
  EXPECT_EQ(held.push("x"), "abx");
  EXPECT_FALSE(held.stopped());
}

TEST(StopStrings, IncludeStopKeepsTheStopInTheText) {
  StopMatcher matcher({"END"}, /*include_stop=*/true);
  EXPECT_EQ(feed(matcher, {"hello E", "ND world"}), "hello END");
  EXPECT_TRUE(matcher.stopped());
  // Of several, the one that starts first is kept, whole, and nothing after it.
  StopMatcher several({"world", "o", "lo w"}, /*include_stop=*/true);
  EXPECT_EQ(feed(several, {"hel", "lo world"}), "hello w");
  EXPECT_EQ(several.matched(), "lo w");
}

}  // namespace
}  // namespace qwenrt
