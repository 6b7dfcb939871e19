// suffix on /v1/completions: Qwen's fill-in-the-middle layout with Qwen's own tokenizer
// (<|fim_prefix|>PROMPT<|fim_suffix|>SUFFIX<|fim_middle|>, the model writes the middle).
#include <gtest/gtest.h>

#include "server/api.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::server {
namespace {

TEST(FillInTheMiddle, SuffixLaysThePromptOutWithQwensTokens) {
  const Tokenizer qwen = Tokenizer::load(QWENRT_TEST_CACHE "/qwen-tokenizer-3.7.2");
  const ModelText text{&qwen, nullptr, nullptr};
  RequestLimits limits;
  limits.max_context = 4096;
  limits.vocab_size = 151936;
  const auto parse = [&](const std::string& body) { return parse_completion_request(parse_json_body(body), text, limits); };
  const GenerationRequest filled = parse(R"({"prompt":"def add(a, b):\n    ","suffix":"\n    return total\n","max_tokens":8})");
  std::vector<int32_t> expected = {*qwen.token_to_id("<|fim_prefix|>")};
  for (const int32_t id : qwen.encode("def add(a, b):\n    ", true)) expected.push_back(id);
  expected.push_back(*qwen.token_to_id("<|fim_suffix|>"));
  for (const int32_t id : qwen.encode("\n    return total\n", true)) expected.push_back(id);
  expected.push_back(*qwen.token_to_id("<|fim_middle|>"));
  EXPECT_EQ(filled.prompt, expected);
  // It stops where the model opens another part (Qwen's example's stop ids, 151659-151664 and
  // <|im_end|>), besides the model's EOS.
  EXPECT_EQ(filled.stop_ids, (std::vector<int32_t>{151659, 151661, 151660, 151662, 151663, 151664, 151645}));
  EXPECT_EQ(expected.front(), 151659);  // Qwen's ids: <|fim_prefix|>, and <|fim_middle|> last
  EXPECT_EQ(expected.back(), 151660);
  EXPECT_EQ(parse(R"({"prompt":"x","suffix":""})").prompt, qwen.encode("x", true));  // empty: no insertion
  EXPECT_EQ(parse(R"({"prompt":[1,2],"suffix":"y"})").prompt.size(), 2u + 3u + qwen.encode("y", true).size());
  // truncate_prompt_tokens cuts the client's prompt, not the layout around it.
  const std::vector<int32_t> cut = parse(R"({"prompt":[1,2,3,4],"suffix":"y","truncate_prompt_tokens":2})").prompt;
  const std::vector<int32_t> suffix = qwen.encode("y", true);
  std::vector<int32_t> laid_out = {151659, 3, 4, *qwen.token_to_id("<|fim_suffix|>")};
  laid_out.insert(laid_out.end(), suffix.begin(), suffix.end());
  laid_out.push_back(151660);
  EXPECT_EQ(cut, laid_out);
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt":"x","suffix":"y","echo":true})", "echo"}, {R"({"prompt":"x","suffix":3})", "suffix"}}) {
    try {
      parse(body);
      ADD_FAILURE() << body;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.param, param) << body;
    }
  }
}

}  // namespace
}  // namespace qwenrt::server
