// `qwenrt tokenize` end to end: the executable run on the Qwen tokenizer.
#include "tokenizer_test_util.h"

namespace qwenrt {
namespace {

using test::CommandResult;
using test::run_command;
using test::shell_quote;

CommandResult tokenize(const std::string& args) {
  return run_command(std::string(QWENRT_BINARY) + " tokenize " + args + " 2>/dev/null");
}

std::string model_arg() {
  return "-m " + shell_quote(test::qwen_tokenizer_dir().string());
}

TEST(CliTokenize, EncodesText) {
  const CommandResult result = tokenize(model_arg() + " 'Hello world'");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out, "[9707,1879]\n");
  const CommandResult by_file = tokenize(
      "--tokenizer " + shell_quote((test::qwen_tokenizer_dir() / "tokenizer.json").string()) +
      " 'Hello world'");
  EXPECT_EQ(by_file.out, "[9707,1879]\n");
}

TEST(CliTokenize, TextStartingWithDashAndEmptyText) {
  const CommandResult dash = tokenize(model_arg() + " -- '-x'");
  EXPECT_EQ(dash.exit_code, 0);
  EXPECT_EQ(dash.out, nlohmann::json(test::qwen_tokenizer().encode("-x")).dump() + "\n");
  const CommandResult empty = tokenize(model_arg() + " ''");
  EXPECT_EQ(empty.exit_code, 0);
  EXPECT_EQ(empty.out, "[]\n");
}

TEST(CliTokenize, SpecialTokensAndNoSpecial) {
  const CommandResult special = tokenize(model_arg() + " '<|im_start|>user'");
  EXPECT_EQ(special.exit_code, 0);
  EXPECT_EQ(special.out, "[151644,872]\n");
  const CommandResult plain = tokenize(model_arg() + " --no-special '<|im_start|>user'");
  EXPECT_EQ(plain.exit_code, 0);
  const auto ids = nlohmann::json::parse(plain.out).get<std::vector<int32_t>>();
  EXPECT_EQ(ids, test::qwen_tokenizer().encode("<|im_start|>user", false));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151644), 0);
}

TEST(CliTokenize, Jsonl) {
  const auto path = std::filesystem::path(testing::TempDir()) /
                    ("qwenrt_cli_tok_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path)
      << "{\"text\": \"Hello world\"}\n\n{\"text\": \"<|im_end|>\\n\\u4f60\\u597d\"}\n";
  const CommandResult result = tokenize(model_arg() + " --jsonl " + shell_quote(path.string()));
  EXPECT_EQ(result.exit_code, 0);
  const std::string second =
      nlohmann::json(test::qwen_tokenizer().encode("<|im_end|>\n\xE4\xBD\xA0\xE5\xA5\xBD")).dump();
  EXPECT_EQ(result.out, "[9707,1879]\n" + second + "\n");
  const CommandResult stdin_result =
      run_command("printf '{\"text\": \"Hello world\"}\\n' | " + std::string(QWENRT_BINARY) +
                  " tokenize " + model_arg() + " --jsonl -");
  EXPECT_EQ(stdin_result.out, "[9707,1879]\n");
  std::ofstream(path) << "{\"text\": \"ok\"}\nnot json\n";
  EXPECT_EQ(tokenize(model_arg() + " --jsonl " + shell_quote(path.string())).exit_code, 2);
}

TEST(CliTokenize, Decode) {
  CommandResult result = tokenize(model_arg() + " --decode '9707 1879'");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out, "Hello world\n");
  result = tokenize(model_arg() + " --decode '[151644, 9707, 151645, 151667]'");
  EXPECT_EQ(result.out, "<|im_start|>Hello<|im_end|><think>\n");
  result = tokenize(model_arg() + " --skip-special --decode '151644,9707,151645,151667'");
  EXPECT_EQ(result.out, "Hello<think>\n");
}

TEST(CliTokenize, Bench) {
  const auto path = std::filesystem::path(testing::TempDir()) /
                    ("qwenrt_cli_bench_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << "Hello world. 你好，世界。\n";
  const CommandResult result =
      tokenize(model_arg() + " --passes 2 --bench " + shell_quote(path.string()));
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("MB/s"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("tokens/s"), std::string::npos) << result.out;
}

TEST(CliTokenize, BadArguments) {
  EXPECT_EQ(tokenize("'no model given'").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg()).exit_code, 2);  // nothing to do
  EXPECT_EQ(tokenize(model_arg() + " text --jsonl x.jsonl").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg() + " --tokenizer t.json text").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg() + " --frobnicate text").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg() + " --decode 'a b'").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg() + " --bench x --passes 0").exit_code, 2);
  // An empty value is a value: no ids decode to an empty line; a file needs a name.
  const CommandResult no_ids = tokenize(model_arg() + " --decode ''");
  EXPECT_EQ(no_ids.exit_code, 0);
  EXPECT_EQ(no_ids.out, "\n");
  EXPECT_EQ(tokenize(model_arg() + " --jsonl ''").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg() + " --bench ''").exit_code, 2);
  // Options that would do nothing with the input given.
  EXPECT_EQ(tokenize(model_arg() + " --skip-special text").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg() + " --passes 3 text").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg() + " --no-special --decode '1 2'").exit_code, 2);
  EXPECT_EQ(tokenize(model_arg() + " \"$(printf 'a\\377')\"").exit_code, 2);  // invalid UTF-8
  EXPECT_EQ(tokenize("-m /nonexistent/model text").exit_code, 2);  // as generate: a path that is not there is a bad argument
}

TEST(CliTokenize, HelpExplainsOptions) {
  const CommandResult result = tokenize("--help");
  EXPECT_EQ(result.exit_code, 0);
  for (const char* option : {"--model", "--tokenizer", "--no-special", "--jsonl", "--decode",
                             "--bench", "--skip-special", "--passes"}) {
    EXPECT_NE(result.out.find(option), std::string::npos) << option;
  }
}

}  // namespace
}  // namespace qwenrt
