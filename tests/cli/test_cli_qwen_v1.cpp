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
