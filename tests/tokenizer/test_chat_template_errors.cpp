// Chat-template failure modes: malformed templates, misuse of undefined values, unsupported
// constructs and hostile input must end in a qwenrt::Error that names the line (and column
// where the template is at fault), never a crash or unbounded recursion.
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/chat_template/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;
using qwenrt::ChatTemplate;
using qwenrt::Error;
using qwenrt::ErrorCategory;

const std::filesystem::path kData = QWENRT_TEST_DATA;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Json user(const std::string& text) { return Json::array({{{"role", "user"}, {"content", text}}}); }

std::string render(const std::string& source, const Json& vars = Json::object()) {
  return ChatTemplate(source).render(user("hi"), Json(), false, vars);
}

// The error raised by `fn`, or a failed expectation when none is.
template <typename Fn>
Error error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a qwenrt::Error";
  return Error(ErrorCategory::kInternal, "");
}

TEST(ChatTemplateErrors, SyntaxErrorNamesLineAndColumn) {
  const Error e = error_of([] { ChatTemplate("line one\nline two {% if %}x{% endif %}"); });
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidModel);
  EXPECT_NE(std::string(e.what()).find("line 2, column 16"), std::string::npos) << e.what();
}

TEST(ChatTemplateErrors, UnclosedConstructsAreSyntaxErrors) {
  for (const char* source : {"{% if x %}never closed", "{% for x in y %}", "{{ x ", "{# comment", "{% raw %}x",
                             "{{ 'unterminated }}", "{{ (1, 2 }}", "{{ [1, 2) }}", "{% endif %}", "{{ 1 + }}",
                             "{% set %}", "{% macro m( %}{% endmacro %}", "{{ x | }}", "{{ x is }}"}) {
    const Error e = error_of([&] { ChatTemplate{source}; });
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidModel) << source << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << source << ": " << e.what();
  }
}

TEST(ChatTemplateErrors, UnsupportedConstructsAreNamed) {
  struct Case {
    const char* source;
    const char* construct;
  };
  for (const Case& c : {Case{"\n{% include 'x.jinja' %}", "'include'"}, Case{"{% extends 'base' %}", "'extends'"},
                        Case{"{% import 'macros.jinja' as m %}", "'import'"},
                        Case{"{% for x in y recursive %}{% endfor %}", "recursive"},
                        Case{"{{ x|wordwrap }}", "filter 'wordwrap'"}, Case{"{{ x is frobnicated }}", "test 'frobnicated'"},
                        Case{"{{ f(*args) }}", "*args"}}) {
    const Error e = error_of([&] { ChatTemplate{c.source}; });
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported) << c.source << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.construct), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line "), std::string::npos) << e.what();
  }
  const Error include_line = error_of([] { ChatTemplate("\n{% include 'x.jinja' %}"); });
  EXPECT_NE(std::string(include_line.what()).find("line 2"), std::string::npos) << include_line.what();
}

// jinja2 resolves filter and test names at compile time except in an `if` (conditions and
// branches) or a conditional expression: there an unknown name is an error only when it is
// evaluated, so a template whose unsupported filter sits in a branch it never takes renders.
// A loop body, macro or block inside the `if` is checked again. Expected outcomes from
// jinja2 3.1.6 in transformers' environment.
TEST(ChatTemplateErrors, UnknownFiltersInBranchesFailOnlyWhenTaken) {
  EXPECT_EQ(render("{% if nope %}{{ x|wordwrap }}{% elif nope %}{{ x is frobnicated }}{% endif %}ok"), "ok");
  EXPECT_EQ(render("{{ (x|wordwrap) if false else 1 }}"), "1");
  EXPECT_EQ(render("{% if nope %}{% set y = x|wordwrap %}{% for m in x|wordwrap %}{% endfor %}{% endif %}ok"), "ok");
  EXPECT_EQ(render("{% macro m() %}{% if nope %}{{ x|wordwrap }}{% endif %}{% endmacro %}{{ m() }}ok"), "ok");
  EXPECT_EQ(render("{% macro m(a) %}{{ caller() }}{% endmacro %}{% if nope %}{% call m(1|wordwrap) %}x{% endcall %}{% endif %}ok"),
            "ok");
  for (const char* taken : {"{% if true %}{{ 'a'|wordwrap }}{% endif %}", "{% if 'a'|wordwrap %}{% endif %}",
                            "{{ 1 if true else 2 is frobnicated }}{{ 1 if 2 is frobnicated else 3 }}"}) {
    const Error e = error_of([&] { render(taken); });
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported) << taken << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("is not supported"), std::string::npos) << taken << ": " << e.what();
  }
  for (const char* refused : {"{% if nope %}{% for m in [1] %}{{ m|wordwrap }}{% endfor %}{% endif %}",
                              "{% if nope %}{% macro m() %}{{ 1|wordwrap }}{% endmacro %}{% endif %}",
                              "{% if nope %}{% set y %}{{ 1|wordwrap }}{% endset %}{% endif %}",
                              "{% if nope %}{% filter wordwrap %}x{% endfilter %}{% endif %}",
                              "{% for m in [1] if m|wordwrap %}{% endfor %}"}) {
    const Error e = error_of([&] { ChatTemplate{refused}; });
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported) << refused << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("filter 'wordwrap'"), std::string::npos) << refused << ": " << e.what();
  }
}

TEST(ChatTemplateErrors, UndefinedMisuseNamesLine) {
  const Error e = error_of([] { render("ok\n\n{{ messages[0].nope.startswith('a') }}"); });
  EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  // Printing, testing and iterating an undefined value is fine, as in jinja2.
  EXPECT_EQ(render("[{{ nope }}]{{ nope is defined }}{% for x in nope %}x{% endfor %}{{ nope|length }}"), "[]False0");
}

TEST(ChatTemplateText, CaseMappingsAsPythonMakesThem) {
  // Expected: jinja2 3.1's ImmutableSandboxedEnvironment on Python 3.11 (transformers' way of
  // rendering), which maps case with Python's full mappings (ß upper "SS") and a final sigma.
  const std::string source =
      "{{ 'ßtraße ﬁ ŉ ǰ ᾳ'.upper() }}|{{ 'ΟΔΟΣ ΟΔΟΣ. Σ ΑΣ\\'Α İz'.lower() }}|{{ 'ﬁsh ßa ᾳb'.title() }}|"
      "{{ 'ﬂow ΑΣ'.capitalize() }}|{{ 'ßx'|upper }}|{{ 'ΣΑΣ'|lower }}|{{ 'ﬁ ᾳ'|capitalize }}";
  EXPECT_EQ(render(source),
            "SSTRASSE FI \u02bcN J\u030c \u0391\u0399|\u03bf\u03b4\u03bf\u03c2 \u03bf\u03b4\u03bf\u03c2. \u03c3 "
            "\u03b1\u03c3'\u03b1 i\u0307z|Fish Ssa \u1fbcb|Flow \u03b1\u03c2|SSX|\u03c3\u03b1\u03c2|Fi \u1fb3");
}

TEST(ChatTemplateText, LinesSplitsAndClassesAsPythonHasThem) {
  // Expected: jinja2 3.1.6's ImmutableSandboxedEnvironment on Python 3.11 (Unicode 14):
  // splitlines' boundaries (\r, \x0b, \x85, U+2028 ...) and keepends, indent over them,
  // split/rsplit's remainder with its whitespace, startswith/endswith's start and end in code
  // points, the numeric classes (² is a digit, not a decimal; 三 is numeric), letters by
  // category (。 is none), wordcount as \w+, and `is lower` on str(value).
  const std::string source =
      R"({{ 'a\r\nb\rc\x0bd\u2028e\n'.splitlines() }}|{{ 'a\r\nb\x85c'.splitlines(true) }}|{{ 'x\r\ny'|indent(2) }}|)"
      R"({{ 'a b  '.split(none, 1) }}|{{ '  a b'.rsplit(none, 1) }}|{{ 'abc'.startswith('b', 1) }}{{ 'abc'.endswith('b', 0, 2) }})"
      R"({{ 'abc'.startswith('', 4) }}{{ 'xéc'.startswith('éc', -2) }}{{ 'abc'.startswith('', 2, 1) }}|)"
      R"({{ '²'.isdigit() }}{{ '²'.isdecimal() }}{{ '三'.isnumeric() }}{{ '½'.isdigit() }}{{ '。'.isalpha() }}{{ 'ǅʰ'.isalpha() }})"
      R"({{ '①a'.isalnum() }}|{{ 'a。b 😀 x_1'|wordcount }}|{{ 5 is lower }}{{ ['a'] is lower }})";
  EXPECT_EQ(render(source),
            "['a', 'b', 'c', 'd', 'e']|['a\\r\\n', 'b\\x85', 'c']|x\n  y|['a', 'b  ']|['  a', 'b']|TrueTrueFalseTrueFalse|"
            "TrueFalseTrueFalseFalseTrueTrue|3|FalseTrue");
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheMessage) {
  const Error e = error_of([] { render("{{ raise_exception('Conversation roles must alternate') }}"); });
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos) << e.what();
}

TEST(ChatTemplateErrors, SandboxRefusesMutation) {
  const Error e = error_of([] { render("{% set l = [] %}{{ l.append(1) }}"); });
  EXPECT_NE(std::string(e.what()).find("unsafe"), std::string::npos) << e.what();
}

TEST(ChatTemplateErrors, DeepNestingIsRefusedNotACrash) {
  const int depth = 20000;
  for (const auto& [open, close] : {std::pair<std::string, std::string>{"(", ")"}, {"[", "]"}, {"{'a': ", "}"}}) {
    std::string source = "{{ ";
    for (int i = 0; i < depth; ++i) source += open;
    source += "1";
    for (int i = 0; i < depth; ++i) source += close;
    source += " }}";
    EXPECT_THROW(ChatTemplate{source}, Error) << open;
  }
  std::string nots = "{{ ";
  for (int i = 0; i < depth; ++i) nots += "not ";
  EXPECT_THROW(ChatTemplate{nots + "1 }}"}, Error);
  std::string minus = "{{ ";
  for (int i = 0; i < depth; ++i) minus += "-";
  EXPECT_THROW(ChatTemplate{minus + "1 }}"}, Error);
  std::string ifs;
  for (int i = 0; i < depth; ++i) ifs += "{% if 1 %}";
  for (int i = 0; i < depth; ++i) ifs += "{% endif %}";
  EXPECT_THROW(ChatTemplate{ifs}, Error);
  // Operator chains nest leftwards; jinja2 itself fails past ~200 (Python's parenthesis
  // limit in the code it generates). A long chain is refused, a moderate one renders.
  std::string chain = "{{ 0";
  for (int i = 0; i < 150; ++i) chain += " + 1";
  EXPECT_EQ(render(chain + " }}"), "150");
  for (int i = 0; i < 20000; ++i) chain += " + 1";
  EXPECT_THROW(render(chain + " }}"), Error);
  // Long flat text and many statements are fine.
  std::string flat;
  for (int i = 0; i < 20000; ++i) flat += "{{ 'ab' }}{% if 1 %}c{% endif %}\n";
  EXPECT_EQ(render(flat).size(), 20000u * 3);  // trim_blocks eats each newline
}

TEST(ChatTemplateErrors, RunawayRecursionAndSizeAreBounded) {
  EXPECT_THROW(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), Error);
  EXPECT_THROW(render("{{ range(1000000)|length }}"), Error);
  EXPECT_THROW(render("{{ 'x' * 1000000000000 }}"), Error);
  EXPECT_THROW(render("{{ 9223372036854775807 + 1 }}"), Error);
}

TEST(ChatTemplateErrors, DeepValuesAreRefusedNotACrash) {
  // Values growing one level per loop iteration, a namespace that contains itself, and
  // deeply nested input JSON.
  EXPECT_THROW(render("{% set ns = namespace(x=none) %}{% for i in range(50000) %}{% set ns.x = [ns.x] %}"
                      "{% endfor %}{{ ns.x }}"),
               Error);
  EXPECT_THROW(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}"), Error);
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "[";
  for (int i = 0; i < 100000; ++i) deep += "]";
  const Json messages = Json::array({{{"role", "user"}, {"content", Json::parse(deep)}}});
  EXPECT_THROW(ChatTemplate("{{ messages }}").render(messages, Json(), false), Error);
}

TEST(ChatTemplateErrors, InvalidUtf8TemplateIsRejected) {
  EXPECT_THROW(ChatTemplate("{{ 'a' }}\xff\xfe"), Error);
}

TEST(ChatTemplateErrors, BadRenderArguments) {
  const ChatTemplate tmpl("{{ messages|length }}");
  EXPECT_THROW(tmpl.render(Json::object(), Json(), false), Error);
  EXPECT_THROW(tmpl.render(user("x"), Json::object(), false), Error);
  EXPECT_THROW(tmpl.render(user("x"), Json(), false, Json::array()), Error);
  const Error e = error_of([&] { tmpl.render(user("x"), Json(), false, Json{{"messages", 1}}); });
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
}

// Random corruptions of the real Qwen3 template: each must parse and render, or fail with a
// qwenrt::Error. A crash, hang or other exception fails the test.
TEST(ChatTemplateErrors, MutatedTemplatesNeverCrash) {
  const std::string original = read_text(kData / "templates" / "qwen3.jinja");
  const Json messages = Json::parse(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
      {"role": "assistant", "content": "<think>r</think>a", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
      {"role": "tool", "content": "t"}])");
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  const std::string alphabet = "{}%#-+()[]|.,:~'\"\n abcdefinorstx=<>!0123456789";
  std::mt19937 rng(12345);
  int rendered = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string source = original;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % source.size();
      switch (rng() % 3) {
        case 0: source.erase(at, 1 + rng() % 8); break;
        case 1: source.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: source[at] = alphabet[rng() % alphabet.size()];
      }
    }
    try {
      const ChatTemplate tmpl(source);
      tmpl.render(messages, trial % 2 ? tools : Json(), trial % 3 == 0);
      ++rendered;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(rendered, 100);  // many mutations land in text and still render
}

// Constructs no Qwen template uses and the goldens do not cover; expected strings are
// jinja2 3.1.6's output in transformers' environment (trim_blocks, lstrip_blocks).
TEST(ChatTemplateJinja, WithBlockAndLoopChanged) {
  EXPECT_EQ(render("{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}[{{ c }}]"),
            "211[]");
  EXPECT_EQ(render("x\n  {% with v = 'q' %}\n  {{ v }}\n  {% endwith %}\ny"), "x\n  q\ny");
  EXPECT_EQ(render("{% for i in [1, 1, 2, 2, 1] %}{{ loop.changed(i) }},{% endfor %}"), "True,False,True,False,True,");
}

// Integers past 64 bits in the input (JSON's 2^64 and beyond) print, compare equal and go
// through tojson as Python's ints; computing with them is refused, not done wrong.
TEST(ChatTemplateJinja, BigIntegersFromJsonPrintExactly) {
  qwenrt::JsonParseOptions options;
  options.exact_big_integers = true;
  const Json vars = qwenrt::parse_ordered_json(R"({"x": 123456789012345678901234, "y": 18446744073709551615,
                                          "z": {"k": -9223372036854775809}})", "vars", options);
  const auto with = [&](const std::string& source) { return ChatTemplate(source).render(user("hi"), Json(), false, vars); };
  // Expected: jinja2 3.1.6 in transformers' environment, the same values from json.loads.
  EXPECT_EQ(with("{{ x }} {{ y|string }} {{ z|tojson }} {{ [x] }} {{ x is integer }}{{ x is number }} {{ x == x }}"
                 "{{ x == 1 }} {{ {x: 1}[x] }} {{ x ~ '' }} {{ x|int }} {{ x|float }}"),
            "123456789012345678901234 18446744073709551615 {\"k\": -9223372036854775809} [123456789012345678901234] "
            "TrueTrue TrueFalse 1 123456789012345678901234 123456789012345678901234 1.2345678901234569e+23");
  for (const char* refused : {"{{ x + 1 }}", "{{ x < 1 }}", "{{ [y, x]|sort }}", "{{ x|round }}", "{{ 'a'|center(x) }}",
                              "{{ 1.5|round(x) }}", "{{ x is odd }}", "{{ 'abc'.startswith('a', x) }}"}) {
    const Error e = error_of([&] { with(refused); });
    EXPECT_NE(std::string(e.what()).find("past 64 bits"), std::string::npos) << refused << ": " << e.what();
  }
}

// transformers' tojson with ensure_ascii: json.dumps escapes everything outside space..~, DEL too.
TEST(ChatTemplateJinja, TojsonEnsureAsciiEscapesDel) {
  EXPECT_EQ(render(R"({{ '\x7f é'|tojson(ensure_ascii=true) }}|{{ '\x7f'|tojson }})"), "\"\\u007f \\u00e9\"|\"\x7f\"");
}

// A loop's else runs unless some iteration reached the end of the body: also when every one
// ended in break or continue.
TEST(ChatTemplateJinja, LoopElseAfterBreakAndContinue) {
  EXPECT_EQ(render("{% for i in [1, 2] %}{% break %}{% else %}E{% endfor %}"), "E");
  EXPECT_EQ(render("{% for i in [1, 2] %}{% continue %}{% else %}E{% endfor %}"), "E");
  EXPECT_EQ(render("{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}"), "");
  EXPECT_EQ(render("{% for i in [1, 2] %}{% if i == 2 %}{% continue %}{% endif %}{% else %}E{% endfor %}"), "");
  EXPECT_EQ(render("{% for i in [1, 2] if i > 5 %}{% else %}E{% endfor %}"), "E");
}

TEST(ChatTemplateConfig, StringAndNamedTemplatesAndSpecialTokens) {
  const Json config = Json::parse(R"({
    "bos_token": null, "eos_token": {"content": "<|im_end|>", "lstrip": false}, "pad_token": "<|endoftext|>",
    "chat_template": [{"name": "default", "template": "D{{ bos_token is defined }}{{ eos_token }}"},
                      {"name": "tool_use", "template": "T{{ tools|length }}"}]})");
  const ChatTemplate tmpl = ChatTemplate::from_tokenizer_config(config);
  EXPECT_EQ(tmpl.render(user("x"), Json(), false), "DFalse<|im_end|>");
  EXPECT_EQ(tmpl.render(user("x"), Json::array({Json::object()}), false), "T1");
  EXPECT_EQ(tmpl.names(), (std::vector<std::string>{"default", "tool_use"}));

  const ChatTemplate single = ChatTemplate::from_tokenizer_config(Json{{"chat_template", "S{{ tools }}"}});
  EXPECT_EQ(single.render(user("x"), Json::array(), false), "S[]");
  EXPECT_EQ(single.render(user("x"), Json(), false), "SNone");

  EXPECT_THROW(ChatTemplate::from_tokenizer_config(Json{{"eos_token", "x"}}), Error);
  EXPECT_THROW(ChatTemplate::from_tokenizer_config(Json{{"chat_template", 3}}), Error);
  EXPECT_THROW(ChatTemplate::from_tokenizer_config(Json{{"chat_template", Json::array({{{"name", "x"}}})}}), Error);
  const ChatTemplate only_tool_use = ChatTemplate::from_tokenizer_config(
      Json{{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "t"}}})}});
  EXPECT_THROW(only_tool_use.render(user("x"), Json(), false), Error);
}

TEST(ChatTemplateConfig, ModelFolderPrefersChatTemplateJinja) {
  const auto dir = std::filesystem::temp_directory_path() / "qwenrt_chat_template_dir_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "from config", "eos_token": "E"})";
  EXPECT_EQ(ChatTemplate::load(dir).render(user("x"), Json(), false), "from config");
  std::ofstream(dir / "chat_template.jinja") << "from file {{ eos_token }}\n";
  EXPECT_EQ(ChatTemplate::load(dir).render(user("x"), Json(), false), "from file E");
  std::filesystem::remove_all(dir);
  EXPECT_THROW(ChatTemplate::load(dir), Error);
}

// serve tells a folder with no template from one whose template is broken: the first is
// nullopt, the second an error naming the file.
TEST(ChatTemplateConfig, LoadIfPresentTellsNoneFromBroken) {
  const auto dir = std::filesystem::temp_directory_path() / "qwenrt_chat_template_present_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto fresh = [&](const std::string& config, const std::string& jinja) {
    std::filesystem::remove(dir / "tokenizer_config.json");
    std::filesystem::remove(dir / "chat_template.jinja");
    if (!config.empty()) std::ofstream(dir / "tokenizer_config.json") << config;
    if (!jinja.empty()) std::ofstream(dir / "chat_template.jinja") << jinja;
  };
  auto error_of = [&]() {
    try {
      ChatTemplate::load_if_present(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // None: an empty folder, a config without the field, a config whose field is null.
  fresh("", "");
  EXPECT_FALSE(ChatTemplate::load_if_present(dir).has_value());
  EXPECT_THROW(ChatTemplate::load(dir), Error);  // the commands still need one
  fresh(R"({"eos_token": "E"})", "");
  EXPECT_FALSE(ChatTemplate::load_if_present(dir).has_value());
  fresh(R"({"eos_token": "E", "chat_template": null})", "");
  EXPECT_FALSE(ChatTemplate::load_if_present(dir).has_value());
  // Present: from the config, or from the .jinja file (with the config's tokens, or none).
  fresh(R"({"eos_token": "E", "chat_template": "c{{ eos_token }}"})", "");
  auto from_config = ChatTemplate::load_if_present(dir);
  ASSERT_TRUE(from_config.has_value());
  EXPECT_EQ(from_config->render(user("x"), Json(), false), "cE");
  fresh(R"({"eos_token": "E"})", "j{{ eos_token }}");
  auto from_jinja = ChatTemplate::load_if_present(dir);
  ASSERT_TRUE(from_jinja.has_value());
  EXPECT_EQ(from_jinja->render(user("x"), Json(), false), "jE");
  fresh("", "only the file");
  ASSERT_TRUE(ChatTemplate::load_if_present(dir).has_value());
  // Broken: each names the file at fault.
  fresh(R"({"chat_template": "{% for m in messages %}"})", "");
  EXPECT_NE(error_of().find("tokenizer_config.json"), std::string::npos) << error_of();
  fresh(R"({"eos_token": "E"})", "{{ unclosed");
  EXPECT_NE(error_of().find("chat_template.jinja"), std::string::npos) << error_of();
  fresh(R"({"chat_template": 42})", "");
  EXPECT_NE(error_of().find("neither a string nor a list"), std::string::npos) << error_of();
  fresh("{not json", "");
  EXPECT_NE(error_of().find("tokenizer_config.json"), std::string::npos) << error_of();
  fresh("[1, 2]", "");
  EXPECT_NE(error_of().find("not a JSON object"), std::string::npos) << error_of();
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateConfig, TemplateFileReplacesTheFoldersAndKeepsItsSpecialTokens) {
  const auto dir = std::filesystem::temp_directory_path() / "qwenrt_chat_template_file_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "model");
  const auto model = dir / "model";
  std::ofstream(model / "tokenizer_config.json") << R"({"chat_template": "from config", "eos_token": "E"})";
  std::ofstream(model / "chat_template.jinja") << "from the folder's file";
  // A Jinja file, its one trailing newline dropped as jinja2 drops it.
  std::ofstream(dir / "t.jinja") << "{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}\n";
  EXPECT_EQ(ChatTemplate::load(model, dir / "t.jinja").render(user("x"), Json(), false), "[x]E");
  // Another model's tokenizer_config.json: its template, this folder's tokens.
  std::ofstream(dir / "other.json") << R"({"chat_template": "other {{ eos_token }}", "eos_token": "O"})";
  EXPECT_EQ(ChatTemplate::load(model, dir / "other.json").render(user("x"), Json(), false), "other E");
  // No file given: the folder's own, as before.
  EXPECT_EQ(ChatTemplate::load(model, {}).render(user("x"), Json(), false), "from the folder's file");
  // A folder with no template at all still takes a file's.
  std::filesystem::create_directories(dir / "bare");
  EXPECT_EQ(ChatTemplate::load(dir / "bare", dir / "t.jinja").render(user("y"), Json(), false), "[y]");
  auto message_of = [&](const std::filesystem::path& file) {
    try {
      ChatTemplate::load(model, file);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Each failure names the file.
  const std::string missing = message_of(dir / "missing.jinja");
  EXPECT_NE(missing.find("missing.jinja"), std::string::npos) << missing;
  std::ofstream(dir / "no_template.json") << R"({"eos_token": "O"})";
  const std::string no_template = message_of(dir / "no_template.json");
  EXPECT_NE(no_template.find("no_template.json"), std::string::npos) << no_template;
  EXPECT_NE(no_template.find("chat_template"), std::string::npos) << no_template;
  std::ofstream(dir / "broken.jinja") << "{% for m in messages %}";
  const std::string broken = message_of(dir / "broken.jinja");
  EXPECT_NE(broken.find("broken.jinja"), std::string::npos) << broken;
  EXPECT_NE(message_of(dir), "no error");  // a folder is no file
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateConfig, OriginalQwenFoldersGetChatMlWhereverTheyNameTheirTokenizer) {
  // The original Qwen's folders have no template; naming QWenTokenizer in tokenizer_config.json
  // or only in config.json gives the ChatML of its own code, as the tokenizer loader decides.
  const auto dir = std::filesystem::temp_directory_path() / "qwenrt_chat_template_v1_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"tokenizer_class": "QWenTokenizer"})";
  const std::string chatml = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n";
  EXPECT_EQ(ChatTemplate::load(dir).render(user("x"), Json(), false), chatml);
  std::ofstream(dir / "tokenizer_config.json") << R"({"tokenizer_class": "QWenTokenizer"})";
  EXPECT_EQ(ChatTemplate::load(dir).render(user("x"), Json(), false), chatml);
  std::filesystem::remove_all(dir);
}

// Booleans are Python ints in the numeric filters; the expected text is jinja2 3.1.6's.
TEST(ChatTemplateNumbers, BooleansAreIntegersInNumericFilters) {
  EXPECT_EQ(render("{{ true|round }} {{ false|round(1) }} {{ true|abs }} {{ true|int }} {{ true|float }} "
                   "{{ [true, 2]|sum }} {{ [true, 2.5]|sum }}"),
            "1 0 1 1 1.0 3 3.5");
}

}  // namespace
