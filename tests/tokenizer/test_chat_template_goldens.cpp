// Chat-template output against goldens rendered by transformers' apply_chat_template
// (scripts/gen_template_goldens.py): every rendered prompt must be byte-identical, and where
// transformers/jinja2 raised, qwenrt must raise a qwenrt::Error too.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Json read_json(const std::filesystem::path& path) { return Json::parse(read_text(path)); }

const std::filesystem::path kData = QWENRT_TEST_DATA;

qwenrt::SpecialTokens qwen_special_tokens() {
  qwenrt::SpecialTokens tokens;
  tokens.eos_token = "<|im_end|>";
  tokens.pad_token = "<|endoftext|>";
  return tokens;
}

std::string show(const std::string& s) {
  // Makes whitespace differences visible in failure messages.
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Renders one golden case; returns an empty string when it matches, else a description.
std::string check_case(const qwenrt::ChatTemplate& tmpl, const Json& messages, const Json& tools, bool add_gen,
                       const Json& vars, const Json& golden) {
  std::string actual;
  try {
    actual = tmpl.render(messages, tools, add_gen, vars);
  } catch (const qwenrt::Error& e) {
    if (golden.contains("error")) return "";
    return std::string("threw: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("threw a non-qwenrt exception: ") + e.what();
  }
  if (golden.contains("error")) {
    return "rendered " + show(actual) + " but transformers raised " + golden["error"].get<std::string>();
  }
  const std::string expected = golden["expected"].get<std::string>();
  if (actual == expected) return "";
  return "\n  expected " + show(expected) + "\n  actual   " + show(actual);
}

class ChatTemplateGoldens : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"qwen3", "qwen2.5-instruct"}) {
      templates_.emplace(name, qwenrt::ChatTemplate(read_text(kData / "templates" / (std::string(name) + ".jinja")),
                                                    qwen_special_tokens()));
    }
  }
  std::map<std::string, qwenrt::ChatTemplate> templates_;
};

TEST_F(ChatTemplateGoldens, QwenConversationsMatchTransformers) {
  const Json goldens = read_json(kData / "chat_template" / "goldens.json");
  const Json cases = read_json(kData / "chat_template" / "conversations.json");
  std::map<std::string, const Json*> by_name;
  for (const auto& c : cases) by_name[c["name"].get<std::string>()] = &c;
  int checked = 0;
  for (const auto& golden : goldens["conversations"]) {
    const std::string name = golden["name"].get<std::string>();
    const std::string tmpl = golden["template"].get<std::string>();
    ASSERT_TRUE(by_name.count(name)) << "golden for unknown conversation " << name;
    const Json& c = *by_name[name];
    const std::string problem = check_case(templates_.at(tmpl), c["messages"], c["tools"],
                                           c["add_generation_prompt"].get<bool>(), c["vars"], golden);
    EXPECT_EQ(problem, "") << tmpl << " / " << name;
    ++checked;
  }
  EXPECT_GE(checked, 50);
}

TEST_F(ChatTemplateGoldens, RandomConversationsMatchTransformers) {
  const auto path = kData / "chat_template" / "random_goldens.json";
  const Json goldens = read_json(path);
  int checked = 0;
  for (const auto& golden : goldens["conversations"]) {
    const std::string problem =
        check_case(templates_.at(golden["template"].get<std::string>()), golden["messages"], golden["tools"],
                   golden["add_generation_prompt"].get<bool>(), golden["vars"], golden);
    EXPECT_EQ(problem, "") << golden["template"].get<std::string>() << " / " << golden["name"].get<std::string>()
                           << "\n  messages " << golden["messages"].dump();
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

TEST(ChatTemplateSnippets, JinjaSemanticsMatchTransformers) {
  const Json goldens = read_json(kData / "chat_template" / "goldens.json");
  const Json snippets = read_json(kData / "chat_template" / "snippets.json");
  std::map<std::string, const Json*> by_name;
  for (const auto& s : snippets) by_name[s["name"].get<std::string>()] = &s;
  const Json dummy = Json::parse(R"([{"role": "user", "content": "unused"}])");
  int checked = 0;
  for (const auto& golden : goldens["snippets"]) {
    const std::string name = golden["name"].get<std::string>();
    ASSERT_TRUE(by_name.count(name)) << "golden for unknown snippet " << name;
    const Json& s = *by_name[name];
    std::string problem;
    try {
      const qwenrt::ChatTemplate tmpl(s["template"].get<std::string>(), qwen_special_tokens());
      problem = check_case(tmpl, dummy, Json(), false, s["vars"], golden);
    } catch (const qwenrt::Error& e) {
      // Rejected when parsed: right only where jinja2 failed too.
      if (!golden.contains("error")) problem = std::string("rejected: ") + e.what();
    }
    EXPECT_EQ(problem, "") << "snippet " << name << ": " << s["template"].get<std::string>();
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

}  // namespace
