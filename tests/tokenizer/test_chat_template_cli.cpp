// `qwenrt template` end to end: the printed prompt is the golden byte for byte (no newline
// added), --var values are typed as JSON when they parse, and bad input exits non-zero
// with a message instead of crashing.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kData = QWENRT_TEST_DATA;

struct Result {
  int exit_code = -1;
  std::string out;
};

Result run(const std::string& args) {
  const std::string command = std::string(QWENRT_BINARY) + " " + args + " 2>/dev/null";
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class TemplateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qwenrt_template_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // A tokenizer_config.json like Qwen3's: the committed template plus its special tokens.
    const Json config = {{"chat_template", read_text(kData / "templates" / "qwen3.jinja")},
                         {"bos_token", nullptr},
                         {"eos_token", "<|im_end|>"},
                         {"pad_token", "<|endoftext|>"}};
    std::ofstream(dir_ / "tokenizer_config.json") << config.dump();
    cases_ = Json::parse(read_text(kData / "chat_template" / "conversations.json"));
    goldens_ = Json::parse(read_text(kData / "chat_template" / "goldens.json"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  const Json& conversation(const std::string& name) const {
    for (const auto& c : cases_) {
      if (c["name"] == name) return c;
    }
    throw std::runtime_error("no conversation " + name);
  }
  std::string golden(const std::string& name) const {
    for (const auto& g : goldens_["conversations"]) {
      if (g["name"] == name && g["template"] == "qwen3") return g["expected"].get<std::string>();
    }
    throw std::runtime_error("no golden " + name);
  }
  fs::path write(const std::string& name, const Json& j) const {
    const fs::path p = dir_ / name;
    std::ofstream(p) << j.dump();
    return p;
  }

  fs::path dir_;
  Json cases_;
  Json goldens_;
};

TEST_F(TemplateCli, PrintsTheGoldenExactly) {
  const Json& c = conversation("tool_call_with_content_two_calls");
  const fs::path messages = write("messages.json", c["messages"]);
  const fs::path tools = write("tools.json", c["tools"]);
  const Result r = run("template -m " + dir_.string() + " --messages " + messages.string() + " --tools " +
                       tools.string() + " --add-generation-prompt");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, golden("tool_call_with_content_two_calls"));
}

TEST_F(TemplateCli, VarsAreTypedAndConversationObjectsAccepted) {
  const Json& c = conversation("thinking_disabled");
  const fs::path conv = write("conv.json", Json{{"messages", c["messages"]}});
  const std::string base = "template --tokenizer-config " + (dir_ / "tokenizer_config.json").string() +
                           " --messages " + conv.string() + " --add-generation-prompt";
  const Result off = run(base + " --var enable_thinking=false");
  EXPECT_EQ(off.exit_code, 0);
  EXPECT_EQ(off.out, golden("thinking_disabled"));
  // "False" is not JSON, so it stays a string: the template's `is false` test does not fire.
  const Result as_string = run(base + " --var enable_thinking=False");
  EXPECT_EQ(as_string.exit_code, 0);
  EXPECT_EQ(as_string.out.find("<think>"), std::string::npos);
}

TEST_F(TemplateCli, BadInputExitsWithAnError) {
  const fs::path messages = write("m.json", Json::array({{{"role", "user"}, {"content", "x"}}}));
  EXPECT_NE(run("template -m " + dir_.string() + " --messages " + (dir_ / "missing.json").string()).exit_code, 0);
  EXPECT_NE(run("template --messages " + messages.string()).exit_code, 0);  // no model or config
  EXPECT_NE(run("template -m " + dir_.string() + " --messages " + messages.string() + " --var novalue").exit_code, 0);
  std::ofstream(dir_ / "broken.json") << "[{";
  EXPECT_NE(run("template -m " + dir_.string() + " --messages " + (dir_ / "broken.json").string()).exit_code, 0);
  const fs::path bad_template = dir_ / "bad";
  fs::create_directories(bad_template);
  std::ofstream(bad_template / "tokenizer_config.json") << R"({"chat_template": "{% if %}"})";
  EXPECT_NE(run("template -m " + bad_template.string() + " --messages " + messages.string()).exit_code, 0);
  // Tools from the conversation file and from --tools: which to take is not guessed.
  const fs::path conv = write("conv.json", Json{{"messages", Json::array({{{"role", "user"}, {"content", "x"}}})},
                                                {"tools", Json::array()}});
  const fs::path tools = write("tools.json", Json::array());
  const Result both = run("template -m " + dir_.string() + " --messages " + conv.string() + " --tools " + tools.string());
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_TRUE(both.out.empty()) << both.out;
}

// --chat-template from a pipe (a shell's `<(...)`) is read as a file is.
TEST_F(TemplateCli, ChatTemplateFromAPipe) {
  const fs::path messages = write("m.json", Json::array({{{"role", "user"}, {"content", "hi"}}}));
  const fs::path fifo = dir_ / "template.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The writer gives up after 10 s without a reader (a command that refuses the pipe unread
  // fails the test instead of hanging it).
  std::thread writer([&] {
    const std::string text = "{{ messages[0].content }}!";
    for (int tries = 0; tries < 1000; ++tries) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) {
        EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
        ::close(fd);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "nobody opened the pipe";
  });
  const Result r = run("template -m " + dir_.string() + " --chat-template " + fifo.string() + " --messages " +
                       messages.string());
  writer.join();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "hi!");
  // A device is no template file.
  EXPECT_EQ(run("template -m " + dir_.string() + " --chat-template /dev/null --messages " + messages.string()).exit_code, 1);
}

TEST_F(TemplateCli, HelpExplainsTheOptions) {
  const Result r = run("template --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* option : {"--model", "--tokenizer-config", "--messages", "--tools", "--add-generation-prompt",
                             "--var", "--ids"}) {
    EXPECT_NE(r.out.find(option), std::string::npos) << option;
  }
}

}  // namespace
