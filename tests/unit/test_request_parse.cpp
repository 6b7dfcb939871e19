// Request parsing for `qwenrt serve` against the server test fixture's tokenizer and chat
// template: what reaches the template is the request as written.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/config.h"
#include "server/api.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::server {
namespace {

struct Fixture {
  Tokenizer tokenizer = Tokenizer::load(QWENRT_TEST_DATA "/serve");
  ChatTemplate chat_template = ChatTemplate::load(QWENRT_TEST_DATA "/serve");
  ModelConfig config = load_model_config(QWENRT_TEST_DATA "/models/qwen3_qknorm");
};

std::string rendered_chat(const std::string& body) {
  static const Fixture fixture;
  RequestLimits limits;
  limits.max_context = 4096;
  limits.vocab_size = fixture.config.vocab_size;
  const ModelText text{&fixture.tokenizer, &fixture.chat_template, &fixture.config};
  const GenerationRequest request = parse_chat_request(parse_json_body(body), text, limits);
  return fixture.tokenizer.decode(request.prompt);
}

// The limits the parse tests run under, for the fixture's model.
RequestLimits test_limits(const Fixture& fixture) {
  RequestLimits limits;
  limits.max_context = 4096;
  limits.vocab_size = fixture.config.vocab_size;
  limits.served_model_name = "m";
  return limits;
}

GenerationRequest completion(const std::string& body) {
  static const Fixture fixture;
  const ModelText text{&fixture.tokenizer, &fixture.chat_template, &fixture.config};
  return parse_completion_request(parse_json_body(body), text, test_limits(fixture));
}

int status_of(const std::string& body) {
  try {
    completion(body);
  } catch (const ApiError& error) {
    return error.status;
  }
  return 200;
}

TEST(RequestParse, ACompletionPromptInAListOfOne) {
  // Clients that batch prompts send one as ["text"] or [[ids]]: the same as the bare prompt.
  EXPECT_EQ(completion(R"({"prompt":[[5,6,7]]})").prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(completion(R"({"prompt":[5,6,7]})").prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(completion(R"({"prompt":["hi"]})").prompt, completion(R"({"prompt":"hi"})").prompt);
  EXPECT_TRUE(completion(R"({"prompt":[[5,6,7]]})").more_prompts.empty());
  EXPECT_EQ(status_of(R"({"prompt":[[]]})"), 400);           // empty
  EXPECT_EQ(status_of(R"({"prompt":[[1,[2]]]})"), 400);      // not ids
  EXPECT_EQ(status_of(R"({"prompt":[[5,6]],"model":"x"})"), 404);
  try {
    completion(R"({"prompt":"hi","model":"x"})");
    ADD_FAILURE() << "an unknown model was accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.type, "invalid_request_error");  // as OpenAI answers an unknown model
    EXPECT_EQ(error.code, "model_not_found");
  }
  EXPECT_EQ(status_of(R"({"prompt":"hi","top_k":18446744073709551615})"), 400);  // not -1 wrapped
  EXPECT_EQ(status_of(R"({"prompt":"hi","top_k":-1})"), 200);
}

// vLLM's truncate_prompt_tokens: each prompt keeps its last k tokens, before the context's
// checks; an echo of a cut text prompt is its tokens' text.
TEST(RequestParse, TruncatePromptTokensKeepsEachPromptsEnd) {
  EXPECT_EQ(completion(R"({"prompt":[5,6,7,8,9],"truncate_prompt_tokens":2})").prompt, (std::vector<int32_t>{8, 9}));
  const GenerationRequest several = completion(R"({"prompt":[[5,6,7],[8]],"truncate_prompt_tokens":2})");
  EXPECT_EQ(several.prompt, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(several.more_prompts.at(0), (std::vector<int32_t>{8}));
  EXPECT_EQ(completion(R"({"prompt":[5,6,7],"truncate_prompt_tokens":-1})").prompt, (std::vector<int32_t>{5, 6, 7}));
  const GenerationRequest text = completion(R"({"prompt":"one two three four five six","truncate_prompt_tokens":2})");
  EXPECT_EQ(text.prompt.size(), 2u);
  EXPECT_EQ(text.prompt_text(0), nullptr);
  EXPECT_NE(completion(R"({"prompt":"one two","truncate_prompt_tokens":50})").prompt_text(0), nullptr);
  // A prompt over the context fits once cut.
  std::string long_prompt = R"({"prompt":[)";
  for (int i = 0; i < 5000; ++i) long_prompt += (i ? "," : "") + std::to_string(5 + i % 50);
  EXPECT_EQ(status_of(long_prompt + "]}"), 400);
  EXPECT_EQ(completion(long_prompt + R"(],"truncate_prompt_tokens":100})").prompt.size(), 100u);
  // -1 fills the context: no room is left for an answer.
  EXPECT_EQ(status_of(long_prompt + R"(],"truncate_prompt_tokens":-1})"), 400);
  for (const char* bad : {"0", "-2", "1.5", "\"3\"", "4097"}) {
    try {
      completion(std::string(R"({"prompt":[5,6],"truncate_prompt_tokens":)") + bad + "}");
      ADD_FAILURE() << bad;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << bad;
      EXPECT_EQ(error.param, "truncate_prompt_tokens") << bad;
    }
  }
  EXPECT_EQ(status_of(R"({"prompt":[5,6],"best_of":"1"})"), 400);
  try {
    completion(R"({"prompt":[5,6],"best_of":"1"})");
  } catch (const ApiError& error) {
    EXPECT_EQ(error.message, "'best_of' must be an integer");
  }
}

TEST(RequestParse, SeveralCompletionPrompts) {
  // An array of texts or of id arrays (mixed too): each prompt gets n choices.
  const GenerationRequest two = completion(R"({"prompt":[[5,6],"hi",[7]],"n":2})");
  EXPECT_EQ(two.prompt, (std::vector<int32_t>{5, 6}));
  ASSERT_EQ(two.more_prompts.size(), 2u);
  EXPECT_EQ(two.more_prompts[0], completion(R"({"prompt":"hi"})").prompt);
  EXPECT_EQ(two.more_prompts[1], (std::vector<int32_t>{7}));
  EXPECT_EQ(two.prompt_count(), 3);
  EXPECT_EQ(two.choices(), 6);
  EXPECT_EQ(two.prompt_at(2), (std::vector<int32_t>{7}));
  EXPECT_EQ(status_of(R"({"prompt":[[5],[]]})"), 400);        // an empty one, named
  try {
    completion(R"({"prompt":[[5],[6],""]})");
    ADD_FAILURE() << "an empty prompt among others was accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(std::string(error.what()), "prompt 2 must not be empty");
  }
  EXPECT_EQ(status_of(R"({"prompt":[[5],""]})"), 400);
  EXPECT_EQ(status_of(R"({"prompt":[[5],7]})"), 400);         // neither text nor ids
  EXPECT_EQ(status_of(R"({"prompt":["a",[1,"b"]]})"), 400);
  EXPECT_EQ(status_of(R"({"prompt":[[5],[1000000]]})"), 400);  // outside the vocabulary
  // The longest prompt bounds max_tokens, and is named.
  std::string body = R"({"prompt":[[5],[)";
  for (int i = 0; i < 4090; ++i) body += "5,";
  body += R"(5]],"max_tokens":6})";
  try {
    completion(body);
    ADD_FAILURE() << "max_tokens over what the longest prompt leaves was accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.code, "context_length_exceeded");
    EXPECT_NE(std::string(error.what()).find("prompt 1 has 4091 tokens"), std::string::npos) << error.what();
  }
  // Each prompt filled in the middle alike (the fixture's tokenizer has no such tokens: a
  // 400 either way), and the cap on prompts.
  std::string many = R"({"prompt":[)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "[5]";
  EXPECT_EQ(status_of(many + "]}"), 400);
  EXPECT_EQ(status_of(many.substr(0, many.size() - 4) + "]}"), 200);  // 64
}

TEST(RequestParse, LogitBias) {
  const GenerationRequest request = completion(R"({"prompt":"hi","logit_bias":{"5":100,"0":-100,"77":0.5}})");
  ASSERT_EQ(request.logit_bias.size(), 3u);
  EXPECT_EQ(request.logit_bias[0].id, 5);
  EXPECT_EQ(request.logit_bias[0].bias, 100.f);
  EXPECT_EQ(request.logit_bias[1].id, 0);
  EXPECT_EQ(request.logit_bias[1].bias, -100.f);
  EXPECT_EQ(request.logit_bias[2].bias, 0.5f);
  EXPECT_TRUE(completion(R"({"prompt":"hi","logit_bias":{}})").logit_bias.empty());
  EXPECT_TRUE(completion(R"({"prompt":"hi","logit_bias":null})").logit_bias.empty());
  for (const char* bad : {R"("logit_bias":[5])", R"("logit_bias":{"x":1})", R"("logit_bias":{"-1":1})",
                          R"("logit_bias":{"5":100.5})", R"("logit_bias":{"5":"1"})", R"("logit_bias":{"5":1,"05":2})",
                          R"("logit_bias":{"1e3":1})", R"("logit_bias":{"":1})", R"("logit_bias":{"99999999999":1})"}) {
    try {
      completion(std::string(R"({"prompt":"hi",)") + bad + "}");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << bad;
      EXPECT_EQ(error.param, "logit_bias") << bad;
    }
  }
  static const Fixture fixture;
  EXPECT_EQ(status_of(R"({"prompt":"hi","logit_bias":{")" + std::to_string(fixture.config.vocab_size) + R"(":1}})"), 400);
  std::string many = R"({"prompt":"hi","logit_bias":{)";
  for (int id = 0; id <= kMaxLogitBiasPerRow; ++id) many += (id ? "," : "") + ("\"" + std::to_string(id) + "\":1");
  EXPECT_EQ(status_of(many + "}}"), 400);
}

TEST(RequestParse, StopTokenIds) {
  // vLLM's stop_token_ids: ids in the vocabulary, each once, whole floats as ids.
  EXPECT_EQ(completion(R"({"prompt":"hi","stop_token_ids":[7,3,7,3.0]})").stop_token_ids, (std::vector<int32_t>{7, 3}));
  EXPECT_TRUE(completion(R"({"prompt":"hi","stop_token_ids":[]})").stop_token_ids.empty());
  EXPECT_TRUE(completion(R"({"prompt":"hi","stop_token_ids":null})").stop_token_ids.empty());
  // Not the ids that end a text anyway (the tokenizer's EOS): those stay the server's (and
  // ignore_eos drops them).
  static const Fixture fixture;
  EXPECT_EQ(completion(R"({"prompt":"hi","stop_token_ids":[7]})").stop_ids, (std::vector<int32_t>{*fixture.tokenizer.eos_id()}));
  std::string many = R"({"prompt":"hi","stop_token_ids":[)";
  for (int i = 0; i <= 64; ++i) many += (i ? ",1" : "1");
  for (const std::string& bad : {std::string(R"({"prompt":"hi","stop_token_ids":7})"),
                                 std::string(R"({"prompt":"hi","stop_token_ids":["7"]})"),
                                 std::string(R"({"prompt":"hi","stop_token_ids":[-1]})"),
                                 std::string(R"({"prompt":"hi","stop_token_ids":[1.5]})"),
                                 R"({"prompt":"hi","stop_token_ids":[)" + std::to_string(fixture.config.vocab_size) + "]}",
                                 many + "]}"}) {
    try {
      completion(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << bad;
      EXPECT_EQ(error.param, "stop_token_ids") << bad;
    }
  }
}

TEST(RequestParse, ContinuousUsageStatsNeedsIncludeUsage) {
  const char* both = R"({"prompt":"hi","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}})";
  EXPECT_TRUE(completion(both).continuous_usage);
  EXPECT_FALSE(completion(R"({"prompt":"hi","stream":true,"stream_options":{"continuous_usage_stats":true}})").continuous_usage);
  EXPECT_EQ(status_of(R"({"prompt":"hi","stream":true,"stream_options":{"continuous_usage_stats":1}})"), 400);
}

// Every 64-bit seed, signed or not, is its own (a negative one its two's complement); none
// past that is clamped into it, nor a float past where doubles hold every integer.
TEST(RequestParse, SeedsAreSixtyFourBitsAndNothingIsClamped) {
  const auto seed = [](const std::string& value) {
    return completion(R"({"prompt":"hi","temperature":1,"seed":)" + value + "}").sampling.seed;
  };
  EXPECT_EQ(seed("7"), 7u);
  EXPECT_EQ(seed("7.0"), 7u);
  EXPECT_EQ(seed("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(seed("-1"), UINT64_MAX);
  EXPECT_EQ(seed("9223372036854775807"), static_cast<uint64_t>(INT64_MAX));
  EXPECT_EQ(seed("9223372036854775808"), static_cast<uint64_t>(INT64_MAX) + 1);
  EXPECT_EQ(seed("-9223372036854775808"), static_cast<uint64_t>(INT64_MAX) + 1);
  EXPECT_EQ(seed("-2.0"), UINT64_MAX - 1);
  for (const char* bad : {"18446744073709551616", "-9223372036854775809", "1e20", "1e30", "-1e30", "1.5", "\"7\"",
                          "9007199254740994.0", "true"}) {
    try {
      seed(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << bad;
      EXPECT_EQ(error.param, "seed") << bad;
    }
  }
}

// best_of is 1 or refused; as OpenAI's, it may not be below n.
TEST(RequestParse, BestOfIsAtLeastN) {
  EXPECT_EQ(status_of(R"({"prompt":"hi","best_of":1})"), 200);
  EXPECT_EQ(status_of(R"({"prompt":"hi","best_of":1,"n":2})"), 400);
  EXPECT_EQ(status_of(R"({"prompt":"hi","best_of":2,"n":2})"), 400);  // unsupported
}

// A number the sampler's float cannot tell from a range's open end is refused as that.
TEST(RequestParse, ANumberThatRoundsToAnOpenEndSaysSo) {
  try {
    completion(R"({"prompt":"hi","top_p":1e-300})");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.param, "top_p");
    EXPECT_NE(std::string(error.what()).find("32-bit float"), std::string::npos) << error.what();
  }
}

// max_tokens 0 is for echo alone, and the message says so.
TEST(RequestParse, MaxTokensZeroNamesEcho) {
  try {
    completion(R"({"prompt":"hi","max_tokens":0})");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status, 400);
    EXPECT_EQ(error.param, "max_tokens");
    EXPECT_NE(std::string(error.what()).find("0 only with 'echo'"), std::string::npos) << error.what();
  }
  EXPECT_EQ(status_of(R"({"prompt":"hi","max_tokens":0,"echo":true})"), 200);
}

// A request without a temperature samples at 1, as OpenAI's API documents, though the
// fixture's generation_config.json says do_sample false (greedy for generate and chat).
TEST(RequestParse, WithoutATemperatureARequestSamples) {
  EXPECT_EQ(completion(R"({"prompt":"hi"})").sampling.temperature, 1.f);
  EXPECT_EQ(completion(R"({"prompt":"hi","temperature":0})").sampling.temperature, 0.f);
  EXPECT_EQ(completion(R"({"prompt":"hi","temperature":0.5})").sampling.temperature, 0.5f);
}

// A field of an object names its path: stream_options.include_usage.
TEST(RequestParse, StreamOptionsErrorsNameTheirPath) {
  for (const char* name : {"include_usage", "continuous_usage_stats"}) {
    try {
      completion(std::string(R"({"prompt":"hi","stream":true,"stream_options":{")") + name + R"(":"yes"}})");
      ADD_FAILURE() << "accepted: " << name;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400);
      EXPECT_EQ(error.param, std::string("stream_options.") + name);
    }
  }
}

// OpenAI's 'user' is a string; nothing here uses it.
TEST(RequestParse, UserIsAString) {
  EXPECT_EQ(status_of(R"({"prompt":"hi","user":"someone"})"), 200);
  EXPECT_EQ(status_of(R"({"prompt":"hi","user":null})"), 200);
  EXPECT_EQ(status_of(R"({"prompt":"hi","user":5})"), 400);
  EXPECT_EQ(status_of(R"({"prompt":"hi","user":{"id":"x"}})"), 400);
}

// A completion ends at the tokenizer's EOS as at the model's own (generation_config.json),
// as `qwenrt generate` does; ignore_eos drops both.
TEST(RequestParse, ACompletionStopsAtTheTokenizersEos) {
  static const Fixture fixture;
  const auto eos = fixture.tokenizer.eos_id();
  ASSERT_TRUE(eos.has_value());
  const GenerationRequest request = completion(R"({"prompt":"hi"})");
  EXPECT_NE(std::find(request.stop_ids.begin(), request.stop_ids.end(), *eos), request.stop_ids.end());
}

TEST(RequestParse, ParallelToolCalls) {
  static const Fixture fixture;
  RequestLimits limits;
  limits.max_context = 4096;
  limits.vocab_size = fixture.config.vocab_size;
  const ModelText text{&fixture.tokenizer, &fixture.chat_template, &fixture.config};
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_FALSE(parse_chat_request(parse_json_body("{" + messages + "}"), text, limits).single_tool_call);
  EXPECT_FALSE(parse_chat_request(parse_json_body("{" + messages + R"(,"parallel_tool_calls":true})"), text, limits)
                   .single_tool_call);
  EXPECT_TRUE(parse_chat_request(parse_json_body("{" + messages + R"(,"parallel_tool_calls":false})"), text, limits)
                  .single_tool_call);
  EXPECT_THROW(parse_chat_request(parse_json_body("{" + messages + R"(,"parallel_tool_calls":"no"})"), text, limits),
               ApiError);
}

TEST(RequestParse, ToolSchemasKeepTheirKeyOrder) {
  // transformers renders `tools|tojson` with the keys as the client wrote them; a sorted
  // object would put "description" before "name" and "a_first" before "z_last".
  const std::string prompt = rendered_chat(R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",
      "function":{"name":"get_weather","description":"d","parameters":{"type":"object",
      "properties":{"z_last":{"type":"string"},"a_first":{"type":"string"}}}}}]})");
  const size_t name = prompt.find("\"name\"");
  const size_t description = prompt.find("\"description\"");
  const size_t z_last = prompt.find("z_last");
  const size_t a_first = prompt.find("a_first");
  ASSERT_NE(name, std::string::npos) << prompt;
  ASSERT_NE(a_first, std::string::npos) << prompt;
  EXPECT_LT(name, description) << prompt;
  EXPECT_LT(z_last, a_first) << prompt;
}

TEST(RequestParse, DeeplyNestedToolCallArgumentsAreA400) {
  // Arguments are JSON text the server parses (with the shared reader, whose nesting bound
  // refuses this): a 400 naming the field.
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  const std::string body = R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"",
      "tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":")" + deep + R"("}}]}]})";
  try {
    rendered_chat(body);
    FAIL() << "deeply nested arguments were accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status, 400);
    EXPECT_EQ(error.param, "messages[1].tool_calls");
  }
}

TEST(RequestParse, ChatAnswersOfTheOriginalQwenStopAtTheTurnsEnd) {
  static const Fixture fixture;
  RequestLimits limits;
  limits.max_context = 4096;
  limits.vocab_size = fixture.config.vocab_size;
  const auto body = parse_json_body(R"({"messages":[{"role":"user","content":"hi"}]})");
  const auto id = [&](const char* token) { return *fixture.tokenizer.token_to_id(token); };
  ModelConfig v1 = fixture.config;
  v1.architecture = Architecture::kQwenV1;
  const ModelText v1_text{&fixture.tokenizer, &fixture.chat_template, &v1};
  const std::vector<int32_t> v1_stops = parse_chat_request(body, v1_text, limits).stop_ids;
  for (const char* token : {"<|im_end|>", "<|im_start|>", "<|endoftext|>"}) {
    EXPECT_NE(std::find(v1_stops.begin(), v1_stops.end(), id(token)), v1_stops.end()) << token;
  }
  // Qwen2/3 name their stops in generation_config.json: only the tokenizer's EOS is added.
  const ModelText text{&fixture.tokenizer, &fixture.chat_template, &fixture.config};
  const std::vector<int32_t> stops = parse_chat_request(body, text, limits).stop_ids;
  EXPECT_EQ(std::find(stops.begin(), stops.end(), id("<|im_start|>")), stops.end());
  if (auto eos = fixture.tokenizer.eos_id()) {
    EXPECT_NE(std::find(stops.begin(), stops.end(), *eos), stops.end());
  }
}

// Without a template the chat route says why: none in the folder, or the folder's failed to
// load (the reason, which names the server's files, stays in its log), and what gives one.
TEST(RequestParse, AChatWithoutATemplateSaysWhy) {
  static const Fixture fixture;
  const auto body = parse_json_body(R"({"messages":[{"role":"user","content":"hi"}]})");
  ModelText text{&fixture.tokenizer, nullptr, &fixture.config};
  for (const bool failed : {false, true}) {
    text.chat_template_failed = failed;
    try {
      parse_chat_request(body, text, test_limits(fixture));
      ADD_FAILURE() << "a chat request without a template was accepted";
    } catch (const ApiError& error) {
      const std::string message = error.what();
      EXPECT_EQ(error.status, 400);
      EXPECT_NE(message.find(failed ? "failed to load (the server's log says why)" : "this model has no chat template"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("--chat-template FILE"), std::string::npos) << message;
    }
  }
}

GenerationRequest chat(const std::string& body) {
  static const Fixture fixture;
  RequestLimits limits;
  limits.max_context = 4096;
  limits.vocab_size = fixture.config.vocab_size;
  const ModelText text{&fixture.tokenizer, &fixture.chat_template, &fixture.config};
  return parse_chat_request(parse_json_body(body), text, limits);
}

TEST(RequestParse, ReasoningEffortNoneTurnsQwen3sReasoningOff) {
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  const std::string thinking = rendered_chat("{" + messages + "}");
  const std::string not_thinking = rendered_chat("{" + messages + R"(,"chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_NE(thinking, not_thinking);
  EXPECT_EQ(rendered_chat("{" + messages + R"(,"reasoning_effort":"none"})"), not_thinking);
  EXPECT_FALSE(chat("{" + messages + R"(,"reasoning_effort":"none"})").may_think);
  for (const char* level : {"minimal", "low", "medium", "high", "xhigh"}) {
    EXPECT_EQ(rendered_chat("{" + messages + R"(,"reasoning_effort":")" + level + "\"}"), thinking) << level;
    EXPECT_TRUE(chat("{" + messages + R"(,"reasoning_effort":")" + level + "\"}").may_think) << level;
  }
  EXPECT_EQ(rendered_chat("{" + messages + R"(,"reasoning_effort":null})"), thinking);
  EXPECT_EQ(rendered_chat("{" + messages + R"(,"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":false}})"),
            not_thinking);
  for (const std::string bad : {R"("reasoning_effort":"maximal")", R"("reasoning_effort":3)",
                                R"("reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true})",
                                R"("reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false})"}) {
    try {
      chat("{" + messages + "," + bad + "}");
      ADD_FAILURE() << bad;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << bad;
      EXPECT_EQ(error.param, "reasoning_effort") << bad;
    }
  }
}

// serve --default-chat-template-kwargs: variables every chat request starts from, each
// request's own chat_template_kwargs and reasoning_effort over them.
TEST(RequestParse, ServerDefaultTemplateKwargsGiveWayToTheRequests) {
  static const Fixture fixture;
  RequestLimits limits;
  limits.max_context = 4096;
  limits.vocab_size = fixture.config.vocab_size;
  ModelText text{&fixture.tokenizer, &fixture.chat_template, &fixture.config};
  text.default_template_kwargs = {{"enable_thinking", false}};
  const auto with_defaults = [&](const std::string& body) { return parse_chat_request(parse_json_body(body), text, limits); };
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  const std::string thinking = rendered_chat("{" + messages + "}");
  const std::string not_thinking = rendered_chat("{" + messages + R"(,"chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_NE(thinking, not_thinking);
  const auto render = [&](const std::string& body) { return fixture.tokenizer.decode(with_defaults(body).prompt); };
  EXPECT_EQ(render("{" + messages + "}"), not_thinking);
  EXPECT_FALSE(with_defaults("{" + messages + "}").may_think);
  EXPECT_EQ(render("{" + messages + R"(,"chat_template_kwargs":{"enable_thinking":true}})"), thinking);
  EXPECT_TRUE(with_defaults("{" + messages + R"(,"chat_template_kwargs":{"enable_thinking":true}})").may_think);
  // reasoning_effort contradicts only what the request itself says.
  EXPECT_EQ(render("{" + messages + R"(,"reasoning_effort":"high"})"), thinking);
  EXPECT_EQ(render("{" + messages + R"(,"reasoning_effort":"none"})"), not_thinking);
  // Other variables of the request sit beside the defaults.
  EXPECT_EQ(render("{" + messages + R"(,"chat_template_kwargs":{"unused":1}})"), not_thinking);
}

TEST(RequestParse, TokenizeCountsAsTheGenerationRoutesDo) {
  static const Fixture fixture;
  RequestLimits limits = test_limits(fixture);
  const ModelText text{&fixture.tokenizer, &fixture.chat_template, &fixture.config};
  const auto tokenize = [&](const std::string& body) { return parse_tokenize_request(parse_json_body(body), text, limits).ids; };
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"get_weather"}}])";
  for (const std::string& fields : {std::string(R"("messages":[{"role":"user","content":"hi"}])"),
                                   R"("messages":[{"role":"developer","content":"be brief"},{"role":"user","content":"hi"}],)" + tools,
                                   std::string(R"("messages":[{"role":"user","content":"hi"}],"reasoning_effort":"none")")}) {
    EXPECT_EQ(tokenize("{" + fields + "}"), chat("{" + fields + "}").prompt) << fields;
  }
  EXPECT_EQ(tokenize(R"({"prompt":"a<|im_end|>b"})"), completion(R"({"prompt":"a<|im_end|>b"})").prompt);
  const std::vector<int32_t> bare = tokenize(R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false})");
  const std::vector<int32_t> full = tokenize(R"({"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_LT(bare.size(), full.size());
  EXPECT_TRUE(std::equal(bare.begin(), bare.end(), full.begin()));
  // No context check: a client learns the count of what it could not send.
  limits.max_context = 2;
  EXPECT_GT(tokenize(R"({"prompt":"a longer text than two tokens"})").size(), 2u);
  EXPECT_FALSE(parse_tokenize_request(parse_json_body(R"({"prompt":"a"})"), text, limits).token_strs);
  EXPECT_TRUE(parse_tokenize_request(parse_json_body(R"({"prompt":"a","return_token_strs":true})"), text, limits).token_strs);
  EXPECT_EQ(tokenize(R"({"prompt":"a b","add_special_tokens":true})"), tokenize(R"({"prompt":"a b"})"));
  EXPECT_THROW(tokenize(R"({"prompt":"a","add_special_tokens":"yes"})"), ApiError);
  EXPECT_EQ(parse_detokenize_request(parse_json_body(R"({"tokens":[]})"), text, limits), "");
  EXPECT_THROW(parse_detokenize_request(parse_json_body(R"({"tokens":[1,2,3]})"), text, limits), ApiError);
}

TEST(RequestParse, EchoIsACompletionsFieldAndLetsMaxTokensBeZero) {
  const GenerationRequest echoed = completion(R"({"prompt":"hi","echo":true,"max_tokens":0,"logprobs":2})");
  EXPECT_TRUE(echoed.echo);
  EXPECT_EQ(echoed.max_tokens, 0);
  EXPECT_EQ(echoed.top_logprobs, 2);
  EXPECT_FALSE(completion(R"({"prompt":"hi","echo":false})").echo);
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt":"hi","max_tokens":0})", "max_tokens"},
           {R"({"prompt":"hi","echo":true,"max_tokens":-1})", "max_tokens"}}) {
    try {
      completion(body);
      ADD_FAILURE() << body;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.param, param) << body;
    }
  }
  try {
    chat(R"({"messages":[{"role":"user","content":"hi"}],"echo":true})");
    ADD_FAILURE() << "chat echo";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status, 400);
    EXPECT_EQ(error.param, "echo");
    EXPECT_EQ(error.code, "unsupported_parameter");
  }
}

// top_logprobs 0 is "none": clients send it by default, with or without logprobs (vLLM
// refuses only a positive count without logprobs).
TEST(RequestParse, TopLogprobsZeroNeedsNoLogprobs) {
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  // -1: no log-probabilities at all.
  EXPECT_EQ(chat("{" + messages + R"(,"top_logprobs":0})").top_logprobs, -1);
  EXPECT_EQ(chat("{" + messages + R"(,"logprobs":false,"top_logprobs":0})").top_logprobs, -1);
  EXPECT_EQ(chat("{" + messages + R"(,"logprobs":true,"top_logprobs":0})").top_logprobs, 0);
  EXPECT_EQ(chat("{" + messages + R"(,"logprobs":true,"top_logprobs":3})").top_logprobs, 3);
  for (const std::string bad : {R"("top_logprobs":2)", R"("logprobs":false,"top_logprobs":1)", R"("top_logprobs":-1)"}) {
    try {
      chat("{" + messages + "," + bad + "}");
      ADD_FAILURE() << bad;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << bad;
      EXPECT_EQ(error.param, "top_logprobs") << bad;
    }
  }
}

// The deprecated "function" role: a function's result, rendered as a tool's answer.
TEST(RequestParse, AFunctionMessageIsAToolsAnswer) {
  const std::string function = rendered_chat(
      R"({"messages":[{"role":"user","content":"weather?"},{"role":"function","name":"get_weather","content":"sunny"}]})");
  const std::string tool = rendered_chat(
      R"({"messages":[{"role":"user","content":"weather?"},{"role":"tool","name":"get_weather","content":"sunny"}]})");
  EXPECT_EQ(function, tool);
  EXPECT_NE(function.find("<|im_start|>tool\nsunny<|im_end|>"), std::string::npos) << function;
  // The assistant's function_call before it: its one tool call, as tool_calls would give it.
  const std::string called = R"({"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}})";
  const std::string as_tool_call = R"({"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]})";
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  // Qwen2.5's own template, which writes each call as <tool_call>{...}</tool_call>.
  static const Fixture fixture;
  const ChatTemplate qwen25 = ChatTemplate::load(QWENRT_TEST_DATA "/serve", QWENRT_TEST_DATA "/templates/qwen2.5-instruct.jinja");
  RequestLimits limits = test_limits(fixture);
  limits.served_model_name.clear();
  const ModelText text{&fixture.tokenizer, &qwen25, &fixture.config};
  const auto render = [&](const std::string& body) {
    return fixture.tokenizer.decode(parse_chat_request(parse_json_body(body), text, limits).prompt);
  };
  const std::string legacy = render(R"({"messages":[{"role":"user","content":"weather?"},)" + called +
                                    R"(,{"role":"function","name":"get_weather","content":"sunny"}],)" + tools + "}");
  EXPECT_EQ(legacy, render(R"({"messages":[{"role":"user","content":"weather?"},)" + as_tool_call +
                           R"(,{"role":"tool","name":"get_weather","content":"sunny"}],)" + tools + "}"));
  EXPECT_NE(legacy.find(R"(<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call>)"), std::string::npos) << legacy;
  EXPECT_NE(legacy.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos) << legacy;
  // Integers past 64 bits in a call's arguments reach the template exactly, as json.loads
  // gives them to transformers' template (they were an error, or a float past 2^64).
  const std::string big = render(
      R"({"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":"{\"id\": 123456789012345678901234, \"n\": 18446744073709551615}"}}]}],)" +
      tools + "}");
  EXPECT_NE(big.find(R"({"name": "get_weather", "arguments": {"id": 123456789012345678901234, "n": 18446744073709551615}})"),
            std::string::npos)
      << big;
  EXPECT_NO_THROW(rendered_chat(R"({"messages":[{"role":"assistant","content":"x","tool_calls":null},{"role":"user","content":"y"}]})"));
  try {
    rendered_chat(R"({"messages":[{"role":"robot","content":"x"}]})");
    ADD_FAILURE() << "role robot";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.param, "messages[0].role");
  }
}

// An earlier answer's reasoning sent back under vLLM's name, `reasoning`, reaches Qwen3's
// template as its `reasoning_content`; a message that gives both keeps its reasoning_content.
TEST(RequestParse, ReasoningSentBackUnderEitherNameReachesTheTemplate) {
  static const Fixture fixture;
  const ChatTemplate qwen3 = ChatTemplate::load(QWENRT_TEST_DATA "/serve", QWENRT_TEST_DATA "/templates/qwen3.jinja");
  RequestLimits limits = test_limits(fixture);
  limits.served_model_name.clear();
  const ModelText text{&fixture.tokenizer, &qwen3, &fixture.config};
  const auto render = [&](const std::string& assistant) {
    return fixture.tokenizer.decode(
        parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"2+2?"},)" + assistant + "]}"), text,
                           limits)
            .prompt);
  };
  const std::string by_old_name = render(R"({"role":"assistant","content":"4","reasoning_content":"add them"})");
  EXPECT_NE(by_old_name.find("<think>\nadd them\n</think>\n\n4"), std::string::npos) << by_old_name;
  EXPECT_EQ(render(R"({"role":"assistant","content":"4","reasoning":"add them"})"), by_old_name);
  EXPECT_EQ(render(R"({"role":"assistant","content":"4","reasoning_content":"add them","reasoning":"other"})"),
            by_old_name);
}

// A message that quotes the request keeps what comes after a NUL in it (what() would end there).
TEST(RequestParse, ErrorMessagesGoOnPastANul) {
  const std::string nul_key("a\0b", 3);
  for (const std::string& body :
       {std::string(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",)"
                    R"("json_schema":{"name":"a","schema":{"type":"object","properties":{"a\u0000b":{"type":"strin"}}}}}})"),
        std::string(R"({"messages":[{"role":"us\u0000er","content":"x"}]})")}) {
    try {
      chat(body);
      ADD_FAILURE() << body;
    } catch (const ApiError& error) {
      EXPECT_TRUE(error.message.find(nul_key) != std::string::npos ||
                  error.message.find(std::string("us\0er", 5)) != std::string::npos)
          << error.message;
    }
  }
}

// An escaped half of a surrogate pair alone is read as U+FFFD; pairs, other escapes and an
// escaped backslash before "u" are left as they are.
TEST(RequestParse, LoneSurrogateEscapesBecomeReplacementCharacters) {
  EXPECT_EQ(lone_surrogates_replaced(R"({"a":"plain \u00e9 \ud83d\ude00 \\ud83d \""})"), std::nullopt);
  EXPECT_EQ(lone_surrogates_replaced(R"({"a":"x\ud83d y"})").value_or(""), R"({"a":"x\ufffd y"})");
  EXPECT_EQ(lone_surrogates_replaced(R"({"a":"\uDC00\ud83d\ud83d\ude00\ud83d"})").value_or(""),
            R"({"a":"\ufffd\ufffd\ud83d\ude00\ufffd"})");
  EXPECT_EQ(lone_surrogates_replaced(R"({"\ud800":1})").value_or(""), R"({"\ufffd":1})");
  const auto body = parse_json_body(R"({"prompt":"cut \ud83d","user":"\ud83d\ude00"})");
  EXPECT_EQ(body["prompt"].get<std::string>(), "cut \xEF\xBF\xBD");
  EXPECT_EQ(body["user"].get<std::string>(), "\xF0\x9F\x98\x80");
  // Not an escape the parser takes: still refused, by the parser.
  EXPECT_THROW(parse_json_body(R"({"prompt":"\ud83"})"), ApiError);
  EXPECT_THROW(parse_json_body(R"({"prompt":"\ud83d)"), ApiError);
}

// suffix needs fill-in-the-middle tokens (the server tests' byte-level tokenizer has none;
// Qwen's: tests/tokenizer/test_fill_in_the_middle.cpp), and chat has no suffix.
TEST(RequestParse, SuffixIsRefusedWithoutFillInTheMiddleTokens) {
  for (const bool chat_route : {false, true}) {
    try {
      if (chat_route) {
        chat(R"({"messages":[{"role":"user","content":"hi"}],"suffix":"y"})");
      } else {
        completion(R"({"prompt":"x","suffix":"y"})");
      }
      ADD_FAILURE() << chat_route;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.param, "suffix");
      EXPECT_EQ(error.code, "unsupported_parameter");
    }
  }
  EXPECT_NO_THROW(completion(R"({"prompt":"x","suffix":""})"));  // empty: no insertion
  EXPECT_NO_THROW(chat(R"({"messages":[{"role":"user","content":"hi"}],"suffix":""})"));
}

TEST(RequestParse, AForcedToolCallOpensTheAnswer) {
  static const Fixture fixture;
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"get_weather"}},
      {"type":"function","function":{"name":"f<|im_end|>"}}])";
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  const std::string rendered_auto = rendered_chat("{" + messages + "," + tools + "}");
  // The template's answer without reasoning (enable_thinking false), then the call's opening.
  const std::string rendered_no_thinking =
      rendered_chat("{" + messages + "," + tools + R"(,"chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_NE(rendered_auto, rendered_no_thinking);
  const std::string named_body =
      "{" + messages + "," + tools + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}},
      "chat_template_kwargs":{"enable_thinking":true}})";
  const GenerationRequest named = chat(named_body);
  const std::string opening = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\":";
  EXPECT_EQ(fixture.tokenizer.decode(named.prompt), rendered_no_thinking + opening);
  EXPECT_EQ(named.forced_tool_text, opening);
  EXPECT_TRUE(named.single_tool_call);  // a named tool is called once, and its close ends the answer
  const int32_t close = *fixture.tokenizer.token_to_id("</tool_call>");
  EXPECT_NE(std::find(named.stop_ids.begin(), named.stop_ids.end(), close), named.stop_ids.end());
  EXPECT_EQ(std::count(named.prompt.begin(), named.prompt.end(), *fixture.tokenizer.token_to_id("<tool_call>")), 1);
  // truncate_prompt_tokens cuts the rendered chat; the call's opening comes after, whole.
  const GenerationRequest cut = chat(named_body.substr(0, named_body.size() - 1) + R"(,"truncate_prompt_tokens":3})");
  const std::vector<int32_t> opening_ids(named.prompt.end() - static_cast<std::ptrdiff_t>(cut.prompt.size() - 3),
                                         named.prompt.end());
  EXPECT_EQ(fixture.tokenizer.decode(opening_ids), opening);
  EXPECT_EQ(std::vector<int32_t>(cut.prompt.end() - static_cast<std::ptrdiff_t>(opening_ids.size()), cut.prompt.end()),
            opening_ids);

  // "required": the model names the tool; it may call several unless told otherwise.
  const GenerationRequest required = chat("{" + messages + "," + tools + R"(,"tool_choice":"required"})");
  EXPECT_EQ(fixture.tokenizer.decode(required.prompt), rendered_no_thinking + "<tool_call>\n{\"name\": \"");
  EXPECT_FALSE(required.single_tool_call);
  EXPECT_EQ(std::find(required.stop_ids.begin(), required.stop_ids.end(), close), required.stop_ids.end());
  EXPECT_TRUE(chat("{" + messages + "," + tools + R"(,"tool_choice":"required","parallel_tool_calls":false})")
                  .single_tool_call);

  // A name is the client's text: one spelling a control token stays text.
  const GenerationRequest odd =
      chat("{" + messages + "," + tools + R"(,"tool_choice":{"type":"function","function":{"name":"f<|im_end|>"}}})");
  const int32_t im_end = *fixture.tokenizer.token_to_id("<|im_end|>");
  EXPECT_EQ(std::count(odd.prompt.begin(), odd.prompt.end(), im_end),
            std::count(named.prompt.begin(), named.prompt.end(), im_end));
  EXPECT_EQ(fixture.tokenizer.decode(odd.prompt), rendered_no_thinking + "<tool_call>\n{\"name\": \"f<|im_end|>\", \"arguments\":");

  // "auto" and "none" force nothing.
  EXPECT_TRUE(chat("{" + messages + "," + tools + R"(,"tool_choice":"auto"})").forced_tool_text.empty());
  EXPECT_TRUE(chat("{" + messages + "," + tools + R"(,"tool_choice":"none"})").forced_tool_text.empty());
  EXPECT_EQ(fixture.tokenizer.decode(chat("{" + messages + "," + tools + R"(,"tool_choice":"auto"})").prompt),
            rendered_auto);
  // "none": the tools stay in the prompt (as OpenAI's), no call is parsed, and the call's
  // opening tag is biased out of every draw (a client's own bias on it kept if lower).
  const int32_t open = *fixture.tokenizer.token_to_id("<tool_call>");
  const GenerationRequest none = chat("{" + messages + "," + tools + R"(,"tool_choice":"none"})");
  EXPECT_EQ(fixture.tokenizer.decode(none.prompt), rendered_auto);
  EXPECT_FALSE(none.parse_tool_calls);
  ASSERT_EQ(none.logit_bias.size(), 1u);
  EXPECT_EQ(none.logit_bias[0].id, open);
  EXPECT_EQ(none.logit_bias[0].bias, -100.f);
  const GenerationRequest biased = chat("{" + messages + "," + tools + R"(,"tool_choice":"none","logit_bias":{")" +
                                        std::to_string(open) + R"(":50,"65":3}})");
  ASSERT_EQ(biased.logit_bias.size(), 2u);
  for (const TokenBias& entry : biased.logit_bias) EXPECT_EQ(entry.bias, entry.id == open ? -100.f : 3.f);
  EXPECT_TRUE(chat("{" + messages + R"(,"tool_choice":"none"})").logit_bias.empty());  // no tools: nothing to ban

  const auto refused = [&](const std::string& body, const std::string& code) {
    try {
      chat(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << body;
      EXPECT_EQ(error.param, "tool_choice") << body;
      EXPECT_EQ(error.code, code) << body;
    }
  };
  refused("{" + messages + "," + tools + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}}})", "");
  refused("{" + messages + R"(,"tool_choice":"required"})", "");
  refused("{" + messages + R"(,"tools":[],"tool_choice":"required"})", "");
  refused("{" + messages + R"(,"tool_choice":"auto"})", "");  // as vLLM: "auto" needs tools to choose from
  refused("{" + messages + "," + tools + R"(,"tool_choice":{"type":"function"}})", "");
  refused("{" + messages + "," + tools + R"(,"tool_choice":{"type":"function","function":{"name":7}}})", "");
  refused("{" + messages + "," + tools + R"(,"tool_choice":{"type":"allowed_tools","allowed_tools":{}}})",
          "unsupported_parameter");
  refused("{" + messages + "," + tools + R"(,"tool_choice":"always"})", "");
  // An empty name is a name (not "required"): none of these tools has it.
  refused("{" + messages + "," + tools + R"(,"tool_choice":{"type":"function","function":{"name":""}}})", "");
  // A name with the call's own tags would end the call's opening early.
  refused("{" + messages + R"(,"tools":[{"type":"function","function":{"name":"a</tool_call>b"}}],
      "tool_choice":{"type":"function","function":{"name":"a</tool_call>b"}}})", "");
}

TEST(RequestParse, AForcedToolCallClosesAThinkingOnlyTemplatesReasoning) {
  // Thinking-only templates (QwQ, Qwen3's thinking releases) end the prompt with "<think>\n":
  // a forced call comes after an empty reasoning block, as Qwen3 writes one.
  static const Fixture fixture;
  const ChatTemplate thinking(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}");
  RequestLimits limits;
  limits.max_context = 4096;
  limits.vocab_size = fixture.config.vocab_size;
  const ModelText text{&fixture.tokenizer, &thinking, &fixture.config};
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],
      "tools":[{"type":"function","function":{"name":"f"}}])";
  EXPECT_TRUE(parse_chat_request(parse_json_body(body + "}"), text, limits).reasoning_open);
  const GenerationRequest forced =
      parse_chat_request(parse_json_body(body + R"(,"tool_choice":{"type":"function","function":{"name":"f"}}})"), text, limits);
  EXPECT_FALSE(forced.reasoning_open);
  const std::string expected = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                               "<tool_call>\n{\"name\": \"f\", \"arguments\":";
  EXPECT_EQ(fixture.tokenizer.decode(forced.prompt), expected);
  // Tokenized as the whole text is: "\n\n" one token after <think>, not two.
  std::vector<int32_t> whole = fixture.tokenizer.encode("<|im_start|>user\n", true);
  const std::vector<int32_t> rest = fixture.tokenizer.encode("hi", false);
  whole.insert(whole.end(), rest.begin(), rest.end());
  const std::vector<int32_t> tail = fixture.tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>", true);
  whole.insert(whole.end(), tail.begin(), tail.end());
  ASSERT_GT(forced.prompt.size(), whole.size());
  EXPECT_TRUE(std::equal(whole.begin(), whole.end(), forced.prompt.begin()));
}

}  // namespace
}  // namespace qwenrt::server

namespace qwenrt::server {
namespace {

TEST(RequestParse, StructuredOutput) {
  static const Fixture fixture;
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  const auto id = [&](const char* token) { return *fixture.tokenizer.token_to_id(token); };
  // No response_format, or "text": free.
  EXPECT_FALSE(chat("{" + messages + "}").structured);
  EXPECT_FALSE(chat("{" + messages + R"(,"response_format":{"type":"text"}})").structured);
  // json_object on chat: ends at the turn's end ids and the model's EOS; reasoning first.
  const GenerationRequest object = chat("{" + messages + R"(,"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(object.structured);
  for (const int32_t end : object.stop_ids) {
    EXPECT_NE(std::find(object.structured->end_ids.begin(), object.structured->end_ids.end(), end),
              object.structured->end_ids.end());
  }
  for (const int32_t eos : fixture.config.eos_token_ids) {
    EXPECT_NE(std::find(object.structured->end_ids.begin(), object.structured->end_ids.end(), eos),
              object.structured->end_ids.end());
  }
  EXPECT_EQ(object.structured->think_open, id("<think>"));
  EXPECT_EQ(object.structured->think_close, id("</think>"));
  EXPECT_TRUE(object.structured->prefix.empty());
  EXPECT_EQ(object.structured->call_open, -1);
  // Without thinking, the grammar starts at once; on completions there is no reasoning.
  EXPECT_EQ(chat("{" + messages + R"(,"response_format":{"type":"json_object"},
      "chat_template_kwargs":{"enable_thinking":false}})").structured->think_open, -1);
  const GenerationRequest text = completion(R"({"prompt":"x","response_format":{"type":"json_schema",
      "json_schema":{"name":"n","schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}})");
  ASSERT_TRUE(text.structured);
  EXPECT_EQ(text.structured->think_open, -1);
  // A completion's text ends at the tokenizer's EOS and the model's.
  std::vector<int32_t> text_ends = {*fixture.tokenizer.eos_id()};
  text_ends.insert(text_ends.end(), fixture.config.eos_token_ids.begin(), fixture.config.eos_token_ids.end());
  EXPECT_EQ(text.structured->end_ids, text_ends);

  const auto refused = [&](const std::string& body, const std::string& param, const std::string& words) {
    try {
      chat("{" + messages + "," + body + "}");
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << body;
      EXPECT_EQ(error.param, param) << body;
      EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
    }
  };
  refused(R"("response_format":"json")", "response_format", "'type'");
  refused(R"("response_format":{"type":"grammar"})", "response_format", "'grammar'");
  refused(R"("response_format":{"type":"json_schema"})", "response_format.json_schema", "'schema'");
  refused(R"("response_format":{"type":"json_schema","json_schema":{"name":"n"}})", "response_format.json_schema.schema",
          "required");
  refused(R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object",
      "properties":{"zip":{"type":"string","pattern":"^[0-9]+\\b"}}}}})",
          "response_format.json_schema.schema", "#/properties/zip: 'pattern' \"^[0-9]+\\\\b\": word boundaries");
  refused(R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object",
      "properties":{"price":{"type":"number","multipleOf":0.01}}}}})",
          "response_format.json_schema.schema", "#/properties/price: 'multipleOf' is supported only as a whole number");
  refused(R"("response_format":{"type":"json_object"},"min_tokens":2)", "min_tokens", "structured output");
  // The schema's name and strict flag as OpenAI has them.
  const std::string any_object = R"("schema":{"type":"object"})";
  refused(R"("response_format":{"type":"json_schema","json_schema":{)" + any_object + "}}", "response_format.json_schema.name",
          "is required");
  refused(R"("response_format":{"type":"json_schema","json_schema":{"name":"bad name!",)" + any_object + "}}",
          "response_format.json_schema.name", "1 to 64 letters");
  refused(R"("response_format":{"type":"json_schema","json_schema":{"name":")" + std::string(65, 'a') + "\"," + any_object + "}}",
          "response_format.json_schema.name", "1 to 64 letters");
  refused(R"("response_format":{"type":"json_schema","json_schema":{"name":"n","strict":"yes",)" + any_object + "}}",
          "response_format.json_schema.strict", "true or false");
  EXPECT_TRUE(chat("{" + messages + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"a_B-9",
      "strict":null,"schema":{"type":"object"}}}})").structured);
}

TEST(RequestParse, AForcedToolCallIsHeldToItsToolsSchema) {
  static const Fixture fixture;
  const auto id = [&](const char* token) { return *fixture.tokenizer.token_to_id(token); };
  const std::string tools = R"("messages":[{"role":"user","content":"hi"}],"tools":[
      {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
        "properties":{"city":{"type":"string"}},"required":["city"]}}},
      {"type":"function","function":{"name":"lookup","parameters":{"type":"object",
        "properties":{"n":{"type":"array","uniqueItems":true}}}}},
      {"type":"function","function":{"name":"count","parameters":{"type":"object",
        "properties":{"n":{"type":"integer","minimum":1}}}}}])";
  const GenerationRequest named = chat("{" + tools + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
  ASSERT_TRUE(named.structured);
  EXPECT_EQ(named.structured->prefix, "\n{\"name\": \"get_weather\", \"arguments\":");
  EXPECT_EQ(named.structured->end_ids, std::vector<int32_t>{id("</tool_call>")});
  EXPECT_EQ(named.structured->call_open, -1);  // one call
  EXPECT_EQ(named.structured->think_open, -1);
  structured::JsonMatcher matcher(named.structured->grammar);
  structured::MatchState state = matcher.start();
  ASSERT_TRUE(matcher.advance_all(state, named.structured->prefix));
  structured::MatchState fits = state, misses = state;
  EXPECT_TRUE(matcher.advance_all(fits, R"( {"city": "Paris"}})") && matcher.accepting(fits));
  EXPECT_FALSE(matcher.advance_all(misses, R"( {"town": )"));

  // "required", parallel calls: any of the tools, more calls after each; a tool whose
  // schema the grammar cannot enforce (uniqueItems) still gets an object for its arguments;
  // one with bounds is held to them.
  const GenerationRequest required = chat("{" + tools + R"(,"tool_choice":"required"})");
  ASSERT_TRUE(required.structured);
  EXPECT_EQ(required.structured->prefix, "\n{\"name\": \"");
  EXPECT_EQ(required.structured->call_open, id("<tool_call>"));
  // After the calls, the turn's end or the model's EOS (as an unconstrained answer ends).
  std::vector<int32_t> final_ids = required.stop_ids;
  for (const int32_t eos : fixture.config.eos_token_ids) {
    if (std::find(final_ids.begin(), final_ids.end(), eos) == final_ids.end()) final_ids.push_back(eos);
  }
  EXPECT_EQ(required.structured->final_ids, final_ids);
  EXPECT_GT(final_ids.size(), required.stop_ids.size());
  structured::JsonMatcher any_tool(required.structured->grammar);
  for (const std::string call : {R"(lookup", "arguments": {"n": 0, "x": [true]}})", R"(get_weather", "arguments": {"city": "Rome"}})"}) {
    structured::MatchState s = any_tool.start();
    EXPECT_TRUE(any_tool.advance_all(s, required.structured->prefix + call) && any_tool.accepting(s)) << call;
  }
  for (const std::string call : {R"(count", "arguments": {"n": 0}})", R"(count", "arguments": {"n": -3}})"}) {
    structured::MatchState s = any_tool.start();
    EXPECT_FALSE(any_tool.advance_all(s, required.structured->prefix + call) && any_tool.accepting(s)) << call;
  }
  structured::MatchState counted = any_tool.start();
  EXPECT_TRUE(any_tool.advance_all(counted, required.structured->prefix + R"(count", "arguments": {"n": 10}})") &&
              any_tool.accepting(counted));
  structured::MatchState unknown = any_tool.start();
  EXPECT_FALSE(any_tool.advance_all(unknown, required.structured->prefix + "other\""));
  const GenerationRequest single = chat("{" + tools + R"(,"tool_choice":"required","parallel_tool_calls":false})");
  EXPECT_EQ(single.structured->call_open, -1);
}

}  // namespace
}  // namespace qwenrt::server
