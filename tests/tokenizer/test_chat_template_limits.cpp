// A chat template is a program from a model folder, and messages come from users: a render
// must end in output or in a one-line qwenrt::Error that names the limit and the line, never
// in a crash, undefined behaviour or an exhausted machine. These are the reproducers of the
// robustness review (F1-F5) and the budget's other edges; expected values of ordinary
// arithmetic are jinja2 3.1.6's output (ImmutableSandboxedEnvironment, as transformers).
// Real Qwen templates on tens of thousands of generated messages must stay far inside the
// budget. Complexity is checked by counting steps and comparisons, not by timing.
#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include <pthread.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;
using qwenrt::ChatTemplate;
using qwenrt::Error;
using qwenrt::chat_template::RenderLimits;
using qwenrt::chat_template::RenderStats;

const std::filesystem::path kData = QWENRT_TEST_DATA;

Json user(const std::string& text) { return Json::array({{{"role", "user"}, {"content", text}}}); }

std::string render(const std::string& source, const RenderLimits& limits = {}, RenderStats* stats = nullptr) {
  return ChatTemplate(source).render(user("hi"), Json(), false, Json::object(), limits, stats);
}

// The message of the qwenrt::Error that rendering `source` throws; a failure when it renders
// or throws anything else.
std::string render_error(const std::string& source, const RenderLimits& limits = {}) {
  try {
    const std::string out = render(source, limits);
    ADD_FAILURE() << "rendered " << out.size() << " bytes, expected an error: " << source.substr(0, 200);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected qwenrt::Error, got " << e.what() << " for " << source.substr(0, 200);
  }
  return {};
}

void expect_error(const std::string& source, const std::string& needle, const RenderLimits& limits = {}) {
  const std::string message = render_error(source, limits);
  EXPECT_NE(message.find("chat template error at line "), std::string::npos) << message;
  EXPECT_NE(message.find(needle), std::string::npos) << "for " << source.substr(0, 200) << ": " << message;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// ---- F1: the chat template's JSON reader ----

TEST(ChatTemplateLimits, F1TokenizerConfigWithHugeNumberNamesTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("qwenrt-f1-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer_config.json") << "{\"chat_template\": \"{{ 1 }}\", \"model_max_length\": 1e400}";
  }
  try {
    ChatTemplate::load(dir);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: not valid JSON: number overflow"), std::string::npos)
        << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected qwenrt::Error, got " << e.what();
  }
  std::filesystem::remove_all(dir);
}

// ---- F2: arithmetic is defined for every input ----

TEST(ChatTemplateLimits, F2ArithmeticBeyond64BitsIsAnError) {
  // UBSan found these: float->int64 out of range, negating INT64_MIN (twice).
  expect_error("{{ 1e300|int }}", "does not fit in 64 bits");
  expect_error("{{ '1e300'|int }}", "does not fit in 64 bits");
  expect_error("\n{{ (-9223372036854775807 - 1)|abs }}", "line 2");
  expect_error("{{ (-9223372036854775807 - 1)|abs }}", "does not fit in 64 bits");
  expect_error("{{ -(-9223372036854775807 - 1) }}", "does not fit in 64 bits");
  expect_error("{{ [9223372036854775807, 1]|sum }}", "does not fit in 64 bits");
  expect_error("{{ 2 ** 63 }}", "does not fit in 64 bits");
  EXPECT_NE(render_error("{{ 0x10000000000000000 }}").find("line 1, column 4: number out of range"), std::string::npos);
  expect_error("{{ 9223372036854775807|round(-1) }}", "does not fit in 64 bits");
  // Python raises for these; so do we.
  expect_error("{{ 0 ** -1 }}", "negative power");
  expect_error("{{ 10.0 ** 400 }}", "out of range");
  expect_error("{{ (-8) ** 0.5 }}", "complex");
}

TEST(ChatTemplateLimits, F2ArithmeticMatchesJinja2WhereRepresentable) {
  EXPECT_EQ(render("{{ 1e400 }} {{ -1e400 }} {{ 1e-400 }}"), "inf -inf 0.0");
  EXPECT_EQ(render("{{ (-1) ** 3 }} {{ (-1) ** 1000000000000000001 }} {{ 2 ** 62 }} {{ 3 ** 39 }}"),
            "-1 -1 4611686018427387904 4052555153018976267");
  EXPECT_EQ(render("{{ 15|round(-1) }} {{ 25|round(-1) }} {{ -15|round(-1) }} {{ 1234|round(-2) }}"), "20 20 -20 1200");
  EXPECT_EQ(render("{{ 9223372036854775807|round }} {{ 9223372036854775807|abs }}"),
            "9223372036854775807 9223372036854775807");
  EXPECT_EQ(render("{{ '1e400'|float }} {{ 'inf'|int }} {{ '12'|int + 1 }}"), "inf 0 13");
  EXPECT_EQ(render("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}"), "True");
  EXPECT_EQ(render("{{ range(9223372036854775800, 9223372036854775807, 5)|list }}"),
            "[9223372036854775800, 9223372036854775805]");
  EXPECT_EQ(render("{{ 2.5 ** 0.5 }}"), "1.5811388300841898");
}

// ---- F3: recursion is bounded by the stack actually left ----

// F3: each limit alone (calls, nesting, expression depth) held; their product overflowed
// the 8 MB stack of a Release build. `block` is "if" or "for".
std::string recursion_in_nested_blocks(int macro_calls, int nesting, const std::string& block = "for") {
  const std::string open = block == "for" ? "{%for x in [1]%}" : "{%if 1%}";
  const std::string close = block == "for" ? "{%endfor%}" : "{%endif%}";
  std::string body;
  for (int i = 0; i < nesting; ++i) body += open;
  body += "{%if n>0%}{{f(n-1)}}{%endif%}";
  for (int i = 0; i < nesting; ++i) body += close;
  return "{%macro f(n)%}" + body + "{%endmacro%}\n{{f(" + std::to_string(macro_calls) + ")}}";
}

TEST(ChatTemplateLimits, F3RecursionStopsOnTheStackBudget) {
  const std::string source = recursion_in_nested_blocks(99, 120, "for");  // segfaulted the Release build
  expect_error(source, "recursion too deep");
  expect_error(source, "max_stack_bytes");
  expect_error(source, "line 1");
  // With {% if %} the frames are smaller: it renders (as in jinja2) or, where frames are
  // larger (sanitizer builds), stops cleanly.
  const std::string with_ifs = recursion_in_nested_blocks(99, 100, "if");
  EXPECT_LT(with_ifs.size(), 2000u);  // about 1.7 KB
  try {
    EXPECT_EQ(render(with_ifs), "");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recursion too deep"), std::string::npos) << e.what();
  }
  // A smaller budget stops sooner; moderate recursion finishes far inside the default.
  RenderLimits small;
  small.max_stack_bytes = 256 << 10;
  expect_error(recursion_in_nested_blocks(20, 20), "recursion too deep", small);
  RenderStats stats;
  EXPECT_EQ(render(recursion_in_nested_blocks(5, 5), {}, &stats), "");
  EXPECT_GT(stats.stack_bytes, 0u);
  EXPECT_LT(stats.stack_bytes, RenderLimits().max_stack_bytes / 4);
}

struct ThreadResult {
  std::string source;
  std::string error;
};

void* render_on_thread(void* arg) {
  auto* result = static_cast<ThreadResult*>(arg);
  try {
    render(result->source);
  } catch (const Error& e) {
    result->error = e.what();
  }
  return nullptr;
}

TEST(ChatTemplateLimits, F3SmallThreadStacksStopCleanly) {
  // A server worker with a 512 KiB stack: the limit is the stack left, not a fixed budget.
  for (const std::string& source : {recursion_in_nested_blocks(99, 100, "if"),
                                    std::string("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")}) {
    pthread_attr_t attributes;
    ASSERT_EQ(pthread_attr_init(&attributes), 0);
    ASSERT_EQ(pthread_attr_setstacksize(&attributes, 512 << 10), 0);
    ThreadResult result{source, {}};
    pthread_t thread;
    ASSERT_EQ(pthread_create(&thread, &attributes, render_on_thread, &result), 0);
    pthread_join(thread, nullptr);
    pthread_attr_destroy(&attributes);
    EXPECT_NE(result.error.find("recursion too deep"), std::string::npos) << result.error;
  }
}

// ---- F4: memory and time from a few bytes of template ----

TEST(ChatTemplateLimits, F4WidthsAndCountsPassedToFilters) {
  expect_error("{{ [1]|batch(10**12, 0) }}", "max_width");
  expect_error("{{ 'a'|center(10**12) }}", "max_width");
  expect_error("{{ 'a\nb'|indent(10**10) }}", "max_width");
  expect_error("{{ [1, 2]|tojson(indent=10**10) }}", "max_width");
  // Within the width, the result still counts against the value limit.
  RenderLimits limits;
  limits.max_value_bytes = 1 << 20;
  expect_error("{{ ('\n' * 100000)|indent(1000) }}", "max_value_bytes", limits);
  expect_error("{{ range(100000)|list|tojson(indent=1000) }}", "max_value_bytes", limits);
  // Ordinary uses are unaffected, and batch without a fill may name any size.
  EXPECT_EQ(render("{{ 'ab'|center(6) }}|{{ [1, 2, 3]|batch(10**12)|list }}"), "  ab  |[[1, 2, 3]]");
}

TEST(ChatTemplateLimits, F4ValuesAreCountedInBytes) {
  expect_error("{{ range(100000)|join('x' * 60000000) }}", "max_value_bytes");
  // The repeat cap counted items, not bytes: 60 copies of a 60 MB string is 3.5 GB.
  expect_error("{{ (['x' * 60000000] * 60)|length }}", "max_value_bytes");
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "max_value_bytes");
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               "max_value_bytes");
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "max_value_bytes");
  expect_error("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s|replace('x', 'xx') %}"
               "{% endfor %}",
               "max_value_bytes");
  expect_error("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s.replace('', 'ab') %}"
               "{% endfor %}",
               "max_value_bytes");
  expect_error("{{ ('x' * 60000000)|list|length }}", "max_value_bytes");
  expect_error("{% set x = 'x' * 50000000 %}{{ [x, x, x] }}", "max_value_bytes");
}

TEST(ChatTemplateLimits, F4OutputAndStepsAreBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  expect_error("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "max_output_bytes", limits);
  expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "max_steps");
  limits = {};
  limits.max_steps = 10000;
  const std::string message = render_error("{% for i in range(100) %}\n{% for j in range(1000) %}{% endfor %}{% endfor %}", limits);
  EXPECT_NE(message.find("max_steps 10000"), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  // Copying a long string again and again is work too, even when nothing is kept.
  expect_error("{% set x = 'x' * 50000000 %}{% for i in range(100000) %}{{ x|length }}{% endfor %}", "max_steps");
}

// ---- F5: no quadratic filters or lookups ----

uint64_t comparisons_of(const std::string& source, const Json& vars) {
  RenderStats stats;
  ChatTemplate(source).render(user("hi"), Json(), false, vars, {}, &stats);
  return stats.comparisons;
}

Json numbers(int n, int distinct) {
  Json list = Json::array();
  for (int i = 0; i < n; ++i) list.push_back(i % distinct);
  return list;
}

TEST(ChatTemplateLimits, F5UniqueIsLinear) {
  // 10k/20k/40k items took 0.46/1.5/6.0 s: every item was compared with every kept one.
  const std::string source = "{{ items|unique|list|length }}";
  uint64_t previous = 0;
  for (int n : {10000, 20000, 40000}) {
    const uint64_t count = comparisons_of(source, {{"items", numbers(n, n)}});
    EXPECT_LT(count, 4u * static_cast<uint64_t>(n)) << n << " items";
    if (previous != 0) {
      EXPECT_LT(count, 3 * previous) << "doubling the items more than doubles the work";
    }
    previous = count;
  }
  EXPECT_EQ(render("{{ [1, 1.0, True, 2, 'a', 'A', (1, 2), (1, 2)]|unique|list }}"), "[1, 2, 'a', (1, 2)]");
  expect_error("{{ [{'a': 1}]|unique|list }}", "unhashable type: 'dict'");
}

TEST(ChatTemplateLimits, F5WideDictLookupsAndSortsStayNearLinear) {
  auto wide = [](int n) {
    Json object = Json::object();
    for (int i = 0; i < n; ++i) object["k" + std::to_string(i)] = i;
    return object;
  };
  // A lookup per key: with a linear search that is n^2/2 comparisons.
  const std::string lookups = "{% set ns = namespace(t=0) %}{% for k in d %}{% set ns.t = ns.t + d[k] %}{% endfor %}{{ ns.t }}";
  for (int n : {5000, 20000}) {
    EXPECT_LT(comparisons_of(lookups, {{"d", wide(n)}}), 4u * static_cast<uint64_t>(n)) << n;
  }
  // Sorting is n log n comparisons (with a constant of a few), not n^2.
  for (const char* source : {"{{ d|dictsort|length }}", "{{ d|dictsort(by='value', reverse=true)|length }}",
                             "{{ items|sort|length }}"}) {
    const int n = 20000;
    const uint64_t count = comparisons_of(source, {{"d", wide(n)}, {"items", numbers(n, 997)}});
    EXPECT_LT(count, 4u * n * 15) << source;  // log2(20000) < 15
  }
}

// ---- the budget leaves real templates far inside ----

// A long, realistic conversation: a system prompt, user turns, assistant turns with thinking
// (inline <think> or reasoning_content) and tool calls, tool responses; deterministic.
Json long_conversation(int messages, uint32_t seed) {
  std::mt19937 rng(seed);
  auto words = [&](int n) {
    static const char* const kWords[] = {"the", "model", "weather", "in", "Paris", "is", "sunny", "call", "tool",
                                         "result", "42", "数据", "überprüfen", "ok", "\n", "- item", "```py"};
    std::string out;
    for (int i = 0; i < n; ++i) out += std::string(i ? " " : "") + kWords[rng() % std::size(kWords)];
    return out;
  };
  Json list = Json::array({{{"role", "system"}, {"content", "You are a helpful assistant. " + words(30)}}});
  while (static_cast<int>(list.size()) < messages) {
    list.push_back({{"role", "user"}, {"content", words(5 + static_cast<int>(rng() % 60))}});
    Json assistant = {{"role", "assistant"}};
    if (rng() % 2 == 0) {
      assistant["content"] = "<think>\n" + words(20) + "\n</think>\n\n" + words(10 + static_cast<int>(rng() % 80));
    } else {
      assistant["reasoning_content"] = words(25);
      assistant["content"] = words(10 + static_cast<int>(rng() % 50));
    }
    const bool calls_tool = rng() % 3 == 0;
    if (calls_tool) {
      assistant["tool_calls"] = Json::array(
          {{{"type", "function"},
            {"function", {{"name", "get_weather"}, {"arguments", {{"city", words(1)}, {"days", rng() % 7}}}}}}});
    }
    list.push_back(assistant);
    if (calls_tool) list.push_back({{"role", "tool"}, {"content", "{\"temperature\": " + std::to_string(rng() % 40) + "}"}});
  }
  return list;
}

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather for a city", "parameters": {"type": "object", "properties":
  {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])");

TEST(ChatTemplateLimits, RealTemplatesOnLongConversationsStayFarInside) {
  const RenderLimits limits;
  for (const char* name : {"qwen3.jinja", "qwen2.5-instruct.jinja"}) {
    const ChatTemplate tmpl(read_text(kData.parent_path() / "data" / "templates" / name));
    uint64_t steps_small = 0;
    for (int n : {2000, 20000}) {
      const Json messages = long_conversation(n, 7);
      RenderStats stats;
      const std::string out = tmpl.render(messages, kTools, true, {{"enable_thinking", true}}, limits, &stats);
      EXPECT_GT(out.size(), static_cast<size_t>(n) * 50) << name;
      EXPECT_EQ(stats.output_bytes, out.size());
      // Far inside: a tenth of the steps, a small part of the stack and output.
      EXPECT_LT(stats.steps, limits.max_steps / 10) << name << " " << n;
      EXPECT_LT(stats.stack_bytes, limits.max_stack_bytes / 8) << name << " " << n;
      EXPECT_LT(stats.output_bytes, limits.max_output_bytes / 4) << name << " " << n;
      // Work grows linearly with the conversation.
      if (steps_small != 0) {
        EXPECT_LT(stats.steps, steps_small * 10 * 3 / 2) << name;
      }
      steps_small = stats.steps;
      std::printf("%s, %d messages: %zu bytes out, %llu steps, %llu comparisons, %llu KiB stack\n", name, n,
                  out.size(), static_cast<unsigned long long>(stats.steps),
                  static_cast<unsigned long long>(stats.comparisons),
                  static_cast<unsigned long long>(stats.stack_bytes >> 10));
    }
  }
}

}  // namespace
