// generate with text in and out (-p, --chat, --stop, --format text/json) on a small random
// model that uses Qwen's real tokenizer and chat template.
#include <gtest/gtest.h>

#include <random>

#include "../unit/test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace qwenrt {
namespace {

using test::qwen_tokenizer_dir;

// A 1-layer Qwen3 with Qwen's full vocabulary and random fp32 weights, next to Qwen's
// tokenizer.json and tokenizer_config.json.
class TextModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    nlohmann::json config = {{"architectures", {"Qwen3ForCausalLM"}}, {"hidden_size", 8},
                             {"intermediate_size", 16}, {"num_hidden_layers", 1},
                             {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                             {"head_dim", 8}, {"vocab_size", 151936}, {"rms_norm_eps", 1e-6},
                             {"max_position_embeddings", 1024}, {"rope_theta", 1000000.0},
                             {"tie_word_embeddings", true}, {"eos_token_id", 151645}};
    std::vector<test::TensorSpec> tensors = test::qwen_tensors(config);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& tensor : tensors) {
      std::vector<float> values(static_cast<size_t>(test::numel(tensor.shape)));
      for (float& v : values) v = normal(rng);
      tensor.bytes = test::float_bytes(values);
    }
    test::write_model(dir_->path(), config, tensors);
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(qwen_tokenizer_dir() / name, dir_->path() / name);
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  static nlohmann::json generate_json(const std::string& args) {
    auto result = test::run_command(std::string(QWENRT_BINARY) + " generate --device cpu -m " +
                                    test::shell_quote(dir_->path().string()) + " --format json " + args);
    EXPECT_EQ(result.exit_code, 0) << result.out;
    return nlohmann::json::parse(result.out);
  }

  static test::TempDir* dir_;
};

test::TempDir* TextModel::dir_ = nullptr;

TEST_F(TextModel, ChatStreamsTheDecodedText) {
  Tokenizer tokenizer = Tokenizer::load(dir_->path());
  auto out = generate_json("--chat 'Hello there' -n 24 --ignore-eos");
  auto ids = out["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 24u);
  // The streamed text (held-back partial characters included) equals a batch decode.
  EXPECT_EQ(out["text"].get<std::string>(), tokenizer.decode(ids, /*skip_special=*/true));
  // Prompt: ChatML scaffolding around the message (exact ids are checked in test_chat_prompt).
  EXPECT_GT(out["prompt_tokens"].get<int>(), 5);
}

TEST_F(TextModel, PromptIsEncodedAsIs) {
  Tokenizer tokenizer = Tokenizer::load(dir_->path());
  auto out = generate_json("-p 'The capital of France is' -n 3 --ignore-eos");
  EXPECT_EQ(out["prompt_tokens"].get<size_t>(), tokenizer.encode("The capital of France is").size());
}

TEST_F(TextModel, StopStringEndsGenerationAndIsNotPrinted) {
  auto full = generate_json("-p 'Once upon a time' -n 40 --ignore-eos");
  std::string text = full["text"].get<std::string>();
  ASSERT_GE(text.size(), 12u);
  // A stop string taken from the middle of the greedy continuation (whole characters).
  auto char_start = [&](size_t at) {
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    return at;
  };
  size_t begin = char_start(text.size() / 2);
  size_t end = char_start(char_start(begin + 1) + 1);
  ASSERT_LT(end, text.size());
  std::string stop = text.substr(begin, end - begin);
  size_t first = text.find(stop);
  auto stopped = generate_json("-p 'Once upon a time' -n 40 --ignore-eos --stop " + test::shell_quote(stop));
  EXPECT_EQ(stopped["text"].get<std::string>(), text.substr(0, first));
  EXPECT_EQ(stopped["finish_reason"], "stop");
  EXPECT_EQ(stopped["stop"], stop);
}

// Text format with --ids prints ids (as --help says), also when --stop loads the tokenizer.
TEST_F(TextModel, IdsInIdsOutWithStopStrings) {
  const std::string common = std::string(QWENRT_BINARY) + " generate --device cpu -m " +
                             test::shell_quote(dir_->path().string()) + " --ids '9707 11 1879' -n 6 --ignore-eos";
  auto json = generate_json("--ids '9707 11 1879' -n 6 --ignore-eos --stop 'qqqq-not-generated'");
  std::string expected;
  for (int id : json["ids"].get<std::vector<int>>()) {
    if (!expected.empty()) expected += ' ';
    expected += std::to_string(id);
  }
  for (const std::string extra : {"", " --stop 'qqqq-not-generated'"}) {
    auto result = test::run_command(common + extra + " 2>/dev/null");
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_EQ(result.out, expected + "\n") << extra;
  }
}

TEST_F(TextModel, ExactlyOnePromptSource) {
  auto result = test::run_command(std::string(QWENRT_BINARY) + " generate --device cpu -m " +
                                  test::shell_quote(dir_->path().string()) + " -p hi --chat hi 2>&1");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.out.find("exactly one"), std::string::npos) << result.out;
}

}  // namespace
}  // namespace qwenrt
