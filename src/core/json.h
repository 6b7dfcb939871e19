// The one JSON reader for everything qwenrt reads from outside: model files (config.json,
// generation_config.json, safetensors headers, index.json, tokenizer_config.json), chat
// messages and tools files, and request bodies. Every failure the JSON library can raise
// (syntax, numbers out of range such as 1e400, invalid UTF-8, nesting too deep, duplicate
// keys where they are refused) becomes one qwenrt::Error of one line that names the input
// ("config.json: ...", "request body: ..."); no library exception escapes.
//
// Objects are built in linear time: ordered objects (which keep key order, as Python's
// json.loads does) find duplicate keys through a hash table instead of the library's
// linear search, which made wide objects quadratic.
//
//   nlohmann::json config = qwenrt::parse_json(text, "config.json");
//   int64_t n = qwenrt::json_int(config, "hidden_size", "config.json").value_or(0);
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace qwenrt {

struct JsonParseOptions {
  // Category of the Error thrown: kInvalidModel for model files, kInvalidArgument for
  // request bodies and files named on the command line.
  ErrorCategory category = ErrorCategory::kInvalidModel;
  // Containers nested deeper than this are refused (Python's json.loads stops near 1000;
  // code that walks parsed values recursively relies on this bound).
  int max_depth = 512;
  // Refuse a key that occurs twice in the top-level object (tensor names in a safetensors
  // header). Elsewhere the last value wins at the first key's place, as in Python.
  bool reject_top_level_duplicate_keys = false;
  // Keep integers that no 64-bit signed integer holds (past ±2^63, which the library would
  // read as unsigned or as a double) exactly, as Python's json.loads does, up to the ~308
  // digits a double reaches (longer ones are a number overflow, as without this): each
  // becomes a binary value of subtype kJsonBigIntegerSubtype holding its decimal digits.
  // Only for values whose one reader knows them: a chat template's input (tool calls'
  // arguments in requests, the template command's files).
  bool exact_big_integers = false;
};

// The subtype of a binary value that stands for an integer's decimal text (above).
constexpr std::uint8_t kJsonBigIntegerSubtype = 0x42;

// Counts of the work a parse did, for tests of its complexity.
struct JsonParseStats {
  size_t keys = 0;             // object keys read
  size_t key_comparisons = 0;  // key equality tests made to find duplicates
};

nlohmann::json parse_json(std::string_view text, const std::string& name,
                          const JsonParseOptions& options = {}, JsonParseStats* stats = nullptr);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& name,
                                          const JsonParseOptions& options = {},
                                          JsonParseStats* stats = nullptr);
// Throws Error(category) naming `name` and the offset where `text` holds a NUL byte: the JSON
// library takes one for the end of the text (what follows would be ignored), and JSON has
// none outside an escape.
void refuse_nul_bytes(std::string_view text, const std::string& name, ErrorCategory category);

// Reads and parses a file; messages name the file's path.
nlohmann::json read_json_file(const std::filesystem::path& path, const JsonParseOptions& options = {});
nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path,
                                              const JsonParseOptions& options = {});

// A JSON library error as text, without the library's "[json.exception...]" prefix and cut
// to one short line (the library quotes the last token read, which can be long).
std::string json_error_text(const std::exception& error);
// `text` quoted for an error message: control characters escaped, cut to `max_bytes`.
std::string quote_for_message(std::string_view text, size_t max_bytes = 80);

// Appends `byte` as \xNN (two lowercase hex digits): a byte shown where it cannot be itself.
void append_byte_escape(std::string& out, unsigned char byte);

// ---- typed getters ----
// `where` names the object in messages ("config.json", "request body", "messages[2]");
// errors read "<where>: '<key>' must be ...". A key that is absent or null gives nullopt.
// They work on nlohmann::json and nlohmann::ordered_json alike.

[[noreturn]] void throw_json_field_error(const std::string& where, std::string_view key,
                                         const std::string& problem, ErrorCategory category);

template <typename Json>
const Json* json_find(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

template <typename Json>
std::optional<int64_t> json_int(const Json& object, std::string_view key, const std::string& where,
                                int64_t min = INT64_MIN, int64_t max = INT64_MAX,
                                ErrorCategory category = ErrorCategory::kInvalidModel) {
  const Json* value = json_find(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number_integer()) throw_json_field_error(where, key, "must be an integer", category);
  const bool too_big = value->is_number_unsigned() &&
                       value->template get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t number = too_big ? INT64_MAX : value->template get<int64_t>();
  if (too_big || number < min || number > max) {
    throw_json_field_error(where, key,
                           "is out of range (" + std::to_string(min) + " to " + std::to_string(max) + ")",
                           category);
  }
  return number;
}

template <typename Json>
std::optional<double> json_number(const Json& object, std::string_view key, const std::string& where,
                                  ErrorCategory category = ErrorCategory::kInvalidModel) {
  const Json* value = json_find(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) throw_json_field_error(where, key, "must be a number", category);
  return value->template get<double>();  // finite: the parser refuses overflowing numbers
}

template <typename Json>
std::optional<bool> json_bool(const Json& object, std::string_view key, const std::string& where,
                              ErrorCategory category = ErrorCategory::kInvalidModel) {
  const Json* value = json_find(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) throw_json_field_error(where, key, "must be true or false", category);
  return value->template get<bool>();
}

template <typename Json>
std::optional<std::string> json_string(const Json& object, std::string_view key, const std::string& where,
                                       ErrorCategory category = ErrorCategory::kInvalidModel) {
  const Json* value = json_find(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) throw_json_field_error(where, key, "must be a string", category);
  return value->template get<std::string>();
}

}  // namespace qwenrt
