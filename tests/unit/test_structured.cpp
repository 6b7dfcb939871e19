// Structured output: the JSON matcher against nlohmann's parser (the outside reference for
// what is JSON), schemas accepted and refused, and the vocabulary mask against stepping
// every token through the matcher one by one.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "structured/constraint.h"
#include "structured/grammar_cache.h"
#include "structured/json_grammar.h"
#include "structured/token_mask.h"
#include "structured_helpers.h"

namespace qwenrt::structured {
namespace {

using nlohmann::ordered_json;

using testing::first_mask_difference;
using testing::matches;
using testing::schema;
using testing::ways_on;

// True when the text can still be completed (every byte taken).
bool viable(const std::shared_ptr<const Grammar>& grammar, const std::string& text) {
  JsonMatcher matcher(grammar);
  MatchState state = matcher.start();
  return matcher.advance_all(state, text);
}

TEST(JsonMatcher, AnyValueAgreesWithAJsonParser) {
  const auto any = schema("true");
  const std::vector<std::string> cases = {
      "{}", "[]", "0", "-0", "12", "-1.5e+3", "1E-2", "0.25", "true", "false", "null", "\"\"", "\"a\\\"b\\\\c\\/\"",
      "\"\\u00e9\\n\\t\"", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", "{\"a\": [1, {\"b\": null}], \"c\": \"d\"}",
      " {\n  \"k\": 1\n} ", "[1,2,3]",
      // not JSON
      "01", "-", "1.", "1e", "1e+", ".5", "+1", "{\"a\":1,}", "[1,]", "{'a':1}", "{\"a\" 1}", "{a:1}", "tru", "nul",
      "\"abc", "\"\x01\"", "\"\\x\"", "\"\\u12g4\"", "\"\xc0\x80\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
      "\"\xe2\x82\"", "[1 2]", "{\"a\":}", "}", "{\"a\":1}}", "[[]", "1 2", "\"\xff\""};
  for (const std::string& text : cases) {
    EXPECT_EQ(matches(any, text), ordered_json::accept(text)) << text;
  }
}

// Random values written compactly or indented, and single-byte mutations of them: the
// matcher's verdict is the parser's (the values stay inside the matcher's limits).
TEST(JsonMatcher, RandomDocumentsAndMutationsAgreeWithAJsonParser) {
  std::mt19937 rng(7);
  std::function<ordered_json(int)> value = [&](int depth) -> ordered_json {
    const int kind = static_cast<int>(rng() % (depth > 3 ? 5 : 7));
    switch (kind) {
      case 0: return nullptr;
      case 1: return rng() % 2 == 0;
      case 2: return static_cast<int64_t>(rng() % 2000) - 1000;
      case 3: return static_cast<double>(rng() % 100000) / 64.0 - 500.0;
      case 4: {
        std::string s;
        const char* pieces[] = {"a", "Z", " ", "\"", "\\", "\n", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "/", "\t", "\x01"};
        for (int i = static_cast<int>(rng() % 6); i > 0; --i) s += pieces[rng() % 12];
        return s;
      }
      case 5: {
        ordered_json a = ordered_json::array();
        for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        ordered_json o = ordered_json::object();
        for (int i = static_cast<int>(rng() % 4); i > 0; --i) o["k" + std::to_string(rng() % 10)] = value(depth + 1);
        return o;
      }
    }
  };
  // Whitespace as any JSON allows it (the matcher's own default lays it out as writers do).
  auto free_any = std::make_shared<Grammar>(compile_json_schema(ordered_json::parse("{}")));
  free_any->free_whitespace = true;
  const std::shared_ptr<const Grammar> any = free_any;
  const auto laid_out = schema("{}");
  const std::string alphabet = "{}[]\",:0123456789-+.eEtrufalsn \n\\u\x01\xc3\xa9";
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    const ordered_json doc = value(0);
    const std::string text = doc.dump(rng() % 2 == 0 ? -1 : 2);
    ASSERT_TRUE(matches(any, text)) << text;
    ASSERT_TRUE(matches(laid_out, text)) << text;  // compact and indented writers' layouts
    for (int m = 0; m < 8; ++m) {
      std::string mutated = text;
      const size_t at = rng() % (mutated.size() + 1);
      const int op = static_cast<int>(rng() % 3);
      const char c = alphabet[rng() % alphabet.size()];
      if (op == 0 && at < mutated.size()) mutated[at] = c;
      else if (op == 1) mutated.insert(mutated.begin() + static_cast<std::ptrdiff_t>(at), c);
      else if (at < mutated.size()) mutated.erase(at, 1);
      // Exponents of three digits or more are the matcher's limit, not JSON's.
      if (std::regex_search(mutated, std::regex("[eE][-+]?[0-9]{3}"))) continue;
      const bool valid = ordered_json::accept(mutated);
      EXPECT_EQ(matches(any, mutated), valid) << mutated;
      refused += valid ? 0 : 1;
    }
  }
  EXPECT_GT(refused, 500);  // the mutations do reach invalid texts
}

TEST(JsonMatcher, PrefixesOfValidTextsStayViable) {
  const auto any = schema("true");
  const std::string text = "{\"a\": [1.5e-3, \"x\\u0041\xc3\xa9\", {\"b\": false}], \"c\": null}";
  for (size_t n = 0; n <= text.size(); ++n) EXPECT_TRUE(viable(any, text.substr(0, n))) << n;
}

TEST(JsonMatcher, JsonObjectModeWantsAnObjectAtTheTop) {
  const auto object = std::make_shared<const Grammar>(any_json_object_grammar());
  EXPECT_TRUE(matches(object, "{\"x\": [1, {\"y\": \"z\"}]}"));
  EXPECT_TRUE(matches(object, "  {}"));
  EXPECT_FALSE(viable(object, "["));
  EXPECT_FALSE(viable(object, "\"a\""));
  EXPECT_FALSE(viable(object, "1"));
}

TEST(JsonMatcher, LimitsKeepAGenerationFinite) {
  const auto any = schema("true");
  // Around the value: any whitespace, up to kMaxWhitespace bytes.
  EXPECT_TRUE(matches(any, std::string(kMaxWhitespace, ' ') + "1" + std::string(kMaxWhitespace - 1, '\n') + "\t"));
  EXPECT_FALSE(viable(any, std::string(kMaxWhitespace + 1, ' ')));
  EXPECT_FALSE(viable(any, "1" + std::string(kMaxWhitespace + 1, '\n')));
  // Inside it: nothing, one space, or one line break and an indent.
  for (const char* ok : {"[1,2]", "[ 1, 2 ]", "[\n  1,\n\t2\n]", "{\r\n  \"a\" : 1\n}"}) EXPECT_TRUE(matches(any, ok)) << ok;
  for (const char* bad : {"[  1", "[\t1", "[\n\n1", "[ \n1", "[\n 1  ,", "{\"a\"\r:", "[\r 1", "[1\r]"}) EXPECT_FALSE(viable(any, bad)) << bad;
  EXPECT_TRUE(viable(any, "[\n" + std::string(kMaxIndent, ' ')));
  EXPECT_FALSE(viable(any, "[\n" + std::string(kMaxIndent + 1, ' ')));
  EXPECT_TRUE(viable(any, std::string(kMaxNumberBytes, '1')));
  EXPECT_FALSE(viable(any, std::string(kMaxNumberBytes + 1, '1')));
  EXPECT_TRUE(matches(any, "-1.5e-99"));
  EXPECT_FALSE(viable(any, "1e100"));
  EXPECT_TRUE(viable(any, std::string(kMaxDepth - 2, '[')));
  EXPECT_FALSE(viable(any, std::string(kMaxDepth + 1, '[')));
}

TEST(JsonSchema, PropertiesInOrderRequiredAndOptional) {
  const auto g = schema(R"({"type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "tags"]})");
  EXPECT_TRUE(matches(g, R"({"name": "Ann", "age": 31, "tags": []})"));
  EXPECT_TRUE(matches(g, R"({"name": "Ann", "tags": ["a", "b"]})"));
  EXPECT_TRUE(matches(g, "{\n  \"name\" : \"Ann\" ,\n  \"tags\" : [ ]\n}"));
  EXPECT_FALSE(matches(g, R"({"name": "Ann"})"));                    // a required one missing
  EXPECT_FALSE(viable(g, R"({"tags": [], )"));                      // out of order
  EXPECT_FALSE(viable(g, R"({"name": "Ann", "extra": 1)"));         // additionalProperties left out: none
  EXPECT_FALSE(viable(g, R"({"name": "Ann", "age": 3.5)"));          // integer
  EXPECT_FALSE(viable(g, R"({"name": 5)"));
  EXPECT_FALSE(viable(g, R"({"name": "Ann", "tags": [1)"));
  EXPECT_TRUE(viable(g, R"({"nam)"));
  EXPECT_FALSE(viable(g, R"({"nax)"));
}

TEST(JsonSchema, AdditionalPropertiesAndFreeObjects) {
  const auto open = schema(R"({"type": "object", "properties": {"a": {"type": "number"}}, "additionalProperties": true})");
  EXPECT_TRUE(matches(open, R"({"a": 1, "b": [true]})"));
  EXPECT_TRUE(matches(open, R"({"b": "x"})"));
  EXPECT_TRUE(matches(open, R"({"ab": "x"})"));  // a key that starts like a declared one
  const auto typed = schema(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(matches(typed, R"({"x": 1, "y": 2})"));
  EXPECT_FALSE(viable(typed, R"({"x": "no")"));
  const auto bare = schema(R"({"type": "object"})");  // no properties declared: any keys
  EXPECT_TRUE(matches(bare, R"({"x": {"y": [null]}})"));
}

TEST(JsonSchema, EnumConstAnyOfAndTypeLists) {
  const auto e = schema(R"({"enum": ["red", "green", 1, 12, null, {"k": [1]}]})");
  for (const char* ok : {"\"red\"", "\"green\"", "1", "12", "null", "{\"k\":[1]}"}) EXPECT_TRUE(matches(e, ok)) << ok;
  for (const char* bad : {"\"blue\"", "2", "123", "\"re\"", "{\"k\": [1]}"}) EXPECT_FALSE(matches(e, bad)) << bad;
  const auto c = schema(R"({"const": "fixed"})");
  EXPECT_TRUE(matches(c, "\"fixed\""));
  EXPECT_FALSE(matches(c, "\"fixe\""));
  const auto any_of = schema(R"({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "array", "items": {"type": "boolean"}}]})");
  EXPECT_TRUE(matches(any_of, "\"ab\""));
  EXPECT_FALSE(matches(any_of, "\"abc\""));
  EXPECT_TRUE(matches(any_of, "[true, false]"));
  EXPECT_FALSE(matches(any_of, "[1]"));
  const auto nullable = schema(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(matches(nullable, "-7"));
  EXPECT_TRUE(matches(nullable, "null"));
  EXPECT_FALSE(matches(nullable, "1.5"));
}

TEST(JsonSchema, StringLengthsCountCharactersNotBytes) {
  const auto g = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(matches(g, "\"a\""));
  EXPECT_TRUE(matches(g, "\"ab\""));
  EXPECT_TRUE(matches(g, "\"\xc3\xa9\xe2\x82\xac\\n\""));  // é € \n: three characters
  EXPECT_FALSE(matches(g, "\"abcd\""));
}

TEST(JsonSchema, ArraysCountTheirItems) {
  const auto g = schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})");
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[1]"));
  EXPECT_TRUE(matches(g, "[1, 2]"));
  EXPECT_FALSE(viable(g, "[1, 2,"));
}

TEST(JsonSchema, ReferencesAndRecursion) {
  const auto g = schema(R"({"$defs": {"node": {"type": "object",
      "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"]}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(matches(g, R"({"value": 1, "children": [{"value": 2}, {"value": 3, "children": []}]})"));
  EXPECT_FALSE(viable(g, R"({"value": 1, "children": [{"value": "x")"));
  // Pydantic's form: the model under definitions, annotations beside $ref.
  const auto p = schema(R"({"definitions": {"Pet": {"title": "Pet", "type": "object",
      "properties": {"kind": {"enum": ["cat", "dog"]}}, "required": ["kind"]}},
      "type": "object", "properties": {"pet": {"$ref": "#/definitions/Pet", "description": "the pet"}}, "required": ["pet"]})");
  EXPECT_TRUE(matches(p, R"({"pet": {"kind": "dog"}})"));
  EXPECT_FALSE(matches(p, R"({"pet": {"kind": "cow"}})"));
}

TEST(JsonSchema, CyclesThatReadNothingAreRefused) {
  for (const char* text : {R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})",
                           R"({"anyOf":[{"$ref":"#"}]})", R"({"$ref":"#"})",
                           R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"}) {
    EXPECT_THROW(compile_json_schema(ordered_json::parse(text)), Error) << text;
  }
}

// Alternatives within alternatives are one flat list: the work a byte costs does not
// multiply with their nesting.
TEST(JsonSchema, NestedAlternativesStayCheap) {
  ordered_json defs = ordered_json::object();
  const int depth = 25;  // 2^25 paths if each level's two were stepped through
  for (int i = 0; i < depth; ++i) {
    const std::string next = "#/$defs/a" + std::to_string(i + 1);
    defs["a" + std::to_string(i)] = {{"anyOf", ordered_json::array({{{"$ref", next}}, {{"$ref", next}}})}};
  }
  defs["a" + std::to_string(depth)] = {{"type", "integer"}};
  const auto start = std::chrono::steady_clock::now();
  const auto g = std::make_shared<const Grammar>(compile_json_schema({{"$defs", defs}, {"$ref", "#/$defs/a0"}}));
  EXPECT_TRUE(matches(g, "123"));
  EXPECT_FALSE(matches(g, "1.5"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  ordered_json wide = ordered_json::array();
  for (int i = 0; i <= kMaxAlternatives; ++i) wide.push_back({{"const", i}});
  EXPECT_THROW(compile_json_schema({{"anyOf", wide}}), Error);
}

TEST(JsonSchema, NestingTheDepthCannotHoldIsRefusedOrAvoided) {
  // Required all the way down: deeper than the matcher goes, or without end.
  ordered_json deep = {{"type", "integer"}};
  for (int i = 0; i < kMaxDepth; ++i) deep = {{"type", "object"}, {"properties", {{"k", deep}}}, {"required", {"k"}}};
  EXPECT_THROW(compile_json_schema(deep), Error);
  EXPECT_THROW(compile_json_schema(ordered_json::parse(
                   R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},"$ref":"#/$defs/a"})")),
               Error);
  // Optional recursion compiles; near the depth limit the matcher does not open what it
  // could not close, so every viable text can still be finished.
  const auto tree = schema(R"({"$defs":{"n":{"type":"object","properties":{"c":{"type":"array","items":{"$ref":"#/$defs/n"}}}}},
      "$ref":"#/$defs/n"})");
  std::string text;
  for (int i = 0; i < kMaxDepth; ++i) text += "{\"c\":[";
  JsonMatcher matcher(tree);
  MatchState state = matcher.start();
  size_t taken = 0;
  for (; taken < text.size(); ++taken) {
    MatchState next;
    matcher.advance(state, static_cast<uint8_t>(text[taken]), next);
    if (next.dead()) break;
    state = next;
  }
  EXPECT_LT(taken, text.size());
  std::string close;  // whatever was opened can be closed
  for (size_t i = 0; i < taken; ++i) {
    if (text[i] == '{') close = "}" + close;
    if (text[i] == '[') close = "]" + close;
  }
  if (taken > 0 && text[taken - 1] == ':') close = "[]" + close.substr(1);  // after "c": an array first
  EXPECT_TRUE(matcher.advance_all(state, close) && matcher.accepting(state)) << text.substr(0, taken) << close;
}

// Random walks, each byte drawn among those the matcher takes: a walk never reaches a
// state with no byte to go on that is not complete.
TEST(JsonMatcher, RandomWalksNeverGetStuck) {
  const std::vector<std::string> schemas = {
      R"({"$defs":{"n":{"type":"object","properties":{"b":{"type":"array","minItems":1,"items":{"$ref":"#/$defs/n"}}},
          "additionalProperties":false}},"type":"object","properties":{"w":{"$ref":"#/$defs/n"}},"additionalProperties":false})",
      R"({"$defs":{"n":{"type":"object","properties":{"c":{"type":"array","items":{"$ref":"#/$defs/n"}}}}},"$ref":"#/$defs/n"})",
      R"({"$defs":{"l":{"anyOf":[{"type":"null"},{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/l"}},
          "required":["v","next"]}]}},"$ref":"#/$defs/l"})",
      R"({"type":"array","items":{"type":"array","items":{"type":"array"}}})",
  };
  const std::string alphabet = "{}[]\":,bcwvextruefalsn01-. ";
  std::mt19937 rng(11);
  for (const std::string& text : schemas) {
    const auto g = schema(text);
    JsonMatcher matcher(g);
    for (int walk = 0; walk < 300; ++walk) {
      MatchState state = matcher.start();
      std::string written;
      for (int step = 0; step < 400 && !matcher.accepting(state); ++step) {
        std::vector<std::pair<char, MatchState>> ways = ways_on(matcher, state, alphabet);
        ASSERT_FALSE(ways.empty()) << text << "\nstuck after: " << written;
        // Lean towards opening things, so that walks reach the depth limit.
        size_t pick = rng() % ways.size();
        for (size_t k = 0; k < ways.size(); ++k) {
          if ((ways[k].first == '{' || ways[k].first == '[' || ways[k].first == '"') && rng() % 3 != 0) pick = k;
        }
        written += ways[pick].first;
        state = std::move(ways[pick].second);
      }
    }
  }
}

TEST(JsonSchema, DeclaredNamesAreNeverOtherKeys) {
  const auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
      "required":["b"],"additionalProperties":{"type":"string"}})");
  EXPECT_TRUE(matches(g, R"({"a":1,"b":2,"c":"x"})"));
  EXPECT_FALSE(viable(g, R"({"b":1,"a")"));        // out of order
  EXPECT_FALSE(viable(g, R"({"a":1,"b":2,"a")"));  // repeated
  const auto open = schema(R"({"properties":{"a":{"type":"integer"}},"additionalProperties":true})");
  EXPECT_FALSE(viable(open, R"({"a":1,"a")"));
  EXPECT_TRUE(matches(open, R"({"ab":"x","a":1})"));  // other keys take no place in the order
  EXPECT_TRUE(matches(open, R"({"a":1,"ab":"x"})"));
  // Nor spelled another way with escapes: a key may not leave a declared name's spelling
  // through one; once it differs from every name, escapes are free.
  const auto ages = schema(R"({"properties":{"age":{"type":"integer"},"n\u00e9":{"type":"integer"}},
      "additionalProperties":{"type":"string"}})");
  EXPECT_TRUE(matches(ages, R"({"age":1})"));
  EXPECT_TRUE(matches(ages, "{\"n\xc3\xa9\":1}"));
  for (const char* spelled : {R"({"\u0061ge")", R"({"a\u0067e")", R"({"ag\u0065")", R"({"n\u00e9")", R"({"\/")"}) {
    EXPECT_FALSE(viable(ages, spelled)) << spelled;
  }
  EXPECT_TRUE(matches(ages, R"({"age":1,"other\u0021\n":"x","x\"":"y"})"));
  EXPECT_TRUE(matches(ages, R"({"b\u0061":"x"})"));
}

TEST(JsonSchema, EnumAndConstKeepOnlyValuesTheirSiblingsAllow) {
  EXPECT_THROW(compile_json_schema(ordered_json::parse(R"({"type":"string","const":5})")), Error);
  const auto g = schema(R"({"type":"string","enum":["a",1,"bcd"],"maxLength":2})");
  EXPECT_TRUE(matches(g, "\"a\""));
  EXPECT_FALSE(matches(g, "1"));
  EXPECT_FALSE(matches(g, "\"bcd\""));
  EXPECT_THROW(compile_json_schema(ordered_json::parse(R"({"enum":["a","b"],"const":"c"})")), Error);
  // Keywords of one type do not refuse values of another (no "type" given).
  const auto colors = schema(R"({"enum":["red","green",null],"maxLength":4})");
  EXPECT_TRUE(matches(colors, "null"));
  EXPECT_TRUE(matches(colors, "\"red\""));
  EXPECT_FALSE(matches(colors, "\"green\""));
  EXPECT_TRUE(matches(schema(R"({"const":5,"minItems":1})"), "5"));
  EXPECT_TRUE(matches(schema(R"({"type":"integer","enum":[1.0]})"), "1.0"));  // 1.0 is an integer to JSON Schema
  // enum beside what it cannot be checked against here is refused, not guessed.
  EXPECT_THROW(compile_json_schema(ordered_json::parse(R"({"enum":[1],"anyOf":[{"type":"integer"}]})")), Error);
  EXPECT_TRUE(matches(schema(R"({"enum":["a","b"],"const":"b"})"), "\"b\""));
}

TEST(JsonMatcher, SurrogatePairsAreOneCharacterAndComeInPairs) {
  const auto two = schema(R"({"type":"string","minLength":2})");
  EXPECT_FALSE(matches(two, R"("\ud83d\ude00")"));
  EXPECT_TRUE(matches(two, R"("\ud83d\ude00x")"));
  const auto one = schema(R"({"type":"string","maxLength":1})");
  EXPECT_TRUE(matches(one, R"("\ud83d\ude00")"));
  EXPECT_FALSE(matches(one, R"("\ud800")"));      // a high surrogate alone
  EXPECT_FALSE(matches(one, R"("\udc00")"));      // a low one alone
  EXPECT_FALSE(matches(one, R"("\ud800\u0041")"));
  // Keys too, declared or not.
  const auto object = std::make_shared<const Grammar>(any_json_object_grammar());
  EXPECT_TRUE(matches(object, R"({"\ud83d\ude00": 1, "a\u00e9\n": 2})"));
  for (const char* lone : {R"({"\ud800": 1})", R"({"x\udc00": 1})", R"({"\ud800\u0041": 1})"}) {
    EXPECT_FALSE(viable(object, lone)) << lone;
  }
  const auto declared = schema(R"({"properties":{"a":{"type":"integer"}},"additionalProperties":true})");
  EXPECT_TRUE(matches(declared, R"({"a":1,"b\ud83d\ude00":2})"));
  EXPECT_FALSE(viable(declared, R"({"a":1,"b\ud83d":)"));
  // No digit is taken that no ending could make a pair of: the low half's first two digits
  // are fixed on the way ("\ud83d\u0" used to be taken, and then no fourth digit was).
  const auto text = schema(R"({"type":"string"})");
  for (const char* dead : {R"("\ud83d\u0)", R"("\ud83d\ud0)", R"("\udc)", R"("\uDF)"}) {
    EXPECT_FALSE(viable(text, dead)) << dead;
  }
  for (const char* alive : {R"("\ud83d\udc)", R"("\ud83d\uDF)", R"("\udb)", R"("\ud7)"}) {
    EXPECT_TRUE(viable(text, alive)) << alive;
  }
}

TEST(JsonMatcher, NumbersNeverEndUnfinishableAtTheirLimit) {
  const auto any = schema("true");
  EXPECT_TRUE(viable(any, std::string(kMaxNumberBytes - 2, '1') + "e"));
  EXPECT_FALSE(viable(any, std::string(kMaxNumberBytes - 1, '1') + "e"));
  EXPECT_FALSE(viable(any, std::string(kMaxNumberBytes - 1, '1') + "."));
  EXPECT_TRUE(viable(any, std::string(kMaxNumberBytes - 3, '1') + "e-"));
  EXPECT_FALSE(viable(any, std::string(kMaxNumberBytes - 2, '1') + "e-"));
}

TEST(JsonSchema, RefusesWhatItCannotEnforceByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "string", "pattern": "(?=a)b"})", "'pattern' \"(?=a)b\": lookahead"},
      {R"({"type": "object", "properties": {"n": {"type": "array", "uniqueItems": true}}})", "#/properties/n: 'uniqueItems'"},
      {R"({"type": "number", "multipleOf": 0.5})", "'multipleOf' is supported only as a whole number"},
      {R"({"type": "integer", "multipleOf": 0})", "'multipleOf' must be a number above 0"},
      {R"({"type": "integer", "multipleOf": 3, "minimum": 1})", "'multipleOf' beside 'minimum'"},
      {R"({"type": "integer", "minimum": 3, "maximum": 2})", "no integer of at most 15 digits lies within"},
      {R"({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3})", "no integer"},
      {R"({"type": "number", "minimum": 1e300})", "no number"},
      {R"({"type": "number", "exclusiveMinimum": true})", "'exclusiveMinimum': true needs 'minimum'"},
      {R"({"type": "number", "minimum": "0"})", "'minimum' must be a number"},
      {R"({"allOf": [{"type": "string"}]})", "'allOf'"},
      {R"({"type": "object", "required": ["x"]})", "'x'"},
      {R"({"type": "wat"})", "unknown type 'wat'"},
      {R"({"enum": []})", "'enum' is empty"},
      {R"({"$ref": "#/$defs/missing"})", "points to nothing"},
      {R"({"$ref": "https://example.com/s.json"})", "only references inside the schema"},
      {R"(false)", "allows no value"},
      {R"({"type": "array", "minItems": 3, "maxItems": 1})", "'minItems' is over 'maxItems'"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      compile_json_schema(ordered_json::parse(text));
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  }
  // Annotations and format (an annotation since draft 2019-09) are accepted.
  EXPECT_NO_THROW(compile_json_schema(ordered_json::parse(
      R"({"title": "T", "description": "d", "type": "string", "format": "date-time", "default": "x", "examples": ["y"]})")));
}

// Numbers with bounds against the reference: JSON's grammar (nlohmann's parser) and the
// value as a double compared with the bounds, as a validator compares them. Texts a bounded
// number is not written as (an exponent, over 15 significant digits) are refused.
// The formats enforced, against outside references: the C++ calendar for dates, the C
// library's address parser (inet_pton) for IP addresses; the rest by their RFCs' rules.
bool valid_date(const std::string& text) {
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') return false;
  const int y = std::stoi(text.substr(0, 4)), m = std::stoi(text.substr(5, 2)), d = std::stoi(text.substr(8, 2));
  return std::chrono::year_month_day(std::chrono::year(y), std::chrono::month(static_cast<unsigned>(m)),
                                     std::chrono::day(static_cast<unsigned>(d)))
      .ok();
}

bool valid_time(const std::string& text) {
  static const std::regex form(R"(([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?(Z|[+-]([0-9]{2}):([0-9]{2})))");
  std::smatch m;
  if (!std::regex_match(text, m, form)) return false;
  if (std::stoi(m[1]) > 23 || std::stoi(m[2]) > 59 || std::stoi(m[3]) > 59) return false;
  return m[6].length() == 0 || (std::stoi(m[6]) <= 23 && std::stoi(m[7]) <= 59);
}

bool valid_address(int family, const std::string& text) {
  unsigned char out[16];
  return inet_pton(family, text.c_str(), out) == 1;
}

bool valid_host(const std::string& text) {
  if (text.empty() || text.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = text.find('.', start);
    const std::string label = text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool valid_format(const std::string& format, const std::string& text) {
  static const std::regex uuid("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
  static const std::regex duration(R"(P(?=.)([0-9]+Y)?([0-9]+M)?([0-9]+W)?([0-9]+D)?(T(?=.)([0-9]+H)?([0-9]+M)?([0-9]+S)?)?)");
  if (format == "date") return valid_date(text);
  if (format == "time") return valid_time(text);
  if (format == "date-time") {
    return text.size() > 11 && text[10] == 'T' && valid_date(text.substr(0, 10)) && valid_time(text.substr(11));
  }
  if (format == "uuid") return std::regex_match(text, uuid);
  if (format == "duration") return std::regex_match(text, duration);
  if (format == "ipv4") return valid_address(AF_INET, text);
  if (format == "ipv6") return valid_address(AF_INET6, text);
  if (format == "hostname") return valid_host(text);
  if (format == "email") {
    const size_t at = text.find('@');
    return at != std::string::npos && at > 0 && text.size() <= 254 && valid_host(text.substr(at + 1)) &&
           text.substr(at + 1).find('.') != std::string::npos && text.front() != '.' && text[at - 1] != '.' &&
           text.find("..") == std::string::npos;
  }
  return false;
}

TEST(JsonSchema, FormatsAreEnforced) {
  const std::vector<std::tuple<std::string, std::vector<std::string>, std::vector<std::string>>> cases = {
      {"date", {"2024-02-29", "2000-02-29", "1999-12-31", "2023-04-30"}, {"2023-02-29", "1900-02-29", "2023-04-31", "2023-13-01", "2023-1-01", "20230101"}},
      {"time", {"23:59:59Z", "00:00:00.5+01:30", "12:30:00-08:00"}, {"24:00:00Z", "12:60:00Z", "12:30:00", "12:30Z"}},
      {"date-time", {"2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123456789+14:00"}, {"2024-01-02 03:04:05Z", "2024-01-02T03:04:05"}},
      {"duration", {"P1D", "PT5M", "P1Y2M3DT4H5M6S", "P4W", "P1M"}, {"P", "PT", "P1H", "1D", "P1DT"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}},
      {"ipv4", {"0.0.0.0", "255.255.255.255", "10.1.2.3"}, {"256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5"}},
      {"ipv6", {"::", "::1", "1::", "fe80::1:2", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "1::2:3:4:5:6:7"}, {"1:2:3:4:5:6:7:8:9", "1::2::3", ":1", "12345::"}},
      {"hostname", {"a", "example.com", "a-b.c0"}, {"-a.com", "a-.com", "a..b", "a_b"}},
      {"email", {"a@b.co", "first.last+x@mail.example.org"}, {"a@b", ".a@b.co", "a..b@c.de", "a@-b.co", "@b.co"}},
  };
  for (const auto& [format, good, bad] : cases) {
    const auto g = schema(R"({"type": "string", "format": ")" + format + "\"}");
    for (const std::string& text : good) {
      EXPECT_TRUE(valid_format(format, text)) << format << " (the reference) " << text;
      EXPECT_TRUE(matches(g, "\"" + text + "\"")) << format << " " << text;
    }
    for (const std::string& text : bad) {
      EXPECT_FALSE(valid_format(format, text)) << format << " (the reference) " << text;
      EXPECT_FALSE(matches(g, "\"" + text + "\"")) << format << " " << text;
    }
  }
  // A format that only annotates takes any string; one beside a pattern is refused.
  EXPECT_TRUE(matches(schema(R"({"type": "string", "format": "uri"})"), "\"not a uri\""));
  EXPECT_THROW(schema(R"({"type": "string", "format": "date", "pattern": "^2"})"), Error);
  // Lengths beside a format hold with it.
  EXPECT_FALSE(matches(schema(R"({"type": "string", "format": "hostname", "maxLength": 3})"), "\"abcd\""));
  EXPECT_TRUE(matches(schema(R"({"type": "string", "format": "hostname", "maxLength": 3})"), "\"a.b\""));
}

TEST(JsonSchema, RandomWalksThroughFormatsEndInValidValues) {
  std::string alphabet;
  for (int c = 0x20; c < 0x7f; ++c) alphabet += static_cast<char>(c);
  std::mt19937 rng(5);
  for (const std::string format : {"date", "time", "date-time", "duration", "uuid", "ipv4", "ipv6", "hostname", "email"}) {
    const auto g = schema(R"({"type": "string", "format": ")" + format + "\"}");
    JsonMatcher matcher(g);
    for (int walk = 0; walk < 400; ++walk) {
      MatchState state = matcher.start();
      std::string written;
      // Whitespace may come before the value; no format allows a quote inside it.
      while (std::count(written.begin(), written.end(), '"') < 2) {
        const std::vector<std::pair<char, MatchState>> ways = ways_on(matcher, state, alphabet);
        ASSERT_FALSE(ways.empty()) << format << " stuck after " << written;
        // Past a few characters, lean towards the closing quote, so that walks end.
        size_t pick = rng() % ways.size();
        for (size_t k = 0; k < ways.size(); ++k) {
          if (ways[k].first == '"' && written.find('"') != std::string::npos && rng() % 4 == 0) pick = k;
        }
        written += ways[pick].first;
        state = ways[pick].second;
        ASSERT_LT(written.size(), 400u) << format;
      }
      EXPECT_TRUE(matcher.accepting(state)) << format << " " << written;
      const size_t open = written.find('"');
      EXPECT_TRUE(valid_format(format, written.substr(open + 1, written.size() - open - 2))) << format << " " << written;
    }
  }
}

TEST(JsonSchema, NumberBoundsAgreeWithAValidator) {
  struct Bounds {
    const char* schema;
    double low, high;
    bool low_open, high_open, integer;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Bounds> cases = {
      {R"({"type": "integer", "minimum": 0})", 0, inf, false, false, true},
      {R"({"type": "integer", "minimum": -5, "maximum": 120})", -5, 120, false, false, true},
      {R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})", 0, 10, true, true, true},
      {R"({"type": "integer", "minimum": 0.5, "maximum": 2.5})", 0.5, 2.5, false, false, true},
      {R"({"type": "integer", "minimum": 1000, "maximum": 1005})", 1000, 1005, false, false, true},
      {R"({"type": "integer", "minimum": -1000, "maximum": -995})", -1000, -995, false, false, true},
      {R"({"type": "number", "minimum": 0, "maximum": 1})", 0, 1, false, false, false},
      {R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1})", 0, 1, true, false, false},
      {R"({"type": "number", "minimum": -2.5, "exclusiveMaximum": 3.75})", -2.5, 3.75, false, true, false},
      {R"({"type": "number", "minimum": 0.15, "maximum": 0.16})", 0.15, 0.16, false, false, false},
      {R"({"type": "number", "minimum": 99.5, "maximum": 100.25})", 99.5, 100.25, false, false, false},
      {R"({"minimum": -1e-3, "maximum": -1e-4})", -1e-3, -1e-4, false, false, false},  // no type: a number
      {R"({"type": "number", "minimum": 1, "exclusiveMinimum": true, "maximum": 2, "exclusiveMaximum": true})", 1, 2,
       true, true, false},  // draft 4
      {R"({"type": "number", "minimum": 5, "exclusiveMinimum": 3})", 5, inf, false, false, false},  // the tighter
      {R"({"type": "number", "maximum": 1e20})", -inf, 1e20, false, false, false},
  };
  std::mt19937 rng(5);
  const auto random_text = [&]() {
    std::string t;
    if (rng() % 3 == 0) t += '-';
    const int shape = static_cast<int>(rng() % 6);
    if (shape == 0) return t + std::to_string(rng() % 130);
    if (shape == 1) return t + std::to_string(rng() % 1010) + "." + std::to_string(rng() % 1000);
    if (shape == 2) return t + "0." + std::string(rng() % 4, '0') + std::to_string(rng() % 300);
    if (shape == 3) return t + std::to_string(rng() % 3) + "." + std::to_string(rng() % 10) + std::string(rng() % 3, '0');
    if (shape == 4) return t + std::to_string(rng());
    const char* fixed[] = {"0", "-0", "1", "10", "100", "1000", "1005", "1006", "120", "121", "-5", "-6", "0.5", "2.5",
                           "0.15", "0.16", "0.155", "0.1600", "0.16000001", "99.5", "100.25", "100.250", "100.2501",
                           "3.75", "3.7499", "-2.5", "-2.50", "-2.5001", "0.001", "-0.001", "-0.0001", "-0.00010",
                           "1e2", "1.5e0", "01", "1.", "-", "00", "0.0", "-0.0", "1.0", "2.0", "3", "4", "5", "999",
                           "-995", "-1000", "-1001", "-994", "123456789012345", "1234567890123456", "0.1234567890123456"};
    return std::string(fixed[rng() % (sizeof(fixed) / sizeof(fixed[0]))]);
  };
  for (const Bounds& b : cases) {
    const auto g = schema(b.schema);
    for (int i = 0; i < 3000; ++i) {
      const std::string text = random_text();
      bool expected = ordered_json::accept(text) && text.find_first_of("eE") == std::string::npos;
      if (expected) {
        // at most 15 digits from the first that is not 0 (trailing zeros count)
        const size_t first = text.find_first_of("123456789");
        if (first != std::string::npos &&
            std::count_if(text.begin() + static_cast<long>(first), text.end(), [](char c) { return c != '.'; }) > 15) {
          expected = false;
        }
      }
      if (expected) {
        const ordered_json value = ordered_json::parse(text);
        const double x = value.get<double>();
        expected = (b.low_open ? x > b.low : x >= b.low) && (b.high_open ? x < b.high : x <= b.high) &&
                   (!b.integer || (value.is_number_integer() || text.find('.') == std::string::npos));
      }
      EXPECT_EQ(matches(g, text), expected) << b.schema << " " << text;
    }
  }
  // Zeros after "0." are not significant: 15 digits may follow them.
  EXPECT_TRUE(matches(schema(R"({"type": "number", "minimum": 0.123456789012345, "maximum": 0.123456789012345})"),
                      "0.123456789012345"));
  EXPECT_TRUE(matches(schema(R"({"type": "number", "minimum": 1e-15, "maximum": 2e-15})"), "0.0000000000000015"));
  EXPECT_TRUE(matches(schema(R"({"type": "number", "minimum": -1e-21, "maximum": -1e-21})"), "-0.000000000000000000001"));
  // Enum values outside the bounds beside them are left out.
  const auto e = schema(R"({"enum": [1, 5, 10, "x"], "minimum": 2, "maximum": 9})");
  EXPECT_FALSE(matches(e, "1"));
  EXPECT_TRUE(matches(e, "5"));
  EXPECT_FALSE(matches(e, "10"));
  EXPECT_TRUE(matches(e, "\"x\""));
}

// Every prefix a bounded number's matcher takes can still be finished inside the bounds
// (a depth-first search finds the ending), also where the bounds are narrow.
TEST(JsonSchema, BoundedNumbersNeverGetStuck) {
  const std::vector<std::string> schemas = {
      R"({"type": "number", "minimum": 0.15, "maximum": 0.16})",
      R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.001})",
      R"({"type": "number", "minimum": 123.456, "maximum": 123.456})",
      R"({"type": "integer", "minimum": 1000, "maximum": 1005})",
      R"({"type": "integer", "minimum": -999999999999999, "maximum": -999999999999990})",
      R"({"type": "number", "minimum": -7, "maximum": 12345678.5})",
      R"({"type": "number", "exclusiveMinimum": 99999999999999.5})",
      R"({"type": "number", "minimum": 0.123456789012345, "maximum": 0.123456789012346})",
      R"({"type": "number", "exclusiveMinimum": -1e-20, "exclusiveMaximum": 0})",
  };
  const std::string alphabet = "-0123456789.";
  for (const std::string& text : schemas) {
    const auto g = schema(text);
    JsonMatcher matcher(g);
    std::mt19937 rng(3);
    // Where every state taken can be finished, the search never backs off more than a
    // byte: a budget of calls ends it where some cannot.
    int budget = 0;
    std::function<bool(const MatchState&, int)> finishes = [&](const MatchState& state, int depth) {
      if (matcher.accepting(state)) return true;
      if (depth > kMaxNumberBytes || --budget < 0) return false;
      std::string order = alphabet;
      std::shuffle(order.begin(), order.end(), rng);
      for (const char c : order) {
        MatchState next;
        matcher.advance(state, static_cast<uint8_t>(c), next);
        if (!next.dead() && finishes(next, depth + 1)) return true;
      }
      return false;
    };
    for (int walk = 0; walk < 200; ++walk) {
      MatchState state = matcher.start();
      std::string written;
      for (int step = 0; step < kMaxNumberBytes; ++step) {
        budget = 2000;
        ASSERT_TRUE(finishes(state, step)) << text << " cannot finish after '" << written << "'";
        std::vector<std::pair<char, MatchState>> ways = ways_on(matcher, state, alphabet);
        if (ways.empty()) break;
        const size_t pick = rng() % ways.size();
        written += ways[pick].first;
        state = std::move(ways[pick].second);
      }
    }
  }
}

// A vocabulary of single bytes, JSON-ish pieces and UTF-8 fragments; the mask must be
// exactly the tokens that step through the matcher one by one, in every state met while
// writing a few documents.
// Integers with multipleOf against arithmetic, and generations that never get stuck: a digit
// is taken only where a multiple can still be written within the number's 32 bytes.
TEST(JsonSchema, MultipleOfIntegersAgreeWithArithmetic) {
  for (const int64_t k : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{10}, int64_t{25}, int64_t{1000},
                          int64_t{999983}, int64_t{2147483647}}) {
    const auto g = schema(R"({"type": "integer", "multipleOf": )" + std::to_string(k) + "}");
    for (int64_t x = -1200; x <= 1200; ++x) {
      EXPECT_EQ(matches(g, std::to_string(x)), x % k == 0) << k << " " << x;
    }
    for (const int64_t x : {k * 12345, k * 99991 + 1, k * 1000003, -k * 77, k * 4611686}) {
      EXPECT_EQ(matches(g, std::to_string(x)), x % k == 0) << k << " " << x;
    }
    EXPECT_TRUE(matches(g, "-0"));
    EXPECT_FALSE(matches(g, "00"));
    // Walks over digits always have a way on, and end at multiples.
    JsonMatcher matcher(g);
    std::mt19937 rng(static_cast<uint32_t>(k));
    for (int walk = 0; walk < 200; ++walk) {
      MatchState state = matcher.start();
      std::string written;
      for (int step = 0; step < 40 && !(matcher.accepting(state) && rng() % 3 == 0); ++step) {
        std::vector<std::pair<char, MatchState>> ways = ways_on(matcher, state, std::string("-0123456789"));
        if (ways.empty()) break;
        const size_t pick = rng() % ways.size();
        written += ways[pick].first;
        state = std::move(ways[pick].second);
      }
      ASSERT_TRUE(matcher.accepting(state)) << k << ": stuck after " << written;
      int64_t residue = 0;  // the digits' value modulo k (the text may have 31 digits)
      for (const char c : written) {
        if (c != '-') residue = (residue * 10 + (c - '0')) % k;
      }
      EXPECT_EQ(residue, 0) << k << ": " << written;
    }
  }
  // A number with multipleOf is written as an integer; enum values keep only multiples.
  const auto number = schema(R"({"type": "number", "multipleOf": 5})");
  EXPECT_TRUE(matches(number, "-15"));
  EXPECT_FALSE(matches(number, "15.0"));
  EXPECT_FALSE(matches(number, "1.5e1"));
  const auto listed = schema(R"({"enum": [3, 4, 6.0, 7.5, "x"], "multipleOf": 3})");
  EXPECT_TRUE(matches(listed, "3"));
  EXPECT_TRUE(matches(listed, "6.0"));
  EXPECT_TRUE(matches(listed, "\"x\""));
  EXPECT_FALSE(matches(listed, "4"));
  EXPECT_FALSE(matches(listed, "7.5"));
}

TEST(TokenMask, EqualsSteppingEveryTokenThroughTheMatcher) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* piece : {"\"", "\":", "\": \"", "\",", "\", \"", "{\"", "{\n", "\n}", "},", "}]", "[\"", "\"]", "true",
                            "false", "null", "nu", "12", "0.", "e-", "name", "na", "age", "tags", "ing", "é", "\xc3",
                            "\xa9\"", "\xa9x", "\xe2\x82", "\xac", "€", "  ", "\n  ", "\\n", "\\\"", "\\u00", "e9\"",
                            "hello world", "\"name\"", " \"", "\x01x", "\"\n", "1,", "23]", "red", "\"red\"", "gre",
                            "ab", "abc", "abcd", "abcde", "a\xc3\xa9", "\xa9" "b", "\xa9" "bc\"", "x\", \"", "\", \"p", "p1",
                            "\"p2\":", "ok\"}", "\"}"}) {
    tokens.emplace_back(piece);
  }
  tokens.emplace_back();  // not text
  const Vocabulary vocabulary(tokens);
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"true", "{\"name\": \"caf\xc3\xa9 \xe2\x82\xac\\u00e9\", \"n\": [1, 2.5, null, {\"x\": true}]}"},
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
          "color": {"enum": ["red", "green"]}}, "required": ["name"]})",
       "{\"name\": \"a\\\"b\xc3\xa9\", \"age\": 12, \"color\": \"green\"}"},
      {R"({"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}})", "{\"k\xc3\xa9y\": \"abc\"}"},
      {R"({"type": "string", "minLength": 1, "maxLength": 12})", "\"hello worl\xc3\xa9\""},
      // Several readings inside strings at once, with different rooms, then apart.
      {R"({"anyOf": [{"type": "object", "properties": {"name": {"type": "string", "maxLength": 2}, "p1": {"type": "integer"}},
                      "required": ["name", "p1"]},
                     {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "p2": {"type": "string"}},
                      "required": ["name", "p2"]},
                     {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": {"type": "string", "maxLength": 3}}]})",
       "{\"name\": \"a\xc3\xa9" "bc\", \"p2\": \"ok\"}"},
      {R"({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "string", "maxLength": 4}, {"type": "array", "items": {"type": "string", "maxLength": 2}}]})",
       "[\"\xc3\xa9" "b\", \"x\"]"},
      // Numbers with bounds: digits that would leave the range are masked.
      {R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120},
          "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "t": {"type": "number", "minimum": -12.5}},
          "required": ["age", "score", "t"]})",
       "{\"age\": 112, \"score\": 0.0125, \"t\": -12.50}"},
      // Patterns: bytes the automaton refuses are masked, escapes decoded first.
      {R"({"type": "object", "properties": {"p": {"type": "string", "pattern": "^\\d{3}-\\d{4}$"},
          "c": {"type": "string", "pattern": "^[a-z\u00e9]+\\n?$", "maxLength": 4}, "x": {"pattern": "\\u0001"}},
          "required": ["p", "c", "x"]})",
       "{\"p\": \"555-1234\", \"c\": \"ab\xc3\xa9\\n\", \"x\": \"\\u0001\\\"red\"}"},
      // A pattern with a minimum and no maximum: counts under it are decided per token.
      {R"({"type": "array", "items": {"type": "string", "pattern": "^[a-z\u00e9]+(?:ab)?$", "minLength": 4}})",
       "[\"ab\xc3\xa9" "abc\", \"abcd\", \"nameab\"]"},
  };
  const size_t words = (tokens.size() + 31) / 32;
  for (const auto& [schema_text, doc] : runs) {
    const auto grammar = schema(schema_text);
    JsonMatcher matcher(grammar);
    MatchState state = matcher.start();
    for (size_t n = 0; n <= doc.size(); ++n) {
      std::vector<uint32_t> mask(words);
      vocabulary.fill(matcher, state, mask);
      const int32_t differs = first_mask_difference(tokens, matcher, state, mask);
      ASSERT_EQ(differs, -1) << "after " << doc.substr(0, n) << " token '" << tokens[std::max(differs, 0)] << "'";
      if (n < doc.size()) {
        ASSERT_TRUE(matcher.advance_all(state, doc.substr(n, 1))) << doc.substr(0, n + 1);
      }
    }
    EXPECT_TRUE(matcher.accepting(state));
  }
}

// Pattern masks are kept for every thread and sequence: four threads walk answers of one
// grammar at once, twice (the second time every pattern mask comes from what is kept), and
// every mask must equal stepping each token through the matcher.
TEST(TokenMask, MasksKeptAcrossThreadsAgreeWithTheMatcher) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* piece : {"AB", "ABC-", "-12", "1234", "34\"", "@ex", "ample", ".org", ".org\"", "ab", "a b", " c,",
                            "\", \"", "{\"", "\":", "\": \""}) {
    tokens.emplace_back(piece);
  }
  const Vocabulary vocabulary(tokens);
  const auto grammar = schema(R"({"type": "object", "required": ["code", "email", "note"],
      "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                     "email": {"type": "string", "pattern": "^[a-z0-9._]{1,20}@[a-z]{2,12}\\.(com|org|net)$"},
                     "note": {"type": "string", "pattern": "^[A-Za-z ,.]{0,8}$", "minLength": 2}}})");
  const JsonMatcher matcher(grammar);
  const std::vector<std::string> answers = {
      R"({"code": "ABC-1234", "email": "ada@example.org", "note": "a b c,"})",
      R"({"code": "XYZ-0000", "email": "a.b_c@ex.net", "note": "ab"})",
      R"({"code": "QQQ-9876", "email": "z9@example.com", "note": "Hi, all."})",
      R"({"code": "ABD-1234", "email": "ada@examplf.org", "note": "  "})"};
  std::vector<int> disagreements(answers.size(), 0);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<std::thread> threads;
    for (size_t t = 0; t < answers.size(); ++t) {
      threads.emplace_back([&, t] {
        MatchState state = matcher.start();
        const std::string& doc = answers[t];
        for (size_t n = 0; n <= doc.size(); ++n) {
          std::vector<uint32_t> mask((tokens.size() + 31) / 32);
          vocabulary.fill(matcher, state, mask);
          disagreements[t] += first_mask_difference(tokens, matcher, state, mask) >= 0 ? 1 : 0;
          if (n < doc.size() && !matcher.advance_all(state, doc.substr(n, 1))) {
            disagreements[t] += 1000;
            return;
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (size_t t = 0; t < answers.size(); ++t) EXPECT_EQ(disagreements[t], 0) << answers[t];
}

// Requests with the same schema share one compiled grammar; a refusal is kept and thrown
// again, with its message; another schema compiles anew.
TEST(GrammarCache, OneGrammarForOneSchemaAndRefusalsKept) {
  int compiles = 0;
  auto compile = [&](const std::string& text) {
    return [&, text] {
      ++compiles;
      return compile_json_schema(nlohmann::ordered_json::parse(text));
    };
  };
  const std::string a = R"({"type": "string", "pattern": "^[a-z]{2}$", "x-test": "cache a"})";
  const auto first = cached_grammar("json_schema " + a, compile(a));
  const auto second = cached_grammar("json_schema " + a, compile(a));
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(compiles, 1);
  const std::string b = R"({"type": "string", "pattern": "^[a-z]{3}$", "x-test": "cache b"})";
  EXPECT_NE(cached_grammar("json_schema " + b, compile(b)).get(), first.get());
  EXPECT_EQ(compiles, 2);
  const std::string bad = R"({"type": "string", "pattern": "(a)\\1", "x-test": "cache refused"})";
  std::string message;
  for (int i = 0; i < 2; ++i) {
    try {
      cached_grammar("json_schema " + bad, compile(bad));
      ADD_FAILURE() << "a backreference was compiled";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
      if (i == 0) message = error.what();
      EXPECT_EQ(error.what(), message);
    }
  }
  EXPECT_EQ(compiles, 3) << "the refusal was compiled again";
  // kGrammarsKept others used since: the first is gone (compiled again), the last kept.
  std::string last;
  for (size_t i = 0; i < kGrammarsKept; ++i) {
    last = R"({"type": "string", "maxLength": )" + std::to_string(i + 1) + R"(, "x-test": "cache fill"})";
    cached_grammar("json_schema " + last, compile(last));
  }
  EXPECT_EQ(cached_grammars(), kGrammarsKept);
  const int before = compiles;
  cached_grammar("json_schema " + last, compile(last));
  EXPECT_EQ(compiles, before) << "the most recent was dropped";
  cached_grammar("json_schema " + a, compile(a));
  EXPECT_EQ(compiles, before + 1) << "the least recently used was kept past the cap";
}

// A state holds at most kMaxAlternatives stacks and drops the rest; the mask walks the
// stacks inside free strings apart from the others, and must still agree with stepping the
// whole state where together they would overflow (here a key that may be free, beside one
// on a declared name, branches into 64 arrays at "[" and crowds out the declared one's).
TEST(TokenMask, AgreesWithTheMatcherWhereAStateOverflows) {
  std::string arrays;
  for (int i = 0; i < kMaxAlternatives; ++i) arrays += std::string(i > 0 ? "," : "") + R"({"type":"array","items":{"type":"integer"}})";
  const auto grammar = schema(R"({"anyOf":[{"type":"object","additionalProperties":{"anyOf":[)" + arrays + R"(]}},
      {"type":"object","properties":{"xy":{"type":"array","items":{"type":"string"}}},"required":["xy"],
       "additionalProperties":false}]})");
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* piece : {"\":[", "\":[\"", "\": [", "\":[1", "y\":[", "\":"}) tokens.emplace_back(piece);
  const Vocabulary vocabulary(tokens);
  JsonMatcher matcher(grammar);
  for (const std::string prefix : {"{\"xy", "{\"x", "{\"xy\":", "{\"xy\":["}) {
    MatchState state = matcher.start();
    ASSERT_TRUE(matcher.advance_all(state, prefix)) << prefix;
    std::vector<uint32_t> mask((tokens.size() + 31) / 32);
    vocabulary.fill(matcher, state, mask);
    const int32_t differs = first_mask_difference(tokens, matcher, state, mask);
    EXPECT_EQ(differs, -1) << "after " << prefix << " token '" << tokens[std::max(differs, 0)] << "'";
  }
}

TEST(GrammarConstraint, ThinkingFirstThenTheTextThenItsEnd) {
  // Ids: the 256 bytes, then <think> 256, </think> 257, <end> 258 (not text).
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.resize(259);
  ConstraintOptions options;
  options.grammar = schema(R"({"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]})");
  options.vocabulary = std::make_shared<const Vocabulary>(tokens);
  options.end_ids = {258};
  options.think_open = 256;
  options.think_close = 257;
  GrammarConstraint constraint(options);
  std::vector<uint32_t> mask(9);
  auto allowed = [&](int32_t id) { return ((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) != 0; };
  ASSERT_TRUE(constraint.next_mask(mask));
  EXPECT_TRUE(allowed(256));
  EXPECT_TRUE(allowed('{'));
  EXPECT_TRUE(allowed(' '));
  EXPECT_FALSE(allowed('['));
  EXPECT_FALSE(allowed(258));
  constraint.accept(256);
  ASSERT_TRUE(constraint.next_mask(mask));  // thinking: free, but the answer may not end there
  EXPECT_TRUE(allowed('x'));
  EXPECT_TRUE(allowed('['));
  EXPECT_TRUE(allowed(257));
  EXPECT_FALSE(allowed(258));
  constraint.accept('x');
  constraint.accept(257);
  for (const char c : std::string("\n\n{\"a\": 1")) {
    ASSERT_TRUE(constraint.next_mask(mask));
    ASSERT_TRUE(allowed(static_cast<uint8_t>(c))) << c;
    EXPECT_FALSE(allowed(256));
    constraint.accept(static_cast<uint8_t>(c));
  }
  ASSERT_TRUE(constraint.next_mask(mask));
  EXPECT_FALSE(allowed(258));
  EXPECT_FALSE(allowed('2'));
  constraint.accept('}');
  ASSERT_TRUE(constraint.next_mask(mask));
  EXPECT_TRUE(allowed(258));
  EXPECT_TRUE(allowed('\n'));
  EXPECT_FALSE(allowed('{'));
  EXPECT_FALSE(constraint.ended());
  constraint.accept(258);
  EXPECT_TRUE(constraint.ended());
}

// A model with no end id: once the value is complete and no whitespace may follow, the text
// ends there; the id drawn then (from a mask that allows none) is no part of it.
TEST(GrammarConstraint, WithoutAnEndIdTheTextEndsWhereItIsComplete) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  ConstraintOptions options;
  options.grammar = schema(R"({"type": "integer", "minimum": 1, "maximum": 9})");
  options.vocabulary = std::make_shared<const Vocabulary>(tokens);
  GrammarConstraint constraint(options);
  std::vector<uint32_t> mask(8);
  auto any = [&] { return std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; }); };
  ASSERT_TRUE(constraint.next_mask(mask));
  constraint.accept('7');
  int spaces = 0;
  while (true) {
    ASSERT_TRUE(constraint.next_mask(mask));
    if (!any()) break;
    constraint.accept(' ');  // trailing whitespace, up to its limit
    ASSERT_LT(++spaces, 100);
    ASSERT_FALSE(constraint.ended());
  }
  EXPECT_GT(spaces, 0);
  constraint.accept('x');  // whatever the draw picked
  EXPECT_TRUE(constraint.ended());
  EXPECT_TRUE(constraint.dropped_last());
  EXPECT_FALSE(constraint.cut());
}

TEST(GrammarConstraint, ForcedCallsStartFromTheirOpeningAndMayRepeat) {
  // Ids: bytes, then <tool_call> 256, </tool_call> 257, <|im_end|> 258.
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.resize(259);
  ConstraintOptions options;
  options.grammar = schema(R"({"type": "object", "properties": {"name": {"const": "f"},
      "arguments": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
      "required": ["name", "arguments"]})");
  options.vocabulary = std::make_shared<const Vocabulary>(tokens);
  options.prefix = "{\"name\": \"";
  options.end_ids = {257};
  options.call_open = 256;
  options.final_ids = {258};
  GrammarConstraint constraint(options);
  std::vector<uint32_t> mask(9);
  auto allowed = [&](int32_t id) { return ((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) != 0; };
  for (const char c : std::string("f\", \"arguments\": {\"x\": 5}}\n")) {
    ASSERT_TRUE(constraint.next_mask(mask));
    ASSERT_TRUE(allowed(static_cast<uint8_t>(c))) << c;
    constraint.accept(static_cast<uint8_t>(c));
  }
  ASSERT_TRUE(constraint.next_mask(mask));
  EXPECT_TRUE(allowed(257));
  constraint.accept(257);
  ASSERT_TRUE(constraint.next_mask(mask));
  EXPECT_TRUE(allowed(256));
  EXPECT_TRUE(allowed(258));
  EXPECT_TRUE(allowed('\n'));
  EXPECT_FALSE(allowed('{'));
  constraint.accept('\n');
  constraint.accept(256);
  ASSERT_TRUE(constraint.next_mask(mask));  // a second call, written whole by the model
  EXPECT_TRUE(allowed('\n'));
  EXPECT_TRUE(allowed('{'));
  EXPECT_FALSE(allowed('f'));
  options.prefix = "{\"name\": \"g";
  EXPECT_THROW(GrammarConstraint{options}, Error);
}

}  // namespace
}  // namespace qwenrt::structured
