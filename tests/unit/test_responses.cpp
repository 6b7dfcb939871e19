// Completions' logprobs as ResponseBuilder writes them, from hand-made events: where each
// token's text_offset points when tokens are single bytes of multi-byte characters, special
// tokens or the token that ends the choice, streamed and whole alike; and top_logprobs keys
// of pieces of characters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/responses.h"

namespace qwenrt::server {
namespace {

struct Token {
  std::string bytes;
  bool in_text = true;
  bool ends = false;
};

LogprobEntry entry(const Token& token) {
  LogprobEntry e;
  e.text = token.bytes;  // the offsets are placed from the bytes; the shown text is not read
  e.bytes = token.bytes;
  e.logprob = -1.f;
  e.in_text = token.in_text;
  e.ends = token.ends;
  return e;
}

GenerationRequest completion_with_logprobs() {
  GenerationRequest request;
  request.top_logprobs = 2;
  request.model = std::string(1, 'm');  // (= "m" trips a false -Wrestrict in GCC 12)
  return request;
}

// The text_offset list of a whole response and of a stream (one event a token) of `tokens`.
std::pair<std::vector<size_t>, std::vector<size_t>> offsets(const std::vector<Token>& tokens) {
  const GenerationRequest request = completion_with_logprobs();
  ResponseBuilder whole(request, "cmpl-1", 0, 1), streamed(request, "cmpl-1", 0, 1);
  std::string sse;
  for (size_t i = 0; i < tokens.size(); ++i) {
    ChoiceEvent event;
    event.tokens = 1;
    event.logprobs.push_back(entry(tokens[i]));
    if (i + 1 == tokens.size()) event.finish_reason = "stop";
    whole.collect(event);
    streamed.stream(event, sse);
  }
  std::vector<size_t> from_stream;
  for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
    const auto chunk = nlohmann::json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
    const auto& logprobs = chunk["choices"][0]["logprobs"];
    if (logprobs.is_null()) continue;
    for (const auto& offset : logprobs["text_offset"]) from_stream.push_back(offset.get<size_t>());
  }
  const auto body = nlohmann::json::parse(whole.body());
  return {body["choices"][0]["logprobs"]["text_offset"].get<std::vector<size_t>>(), from_stream};
}

TEST(CompletionLogprobs, TextOffsetsCountTheDecodersCharacters) {
  const std::string e4 = "\xE4", b8 = "\xB8", ad = "\xAD";  // 中, a byte a token
  struct Case {
    const char* name;
    std::vector<Token> tokens;
    std::vector<size_t> expected;
  };
  const std::vector<Case> cases = {
      // "中a": the character's three bytes point at it, "a" after it.
      {"a character in three tokens", {{e4}, {b8}, {ad}, {"a"}}, {0, 0, 0, 1}},
      // "\uFFFDa": "a" cuts the character off; its U+FFFD comes first.
      {"a character cut off", {{e4}, {"a"}}, {0, 1}},
      // "中": a special token inside the character adds nothing and moves nothing.
      {"a special token inside a character", {{e4}, {"<|im_start|>", false}, {b8}, {ad}}, {0, 0, 0, 0}},
      // "a\uFFFD": the ending token comes after the flushed U+FFFD.
      {"the ending token after an unfinished character", {{"a"}, {e4}, {"\x0b", false, true}}, {0, 1, 2}},
      // "ab中": whole tokens of several characters.
      {"whole tokens", {{"ab"}, {"\xE4\xB8\xAD"}, {"\x0b", false, true}}, {0, 2, 3}},
  };
  for (const Case& c : cases) {
    const auto [whole, streamed] = offsets(c.tokens);
    EXPECT_EQ(whole, c.expected) << c.name;
    EXPECT_EQ(streamed, c.expected) << c.name;
  }
}

// Pieces of characters each show as U+FFFD: OpenAI's completions spell them "bytes:\\xNN",
// so that each keeps its own key in top_logprobs and the drawn one its own log-prob.
TEST(CompletionLogprobs, PiecesOfCharactersAreSpelledAsTheirBytes) {
  const GenerationRequest request = completion_with_logprobs();
  ResponseBuilder builder(request, "cmpl-1", 0, 1);
  ChoiceEvent event;
  event.tokens = 1;
  LogprobEntry e = entry({"\xE6"});
  e.text = "\xEF\xBF\xBD";
  e.logprob = -4.f;
  // Most likely first, as the sampler lists them.
  e.top = {LogprobToken{"\xEF\xBF\xBD", "\xE4", -0.5f}, LogprobToken{" \xEF\xBF\xBD", " \xF0\x9F", -2.0f},
           LogprobToken{"x", "x", -3.0f}};
  event.logprobs.push_back(e);
  event.finish_reason = "length";
  builder.collect(event);
  const auto body = nlohmann::json::parse(builder.body());
  const auto& logprobs = body["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"][0], "bytes:\\xe6");
  EXPECT_FLOAT_EQ(logprobs["token_logprobs"][0].get<float>(), -4.f);
  const auto& top = logprobs["top_logprobs"][0];
  ASSERT_EQ(top.size(), 4u);
  EXPECT_FLOAT_EQ(top["bytes:\\xe6"].get<float>(), -4.f);
  EXPECT_FLOAT_EQ(top["bytes:\\xe4"].get<float>(), -0.5f);
  EXPECT_FLOAT_EQ(top["bytes:\\x20\\xf0\\x9f"].get<float>(), -2.f);
  EXPECT_FLOAT_EQ(top["x"].get<float>(), -3.f);
  // Most likely first, the drawn token last when it is not among them (a client may take the
  // first key as the most likely, as OpenAI's lists them); the response's own keys in OpenAI's order.
  const auto ordered = nlohmann::ordered_json::parse(builder.body());
  std::vector<std::string> keys;
  for (const auto& [key, value] : ordered["choices"][0]["logprobs"]["top_logprobs"][0].items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"bytes:\\xe4", "bytes:\\x20\\xf0\\x9f", "x", "bytes:\\xe6"}));
  keys.clear();
  for (const auto& [key, value] : ordered.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"id", "object", "created", "model", "system_fingerprint", "choices", "usage"}));
}

TEST(CompletionLogprobs, TheTokenItselfIsAlwaysListed) {
  // OpenAI's legacy rule: top_logprobs holds the drawn token too (up to logprobs + 1).
  const GenerationRequest request = completion_with_logprobs();
  ResponseBuilder builder(request, "cmpl-1", 0, 1);
  ChoiceEvent event;
  event.tokens = 1;
  LogprobEntry e = entry({"z"});
  e.logprob = -4.5f;
  e.top = {LogprobToken{"a", "a", -0.5f}, LogprobToken{"b", "b", -1.0f}};
  event.logprobs.push_back(e);
  event.finish_reason = "length";
  builder.collect(event);
  const auto body = nlohmann::json::parse(builder.body());
  const auto& top = body["choices"][0]["logprobs"]["top_logprobs"][0];
  ASSERT_EQ(top.size(), 3u);
  EXPECT_FLOAT_EQ(top["z"].get<float>(), -4.5f);
  EXPECT_FLOAT_EQ(top["a"].get<float>(), -0.5f);
}

// vLLM's return_tokens_as_token_ids: every token, drawn or listed, is named "token_id:N"
// in both APIs' logprobs; a chat token's bytes stay its own, and text_offset still counts
// the text's characters.
TEST(CompletionLogprobs, TokensNamedByTheirIds) {
  GenerationRequest request = completion_with_logprobs();
  request.tokens_as_ids = true;
  LogprobEntry drawn = entry({"\xE6"});
  drawn.id = 7;
  drawn.top = {LogprobToken{"a", "a", -0.5f, 3}, LogprobToken{"b", "b", -2.0f, 9}};
  LogprobEntry second = entry({"ab"});
  second.id = 3;
  ResponseBuilder builder(request, "cmpl-1", 0, 1);
  ChoiceEvent event;
  event.tokens = 2;
  event.logprobs = {drawn, second};
  event.finish_reason = "length";
  builder.collect(event);
  const auto logprobs = nlohmann::json::parse(builder.body())["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"], nlohmann::json({"token_id:7", "token_id:3"}));
  EXPECT_EQ(logprobs["top_logprobs"][0],
            nlohmann::json({{"token_id:3", -0.5f}, {"token_id:9", -2.0f}, {"token_id:7", -1.0f}}));
  EXPECT_EQ(logprobs["text_offset"], nlohmann::json({0, 1}));  // "\uFFFDab": the cut character, then "ab"

  request.chat = true;
  ResponseBuilder chat(request, "chatcmpl-1", 0, 1);
  chat.collect(event);
  const auto content = nlohmann::json::parse(chat.body())["choices"][0]["logprobs"]["content"];
  EXPECT_EQ(content[0]["token"], "token_id:7");
  EXPECT_EQ(content[0]["bytes"], nlohmann::json({0xE6}));
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "token_id:9");
  EXPECT_EQ(content[1]["token"], "token_id:3");
}

}  // namespace
}  // namespace qwenrt::server
