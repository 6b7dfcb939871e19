// The command line on the original Qwen's folders: token ids without qwen.tiktoken, the
// missing tokenizer reported when text is needed, ChatML from `template`, doctor, and the
// qwen-7b synthetic preset.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../tokenizer/tokenizer_test_util.h"
#include "../unit/test_util.h"

namespace qwenrt {
namespace {

namespace fs = std::filesystem;

std::string v1(const std::string& name) {
  return (fs::path(QWENRT_TEST_DATA) / "qwen1" / name).string();
}

test::CommandResult qwenrt(const std::string& args) {
  return test::run_command(test::shell_quote(QWENRT_BINARY) + " " + args + " 2>&1 </dev/null");
}

TEST(CliQwenV1, GenerateIdsWithoutTokenizerMatchesTheOriginalCode) {
  std::ifstream in(fs::path(v1("qwen1-a")) / "golden.json");
  const auto golden = nlohmann::json::parse(in);
  const auto& item = golden["greedy"][1];  // the 120-token prompt: NTK and logn active
  std::string ids;
  for (int id : item["prompt"]) {
    if (!ids.empty()) ids += ' ';
    ids += std::to_string(id);
  }
  const auto result =
      qwenrt("generate -m " + test::shell_quote(v1("qwen1-a")) + " --device cpu --ids '" + ids +
             "' -n 24 --temperature 0 --format json");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const auto out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["ids"], item["greedy"]);
}

TEST(CliQwenV1, TextWithoutQwenTiktokenNamesTheFile) {
  const auto result =
      qwenrt("generate -m " + test::shell_quote(v1("qwen1-a")) + " --device cpu --chat hi -n 2");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.out.find((fs::path(v1("qwen1-a")) / "qwen.tiktoken").string()),
            std::string::npos)
      << result.out;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 1) << result.out;
}

TEST(CliQwenV1, TemplateShowsChatMl) {
  test::TempDir dir;
  std::ofstream(dir.path() / "m.json") << R"([{"role":"user","content":"Hi"}])";
  const std::string messages = test::shell_quote((dir.path() / "m.json").string());
  const auto text = qwenrt("template -m " + test::shell_quote(v1("tokenizer")) + " --messages " +
                           messages + " --add-generation-prompt");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_EQ(
      text.out,
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\n");
  // The ids the original's make_context builds for this turn (tokens of qwen.tiktoken).
  const auto ids = qwenrt("template -m " + test::shell_quote(v1("tokenizer")) + " --messages " +
                          messages + " --add-generation-prompt --ids");
  EXPECT_EQ(
      ids.out,
      "151644 8948 198 2610 525 264 10950 17847 13 151645 198 151644 872 198 13048 151645 198 "
      "151644 77091 198\n");
}

// A v1 folder with Qwen's real vocabulary and weights made so that greedy decoding always
// picks `favourite`: the layers are zero (the residual stream is the embedding, the same
// positive row for every token) and lm_head has one non-zero row.
void write_v1_folder(const fs::path& dir, int favourite, const std::string& chat_format) {
  std::ifstream in(fs::path(v1("qwen1-a")) / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["num_hidden_layers"] = 1;
  config["vocab_size"] = 151936;
  const int64_t vocab = 151936, hidden = 64, ff = 128;
  auto bf16 = [](int64_t count, bool ones) {
    std::string bytes(static_cast<size_t>(count) * 2, '\0');
    for (int64_t i = 0; ones && i < count; ++i) bytes[2 * i + 1] = '\x3f', bytes[2 * i] = '\x80';
    return bytes;
  };
  std::string head = bf16(vocab * hidden, false);
  head.replace(static_cast<size_t>(favourite) * hidden * 2, hidden * 2, bf16(hidden, true));
  std::vector<test::TensorSpec> tensors = {
      {"transformer.wte.weight", "BF16", {vocab, hidden}, bf16(vocab * hidden, true)},
      {"transformer.h.0.ln_1.weight", "BF16", {hidden}, bf16(hidden, true)},
      {"transformer.h.0.attn.c_attn.weight",
       "BF16",
       {3 * hidden, hidden},
       bf16(3 * hidden * hidden, false)},
      {"transformer.h.0.attn.c_attn.bias", "BF16", {3 * hidden}, bf16(3 * hidden, false)},
      {"transformer.h.0.attn.c_proj.weight",
       "BF16",
       {hidden, hidden},
       bf16(hidden * hidden, false)},
      {"transformer.h.0.ln_2.weight", "BF16", {hidden}, bf16(hidden, true)},
      {"transformer.h.0.mlp.w1.weight", "BF16", {ff, hidden}, bf16(ff * hidden, false)},
      {"transformer.h.0.mlp.w2.weight", "BF16", {ff, hidden}, bf16(ff * hidden, false)},
      {"transformer.h.0.mlp.c_proj.weight", "BF16", {hidden, ff}, bf16(hidden * ff, false)},
      {"transformer.ln_f.weight", "BF16", {hidden}, bf16(hidden, true)},
      {"lm_head.weight", "BF16", {vocab, hidden}, head},
  };
  test::write_model(dir, config, tensors);
  test::write_file(dir / "generation_config.json",
                   nlohmann::json{{"chat_format", chat_format}}.dump());
  fs::copy_file(fs::path(v1("tokenizer")) / "qwen.tiktoken", dir / "qwen.tiktoken");
  fs::copy_file(fs::path(v1("tokenizer")) / "tokenizer_config.json", dir / "tokenizer_config.json");
}

TEST(CliQwenV1, ChatStopsWhereTheOriginalStops) {
  for (int stop : {151645, 151644, 151643}) {  // <|im_end|>, <|im_start|>, <|endoftext|>
    test::TempDir dir;
    write_v1_folder(dir.path(), stop, "chatml");
    const auto json_out = qwenrt("generate -m " + test::shell_quote(dir.path().string()) +
                                 " --device cpu --chat Hi -n 8 --temperature 0 --format json");
    ASSERT_EQ(json_out.exit_code, 0) << json_out.out;
    const auto out = nlohmann::json::parse(json_out.out);
    EXPECT_EQ(out["ids"], nlohmann::json::array({stop}));
    EXPECT_EQ(out["finish_reason"], "stop");
    EXPECT_EQ(out["prompt_tokens"], 20);  // the ChatML turn of TemplateShowsChatMl
    EXPECT_EQ(json_out.out.find("base model"), std::string::npos) << json_out.out;
  }
  // A token that is no stop runs to -n; a base model gets the note.
  test::TempDir dir;
  write_v1_folder(dir.path(), 9707, "raw");
  const auto result = qwenrt("generate -m " + test::shell_quote(dir.path().string()) +
                             " --device cpu --chat Hi -n 5 --temperature 0 --format json");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_NE(result.out.find("note: this is a base model"), std::string::npos) << result.out;
  const auto json_line = result.out.substr(result.out.find('{'));
  const auto out = nlohmann::json::parse(json_line);
  EXPECT_EQ(out["ids"], nlohmann::json::array({9707, 9707, 9707, 9707, 9707}));
  EXPECT_EQ(out["finish_reason"], "length");
  // The chat command says the same and answers.
  const auto chat = test::run_command("printf 'Hi\\n' | " + test::shell_quote(QWENRT_BINARY) +
                                      " chat -m " + test::shell_quote(dir.path().string()) +
                                      " --device cpu -n 3 --temperature 0 2>&1");
  EXPECT_EQ(chat.exit_code, 0) << chat.out;
  EXPECT_NE(chat.out.find("note: this is a base model"), std::string::npos) << chat.out;
  EXPECT_NE(chat.out.find("HelloHelloHello"), std::string::npos) << chat.out;
}

TEST(CliQwenV1, DoctorAndSyntheticPreset) {
  const auto doctor = qwenrt("doctor -m " + test::shell_quote(v1("qwen1-a")));
  EXPECT_EQ(doctor.exit_code, 0) << doctor.out;
  EXPECT_NE(doctor.out.find("QWenLMHeadModel, 2 layers, hidden 64, heads 4/4, head_dim 16"),
            std::string::npos)
      << doctor.out;
  const auto unknown = qwenrt("bench --synthetic no-such-model");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.out.find("qwen-7b"), std::string::npos) << unknown.out;
}

}  // namespace
}  // namespace qwenrt
