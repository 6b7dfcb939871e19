// Structured output: a JSON Schema from a client (part 1) compiled to a grammar, then a
// document (part 2) fed to its matcher byte by byte. At every prefix the vocabulary mask is
// checked against the tokens stepped through the matcher one by one: a mask that differs is
// a find (abort), as is anything but a clean refusal of the schema (qwenrt::Error).
#include <cstdio>

#include "fuzz_util.h"
#include "structured/json_grammar.h"
#include "structured/token_mask.h"

namespace {

using namespace qwenrt::structured;

// Every byte alone, and pieces that cross the grammar's boundaries (quotes with what
// follows them, escapes, UTF-8 fragments, whitespace runs, words of several characters).
std::vector<std::string> tokens() {
  std::vector<std::string> out;
  for (int b = 0; b < 256; ++b) out.emplace_back(1, static_cast<char>(b));
  for (const char* piece :
       {"\"", "\":", "\": ", "\": \"", "\",", "\", \"", "{\"", "{\n", "\n}", "},", "}]", "[\"", "\"]", "\"}", "true",
        "false", "null", "nu", "12", "0.", "1e", "e-", "-0", "name", "na", "age", "id", "ing", "abc", "abcde",
        "hello world", "\xc3\xa9", "\xc3", "\xa9\"", "\xa9x", "\xe2\x82", "\xac", "\xe2\x82\xac", "\xf0\x9f",
        "\x98\x80", "  ", "    ", "\n  ", "\n\t", "\\n", "\\\"", "\\u00", "\\ud83d", "\\ude00", "e9\"", "\"name\"",
        " \"", "\"\n", "1,", "23]", "\x01x", "a\"b", "x\\", "0.0", "99", "100", "-1", ".5", "5}"}) {
    out.emplace_back(piece);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> vocabulary_tokens = tokens();
  static const Vocabulary vocabulary(vocabulary_tokens);
  const std::vector<std::string> parts = qwenrt::fuzz::split_parts(data, size, 2);
  std::shared_ptr<const Grammar> grammar;
  try {
    const auto schema = nlohmann::ordered_json::parse(parts[0], nullptr, false);
    if (schema.is_discarded()) return 0;
    grammar = std::make_shared<const Grammar>(compile_json_schema(schema));
  } catch (const qwenrt::Error&) {
    return 0;
  }
  const JsonMatcher matcher(grammar);
  MatchState state = matcher.start();
  std::vector<uint32_t> mask((vocabulary_tokens.size() + 31) / 32);
  const std::string& document = parts[1];
  for (size_t n = 0; n <= document.size() && n < 64; ++n) {
    vocabulary.fill(matcher, state, mask);
    for (size_t id = 0; id < vocabulary_tokens.size(); ++id) {
      MatchState probe = state;
      const bool expected = matcher.advance_all(probe, vocabulary_tokens[id]);
      const bool got = ((mask[id / 32] >> (id % 32)) & 1) != 0;
      if (got != expected) {
        std::fprintf(stderr, "mask differs after %zu bytes at token %zu: %d, stepping says %d\n", n, id, got, expected);
        std::abort();
      }
    }
    (void)matcher.accepting(state);
    if (n == document.size() || !matcher.advance_all(state, document.substr(n, 1))) break;
  }
  return 0;
}
