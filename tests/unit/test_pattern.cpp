// The `pattern` automaton against ECMA-262 itself: tests/data/patterns/patterns.json holds
// strings and the verdicts of a JavaScript RegExp with the `u` flag (make_patterns.mjs), and
// the automaton must agree on every one, with and without length bounds. Then what no
// reference decides for us: every state can still reach an end, what is refused is refused
// by name, and strings with patterns inside JSON texts (escapes decoded first).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <chrono>
#include <climits>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "structured/json_grammar.h"
#include "structured/pattern.h"
#include "structured_helpers.h"

namespace qwenrt::structured {
namespace {

using nlohmann::ordered_json;

struct Case {
  std::string pattern;
  std::vector<std::pair<std::string, bool>> strings;
};

std::vector<Case> reference_cases() {
  std::ifstream in(std::string(QWENRT_TEST_DATA) + "/patterns/patterns.json");
  const auto all = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& entry : all) {
    Case c;
    c.pattern = entry["pattern"].get<std::string>();
    for (const auto& s : entry["cases"]) c.strings.emplace_back(s[0].get<std::string>(), s[1].get<bool>());
    cases.push_back(std::move(c));
  }
  return cases;
}

int32_t code_points(const std::string& text) {
  int32_t n = 0;
  for (const char c : text) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

TEST(Pattern, AgreesWithEcmaScriptOnTheReferenceStrings) {
  const std::vector<Case> cases = reference_cases();
  ASSERT_GE(cases.size(), 50u);
  size_t checked = 0;
  for (const Case& c : cases) {
    const BytePattern p = compile_pattern(c.pattern, 0, -1);
    for (const auto& [text, expected] : c.strings) {
      EXPECT_EQ(p.matches(text), expected) << "/" << c.pattern << "/ on \"" << text << "\"";
      ++checked;
    }
  }
  EXPECT_GE(checked, 5000u);
}

TEST(Pattern, LengthBoundsFoldedInCountCodePoints) {
  const std::vector<std::pair<int32_t, int32_t>> bounds = {{0, 3}, {2, -1}, {1, 5}, {4, 4}, {0, 0}};
  for (const Case& c : reference_cases()) {
    for (const auto& [lo, hi] : bounds) {
      bool any = false;
      for (const auto& [text, expected] : c.strings) {
        const int32_t n = code_points(text);
        any = any || (expected && n >= lo && (hi < 0 || n <= hi));
      }
      try {
        const BytePattern p = compile_pattern(c.pattern, lo, hi);
        for (const auto& [text, expected] : c.strings) {
          const int32_t n = code_points(text);
          EXPECT_EQ(p.matches(text), expected && n >= lo && (hi < 0 || n <= hi))
              << "/" << c.pattern << "/ [" << lo << "," << hi << "] on \"" << text << "\"";
        }
      } catch (const PatternError& error) {
        // Refused as matching nothing: then no reference string may fit.
        EXPECT_FALSE(any) << "/" << c.pattern << "/ [" << lo << "," << hi << "]: " << error.what();
      }
    }
  }
}

bool valid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > text.size()) return false;
    uint32_t c = n == 1 ? b : b & (0x7Fu >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto t = static_cast<uint8_t>(text[i + k]);
      if ((t & 0xC0) != 0x80) return false;
      c = c << 6 | (t & 0x3Fu);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < least[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// From every state some byte leads on or the state accepts; every path spells UTF-8; the
// strings reached, where the reference has a verdict on them, agree with it.
TEST(Pattern, RandomWalksEndInValidTextAndNeverGetStuck) {
  std::mt19937 rng(5);
  for (const Case& c : reference_cases()) {
    std::map<std::string, bool> verdicts(c.strings.begin(), c.strings.end());
    for (const auto& [lo, hi] : std::vector<std::pair<int32_t, int32_t>>{{0, -1}, {0, 6}, {3, -1}}) {
      BytePattern p;
      try {
        p = compile_pattern(c.pattern, lo, hi);
      } catch (const PatternError&) {
        continue;
      }
      for (int walk = 0; walk < 200; ++walk) {
        int32_t state = 0, count = 0;
        std::string text;
        for (int step = 0; step < 40; ++step) {
          std::vector<uint8_t> ways;
          for (int b = 0; b < 256; ++b) {
            int32_t s = state, n = count;
            if (p.step(s, n, static_cast<uint8_t>(b))) ways.push_back(static_cast<uint8_t>(b));
          }
          ASSERT_TRUE(!ways.empty() || p.accepting(state, count)) << "/" << c.pattern << "/ stuck after \"" << text << "\"";
          if (ways.empty() || (p.accepting(state, count) && rng() % 4 == 0)) break;
          const uint8_t b = ways[rng() % ways.size()];
          text += static_cast<char>(b);
          ASSERT_TRUE(p.step(state, count, b));
        }
        if (!p.accepting(state, count)) continue;  // cut off: only the ends are checked
        EXPECT_TRUE(valid_utf8(text)) << "/" << c.pattern << "/";
        const int32_t n = code_points(text);
        EXPECT_TRUE(n >= lo && (hi < 0 || n <= hi)) << "/" << c.pattern << "/ \"" << text << "\"";
        if (const auto it = verdicts.find(text); it != verdicts.end()) {
          EXPECT_TRUE(it->second) << "/" << c.pattern << "/ reached \"" << text << "\", which ECMAScript refuses";
        }
      }
    }
  }
}

TEST(Pattern, RefusesWhatItDoesNotReadByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a)\\1", "backreferences"},
      {"(?<n>a)\\k<n>", "backreferences"},
      {"a(?=b)", "lookahead"},
      {"(?<!a)b", "lookbehind"},
      {"\\bword\\b", "word boundaries"},
      {"\\p{L}+", "Unicode property escapes"},
      {"(ab", "missing ')'"},
      {"ab)", "unmatched ')'"},
      {"[ab", "missing ']'"},
      {"*a", "nothing to repeat"},
      {"a**", "nothing to repeat"},
      {"a{3,2}", "out of order"},
      {"a{2000}", "over 1000"},
      {"[z-a]", "out of order"},
      {"[\\d-z]", "cannot bound a range"},
      {"\\q", "unknown escape"},
      {"\\x4", "hex digits"},
      {"\\012", "octal"},
      {"a\\", "at the end"},
      {"^[]$", "no string matches"},
      {"^a$b", "no string matches"},
      {"(?P<x>a)", "unknown group"},
      // Not UTF-8: an overlong "/", an encoded surrogate, a code point past U+10FFFF.
      {"^\xE0\x80\xAF$", "not valid UTF-8"},
      {"^\xED\xA0\x80$", "not valid UTF-8"},
      {"^\xF4\x90\x80\x80$", "not valid UTF-8"},
  };
  for (const auto& [pattern, expected] : cases) {
    try {
      compile_pattern(pattern, 0, -1);
      ADD_FAILURE() << "accepted: " << pattern;
    } catch (const PatternError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << pattern << ": " << error.what();
    }
  }
  // A lone surrogate is no character (a JSON text holds none alone): it matches nothing.
  EXPECT_TRUE(compile_pattern("^[^\\uD800-\\uDFFF]$", 0, -1).matches("a"));
  EXPECT_TRUE(compile_pattern("^(?:a|\\uD83D)$", 0, -1).matches("a"));
  EXPECT_THROW(compile_pattern("^\\uD800$", 0, -1), PatternError);
  // Length bounds out of range are refused, not overflowed.
  EXPECT_THROW(compile_pattern("a", -1, -1), PatternError);
  EXPECT_THROW(compile_pattern("a", 0, INT32_MAX), PatternError);
  EXPECT_THROW(compile_pattern("a", INT32_MAX, -1), PatternError);
  EXPECT_THROW(compile_pattern("^a{5}$", 0, 4), PatternError);
  EXPECT_THROW(compile_pattern("^(ab)+$", 3, 3), PatternError);
  // Too many states, refused rather than compiled for ever: "an a 40 characters back".
  EXPECT_THROW(compile_pattern("a[ab]{40}", 0, -1), PatternError);
  // Once found, an unanchored pattern takes any text: the automaton stops following it
  // ("\S{1,200}" is "some character not a space").
  const BytePattern found = compile_pattern("\\S{1,200}", 0, -1);
  EXPECT_LT(found.states(), 40);
  EXPECT_TRUE(found.matches(" \n x"));
  EXPECT_FALSE(found.matches(" \n\t"));
  // Large bounds cost no more than small ones where a count is decided by the fewest or the
  // most characters still to come; both bounds with a large minimum are refused.
  const auto began = std::chrono::steady_clock::now();
  const BytePattern many = compile_pattern("^a*$", 1000000, -1);
  EXPECT_TRUE(many.matches(std::string(1000000, 'a')));
  EXPECT_FALSE(many.matches(std::string(999999, 'a')));
  const BytePattern most = compile_pattern("^(?:ab)*$", 0, 1000000);
  EXPECT_TRUE(most.matches("abab"));
  EXPECT_FALSE(most.matches("aba"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count(), 2.0);
  EXPECT_THROW(compile_pattern("^a*$", 300000, 600000), PatternError);
  const BytePattern even = compile_pattern("^(?:aa)*$", 3, 5);
  EXPECT_TRUE(even.matches("aaaa"));
  EXPECT_FALSE(even.matches("aa"));
  EXPECT_FALSE(even.matches("aaaaaa"));
  // Literal braces and brackets where they quantify nothing, as browsers read them.
  EXPECT_TRUE(compile_pattern("^a{,2}]}$", 0, -1).matches("a{,2}]}"));
}

using testing::matches;
using testing::schema;

TEST(JsonSchemaPattern, StringsMatchTheirDecodedValue) {
  const auto phone = schema(R"({"type": "string", "pattern": "^\\d{3}-\\d{4}$"})");
  EXPECT_TRUE(matches(phone, "\"555-1212\""));
  EXPECT_FALSE(matches(phone, "\"555-121\""));
  EXPECT_FALSE(matches(phone, "\"5551212\""));
  EXPECT_FALSE(matches(phone, "555"));  // a string, by the pattern alone

  // Escapes are decoded before the pattern sees them.
  const auto lines = schema(R"({"pattern": "^a\\nb\"\\\\$"})");
  EXPECT_TRUE(matches(lines, R"("a\nb\"\\")"));
  EXPECT_TRUE(matches(lines, R"("a\u000ab\"\\")"));
  EXPECT_TRUE(matches(lines, R"("a\u000Ab\"\\")"));
  EXPECT_FALSE(matches(lines, R"("a\tb\"\\")"));
  // A character that needs no escape comes as itself.
  const auto letter = schema(R"({"type": "string", "pattern": "^A/$"})");
  EXPECT_TRUE(matches(letter, "\"A/\""));
  EXPECT_TRUE(matches(letter, "\"A\\/\""));
  EXPECT_FALSE(matches(letter, "\"\\u0041/\""));

  // Unanchored: anywhere in the string; with length bounds folded in.
  const auto contains = schema(R"({"type": "string", "pattern": "ab", "minLength": 3, "maxLength": 4})");
  EXPECT_TRUE(matches(contains, "\"xab\""));
  EXPECT_TRUE(matches(contains, "\"\xc3\xa9" "abx\""));
  EXPECT_FALSE(matches(contains, "\"ab\""));
  EXPECT_FALSE(matches(contains, "\"xxaby\""));
  EXPECT_FALSE(matches(contains, "\"xyzw\""));

  // In objects, lists of types, enums (values that do not match are dropped).
  const auto object = schema(R"({"type": "object", "properties": {"id": {"type": ["string", "null"], "pattern": "^[A-Z]{2}\\d+$"},
      "tag": {"enum": ["ok", "no", 3], "pattern": "^o"}}, "required": ["id", "tag"]})");
  EXPECT_TRUE(matches(object, R"({"id": "AB12", "tag": "ok"})"));
  EXPECT_TRUE(matches(object, R"({"id": null, "tag": 3})"));
  EXPECT_FALSE(matches(object, R"({"id": "ab12", "tag": "ok"})"));
  EXPECT_FALSE(matches(object, R"({"id": "AB12", "tag": "no"})"));

  try {
    compile_json_schema(ordered_json::parse(R"({"type": "object", "properties": {"x": {"type": "string", "pattern": "(a"}}})"));
    ADD_FAILURE() << "a broken pattern was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("#/properties/x: 'pattern' \"(a\": missing ')'"), std::string::npos) << error.what();
  }
}

// A tool's parameters with patterns hold its calls (each pattern compiled once, though the
// parameters are compiled alone first to see whether the grammar can hold them).
TEST(JsonSchemaPattern, ToolCallArgumentsKeepTheirPatterns) {
  const ordered_json parameters = ordered_json::parse(R"({"type": "object", "properties": {"zip": {"type": "string",
      "pattern": "^\\d{5}$"}}, "required": ["zip"]})");
  const auto g = std::make_shared<const Grammar>(compile_tool_calls({{"lookup", parameters}, {"other", parameters}}));
  EXPECT_EQ(g->patterns.size(), 1u);
  EXPECT_TRUE(matches(g, R"({"name": "lookup", "arguments": {"zip": "75001"}})"));
  EXPECT_FALSE(matches(g, R"({"name": "lookup", "arguments": {"zip": "7500"}})"));
  // A pattern the grammar cannot hold: that tool's arguments are any object.
  const ordered_json lookaround = ordered_json::parse(R"x({"type": "object", "properties": {"zip": {"type": "string",
      "pattern": "^(?!0)"}}})x");
  const auto loose = std::make_shared<const Grammar>(compile_tool_calls({{"lookup", lookaround}}));
  EXPECT_TRUE(matches(loose, R"({"name": "lookup", "arguments": {"zip": 3}})"));
  // Tools whose patterns fit alone but not together: the ones past the grammar's total get
  // any object (the request is not refused).
  std::vector<std::pair<std::string, ordered_json>> large;
  for (const char* start : {"ba", "ca", "da", "ea", "fa"}) {
    large.emplace_back(std::string("t") + start, ordered_json::parse(std::string(R"({"type": "object", "properties": {"s":
        {"type": "string", "pattern": ")") + start + R"(.{17}$"}}, "required": ["s"]})"));
  }
  const auto several = std::make_shared<const Grammar>(compile_tool_calls(large));
  EXPECT_FALSE(matches(several, R"({"name": "tba", "arguments": {"s": "x"}})"));
  EXPECT_TRUE(matches(several, R"({"name": "tfa", "arguments": {"s": 1}})"));
}

// A generation held to the grammar, one byte at a time over an alphabet with escapes in it,
// always has a way on until the text is complete, and what it completes matches the
// pattern once decoded.
TEST(JsonSchemaPattern, RandomWalksThroughEscapesNeverGetStuck) {
  const std::vector<std::string> patterns = {"^\\d{3}-\\d{4}$", "^[a-z\\n\\t\"\\\\]{2,5}$", "\\u0001|\\n\\n", "^(\\\\u|x)+$",
                                             "^[^a]{0,3}$", "^\\/\\u001f$"};
  const std::string alphabet = std::string("\"\\u0001fxtn/01234-ab9") + '\x1f';
  std::mt19937 rng(3);
  for (const std::string& pattern : patterns) {
    ordered_json s = {{"type", "string"}, {"pattern", pattern}};
    const auto g = std::make_shared<const Grammar>(compile_json_schema(s));
    const BytePattern reference = compile_pattern(pattern, 0, -1);
    JsonMatcher matcher(g);
    int completed = 0;
    for (int walk = 0; walk < 300; ++walk) {
      MatchState state = matcher.start();
      std::string written;
      for (int step = 0; step < 120 && !matcher.accepting(state); ++step) {
        std::vector<std::pair<char, MatchState>> ways;
        for (int b = 0; b < 256; ++b) {
          MatchState next;
          matcher.advance(state, static_cast<uint8_t>(b), next);
          if (!next.dead() && (alphabet.find(static_cast<char>(b)) != std::string::npos || rng() % 8 == 0)) {
            ways.emplace_back(static_cast<char>(b), std::move(next));
          }
        }
        if (ways.empty()) {
          // Only bytes outside the walk's alphabet lead on: there must be one.
          bool any = false;
          for (int b = 0; b < 256 && !any; ++b) {
            MatchState next;
            matcher.advance(state, static_cast<uint8_t>(b), next);
            any = !next.dead();
          }
          ASSERT_TRUE(any) << pattern << " stuck after " << written;
          break;
        }
        // Lean towards the escapes and the end, so that walks complete.
        size_t pick = rng() % ways.size();
        for (size_t k = 0; k < ways.size(); ++k) {
          if ((ways[k].first == '"' || ways[k].first == '\\' || ways[k].first == 'u') && rng() % 3 == 0) pick = k;
        }
        written += ways[pick].first;
        state = std::move(ways[pick].second);
      }
      if (!matcher.accepting(state)) continue;
      ++completed;
      const auto value = nlohmann::json::parse(written);
      ASSERT_TRUE(value.is_string()) << written;
      EXPECT_TRUE(reference.matches(value.get<std::string>())) << pattern << ": " << written;
    }
    EXPECT_GT(completed, 20) << pattern;
  }
}

}  // namespace
}  // namespace qwenrt::structured
