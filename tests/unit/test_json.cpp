// The shared JSON reader (core/json.h): whatever the JSON library objects to (syntax,
// numbers beyond a double such as 1e400, invalid UTF-8, nesting, duplicate tensor names)
// reaches the caller as one qwenrt::Error of one line that names the input; objects are
// built in linear time.
#include <gtest/gtest.h>

#include "core/json.h"
#include "test_util.h"

namespace qwenrt {
namespace {

using test::expect_error;

// The message of the qwenrt::Error `body` throws (a failure when it throws something else).
template <typename Body>
std::string error_message(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected qwenrt::Error, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected qwenrt::Error, nothing was thrown";
  return {};
}

TEST(Json, OutOfRangeNumbersNameTheInput) {
  for (const char* text : {"{\"x\":1e400}", "3E333", "[-1e999]", "{\"a\":{\"b\":[1,2,1.5e308000]}}"}) {
    const std::string message = error_message([&] { parse_json(text, "thing.json"); });
    EXPECT_EQ(message.rfind("thing.json: ", 0), 0u) << message;
    EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
    EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
    const std::string ordered = error_message([&] { parse_ordered_json(text, "body"); });
    EXPECT_EQ(ordered.rfind("body: ", 0), 0u) << ordered;
  }
}

// With exact_big_integers, integers past ±2^63 keep their digits (as a binary value of the
// big-integer subtype); others, and every number without the option, are as before.
TEST(Json, BigIntegersKeptExactlyWhereAsked) {
  JsonParseOptions options;
  options.exact_big_integers = true;
  const auto parsed = parse_ordered_json(
      R"({"a": 1180591620717411303424, "b": 18446744073709551615, "c": -9223372036854775809, "d": 9223372036854775807,
          "e": -9223372036854775808, "f": 1.5, "g": 1e30, "h": -0})",
      "args", options);
  const auto digits = [&](const char* key) {
    const auto& value = parsed.at(key);
    EXPECT_TRUE(value.is_binary()) << key;
    if (!value.is_binary()) return std::string();
    EXPECT_EQ(value.get_binary().subtype(), kJsonBigIntegerSubtype);
    return std::string(value.get_binary().begin(), value.get_binary().end());
  };
  EXPECT_EQ(digits("a"), "1180591620717411303424");
  EXPECT_EQ(digits("b"), "18446744073709551615");
  EXPECT_EQ(digits("c"), "-9223372036854775809");
  EXPECT_EQ(parsed.at("d").get<int64_t>(), INT64_MAX);
  EXPECT_EQ(parsed.at("e").get<int64_t>(), INT64_MIN);
  EXPECT_TRUE(parsed.at("f").is_number_float());
  EXPECT_TRUE(parsed.at("g").is_number_float());
  EXPECT_TRUE(parsed.at("h").is_number_integer());
  const auto plain = parse_ordered_json(R"([1180591620717411303424, 18446744073709551615])", "body");
  EXPECT_TRUE(plain[0].is_number_float());
  EXPECT_TRUE(plain[1].is_number_unsigned());
}

TEST(Json, ErrorsAreOneShortLine) {
  // The library quotes the last token it read; a long token with newlines stays one line.
  const std::string text = "{\"x\": \"" + std::string(5000, 'a') + "\n\"}";
  const std::string message = error_message([&] { parse_json(text, "f.json"); });
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_LT(message.size(), 400u);
  EXPECT_NE(message.find("f.json: not valid JSON"), std::string::npos) << message;
  const std::string bad_utf8 = error_message([] { parse_json("[\"\xff\"]", "u.json"); });
  EXPECT_NE(bad_utf8.find("u.json: not valid JSON"), std::string::npos) << bad_utf8;
}

TEST(Json, ANulByteIsNoEndOfTheText) {
  // The library stops at a NUL: what follows it would be ignored, garbage included.
  const std::string text = std::string("{\"a\": 1}") + '\0' + "{{{ not json";
  const std::string message = error_message([&] { parse_json(text, "n.json"); });
  EXPECT_NE(message.find("n.json: not valid JSON: a NUL byte at offset 8"), std::string::npos) << message;
  EXPECT_NE(error_message([&] { parse_ordered_json(text, "body"); }).find("NUL"), std::string::npos);
  EXPECT_EQ(parse_json("{\"a\": \"\\u0000\"}", "escaped.json")["a"].get<std::string>(), std::string(1, '\0'));
}

TEST(Json, CategoryAndDepthAreOptions) {
  JsonParseOptions options;
  options.category = ErrorCategory::kInvalidArgument;
  options.max_depth = 4;
  expect_error([&] { parse_json("[[[[[1]]]]]", "request body", options); }, ErrorCategory::kInvalidArgument,
               {"request body", "nested deeper than 4"});
  EXPECT_NO_THROW(parse_json("[[[[1]]]]", "request body", options));
  // The default depth refuses what would make recursive consumers overflow the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_error([&] { parse_ordered_json(deep, "m.json"); }, ErrorCategory::kInvalidModel,
               {"m.json", "nested deeper than 512"});
}

TEST(Json, DuplicateKeysKeepPythonsOrderAndLastValue) {
  // json.loads('{"a":1,"b":2,"a":3}') == {"a": 3, "b": 2}, keys in first-seen order.
  const auto ordered = parse_ordered_json("{\"a\":1,\"b\":2,\"a\":3}", "x");
  EXPECT_EQ(ordered.dump(), "{\"a\":3,\"b\":2}");
  EXPECT_EQ(parse_json("{\"a\":1,\"b\":2,\"a\":3}", "x").dump(), "{\"a\":3,\"b\":2}");
  JsonParseOptions strict;
  strict.reject_top_level_duplicate_keys = true;
  expect_error([&] { parse_json("{\"w\":1,\"w\":2}", "h", strict); }, ErrorCategory::kInvalidModel,
               {"h: duplicate key 'w'"});
  EXPECT_NO_THROW(parse_json("{\"m\":{\"w\":1,\"w\":2}}", "h", strict));
}

TEST(Json, WideObjectsParseInLinearComparisons) {
  // F5: nlohmann's ordered object searches its keys linearly on every insert, n^2/2 key
  // comparisons for n keys (20k keys took 0.67 s). Count comparisons, not seconds.
  auto comparisons = [](size_t keys, bool duplicate_every_key) {
    std::string text = "{";
    for (size_t i = 0; i < keys; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
    if (duplicate_every_key) {
      for (size_t i = 0; i < keys; ++i) text += ",\"k" + std::to_string(i) + "\":0";
    }
    text += "}";
    JsonParseStats stats;
    const auto parsed = parse_ordered_json(text, "wide.json", {}, &stats);
    EXPECT_EQ(parsed.size(), keys);
    EXPECT_EQ(stats.keys, keys * (duplicate_every_key ? 2 : 1));
    return stats.key_comparisons;
  };
  const size_t small = comparisons(5000, false);
  const size_t large = comparisons(20000, false);
  EXPECT_LT(large, 20000u * 4) << "comparisons per key must not grow with the width";
  EXPECT_LT(static_cast<double>(large) / static_cast<double>(small), 4.0 * 1.5);
  EXPECT_LT(comparisons(20000, true), 40000u * 4);
}

TEST(Json, TypedGettersNameTheField) {
  const auto body = parse_json("{\"n\": 3, \"big\": 18446744073709551615, \"f\": 0.5, \"s\": \"x\", \"b\": true, \"z\": null}",
                               "request body");
  EXPECT_EQ(json_int(body, "n", "request body").value(), 3);
  EXPECT_FALSE(json_int(body, "z", "request body").has_value());
  EXPECT_FALSE(json_int(body, "missing", "request body").has_value());
  EXPECT_DOUBLE_EQ(json_number(body, "f", "request body").value(), 0.5);
  EXPECT_EQ(json_string(body, "s", "request body").value(), "x");
  EXPECT_TRUE(json_bool(body, "b", "request body").value());
  expect_error([&] { json_int(body, "big", "request body", 0, 100, ErrorCategory::kInvalidArgument); },
               ErrorCategory::kInvalidArgument, {"request body: 'big' is out of range (0 to 100)"});
  expect_error([&] { json_int(body, "n", "request body", 5, 10); }, ErrorCategory::kInvalidModel,
               {"'n' is out of range"});
  expect_error([&] { json_int(body, "f", "request body"); }, ErrorCategory::kInvalidModel,
               {"'f' must be an integer"});
  expect_error([&] { json_string(body, "n", "messages[2]"); }, ErrorCategory::kInvalidModel,
               {"messages[2]: 'n' must be a string"});
  expect_error([&] { json_bool(body, "s", "w"); }, ErrorCategory::kInvalidModel, {"'s' must be true or false"});
}

}  // namespace
}  // namespace qwenrt
