#include "server/api.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "core/error.h"
#include "core/json.h"
#include "core/random_bits.h"
#include "engine/sampler.h"
#include "engine/sampling_ranges.h"
#include "model/config.h"
#include "server/output_parser.h"
#include "structured/grammar_cache.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace qwenrt::server {

// Request bodies keep their keys' order (tool schemas reach the chat template as written,
// as transformers renders them).
using json = nlohmann::ordered_json;

std::string error_body(const ApiError& error) {
  json body = {{"error",
                {{"message", error.message},
                 {"type", error.type},
                 {"param", error.param.empty() ? json(nullptr) : json(error.param)},
                 {"code", error.code.empty() ? json(nullptr) : json(error.code)}}}};
  // Messages may quote the request (a JSON parse error cut inside a UTF-8 sequence): such
  // bytes become U+FFFD rather than a failed answer.
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

uint64_t process_unique_bits() {
  static const uint64_t salt = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  return splitmix64(salt ^ splitmix64(counter.fetch_add(1)));
}

std::string new_id(const char* prefix) {
  char text[48];
  std::snprintf(text, sizeof(text), "%s-%016llx", prefix, static_cast<unsigned long long>(process_unique_bits()));
  return text;
}

ApiError invalid_request(std::string message, std::string param) {
  return ApiError(400, "invalid_request_error", std::move(message), std::move(param));
}

ApiError model_not_found(const std::string& asked, const RequestLimits& limits) {
  return ApiError(404, "invalid_request_error",
                  "the model '" + asked + "' does not exist; this server serves '" + limits.served_model_name + "'",
                  "model", "model_not_found");
}

namespace {

// A chat request where the server has no template: why (none in the folder, or the folder's
// failed to load), what gives one, and what to do instead.
ApiError no_chat_template(const ModelText& model, const std::string& instead = "use /v1/completions") {
  // The loader's message stays in the server's log: it names the server's files.
  const std::string why = model.chat_template_failed
                              ? "this model's chat template failed to load (the server's log says why)"
                              : "this model has no chat template";
  return invalid_request(why + "; the server takes one with --chat-template FILE: " + instead, "messages");
}

// The value of the four hex digits at text[at], or -1.
int hex4(std::string_view text, size_t at) {
  if (at + 4 > text.size()) return -1;
  int value = 0;
  for (size_t i = at; i < at + 4; ++i) {
    const char c = text[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

std::optional<std::string> lone_surrogates_replaced(std::string_view text) {
  std::optional<std::string> out;
  size_t copied = 0;  // text before this is in *out
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_string || c != '\\') {
      if (c == '"') in_string = !in_string;
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] != 'u') {  // \" \\ \n ...: the escaped byte is skipped
      ++i;
      continue;
    }
    const int unit = hex4(text, i + 2);
    if (unit < 0xD800 || unit > 0xDFFF) {  // not a surrogate (or not hex: the parser says so)
      if (unit >= 0) i += 5;
      continue;
    }
    if (unit <= 0xDBFF && i + 7 < text.size() && text[i + 6] == '\\' && text[i + 7] == 'u') {
      const int low = hex4(text, i + 8);
      if (low >= 0xDC00 && low <= 0xDFFF) {  // a pair: one character
        i += 11;
        continue;
      }
    }
    if (!out) out.emplace();
    out->append(text.substr(copied, i - copied)).append("\\ufffd");
    copied = i + 6;
    i += 5;
  }
  if (out) out->append(text.substr(copied));
  return out;
}

json parse_json_body(std::string_view body) {
  if (tok::utf8_valid_prefix(body) != body.size()) throw invalid_request("the request body is not valid UTF-8");
  // Half of a surrogate pair escaped alone ("\ud83d"), as JavaScript's JSON.stringify writes a
  // string cut inside an emoji (its strings are UTF-16): U+FFFD, as its UTF-8 encoder makes it.
  const std::optional<std::string> mended = lone_surrogates_replaced(body);
  if (mended) body = *mended;
  json parsed;
  try {
    // The shared reader: every library failure (syntax, 1e400, nesting) as one line.
    parsed = parse_ordered_json(body, "request body", JsonParseOptions{ErrorCategory::kInvalidArgument});
  } catch (const Error& error) {
    // The reader's message names the text ("request body: ") and often says "not valid
    // JSON" itself: said once.
    std::string what = error.what();
    for (const std::string prefix : {"request body: ", "not valid JSON: ", "not valid JSON"}) {
      if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
    }
    throw invalid_request("the request body is not valid JSON" + (what.empty() ? "" : ": " + what));
  }
  if (!parsed.is_object()) throw invalid_request("the request body must be a JSON object");
  return parsed;
}

namespace {

// vLLM's stop_token_ids: ids a request may name (each is looked for in every drawn token).
constexpr int kMaxStopTokenIds = 64;

// True when `object` has the string member `name` equal to `expected` (a member of another
// type is not an error here: the caller's message names the shape it wants).
bool member_is(const json& object, const char* name, const char* expected) {
  const auto it = object.find(name);
  return it != object.end() && it->is_string() && it->get_ref<const std::string&>() == expected;
}

// A field that is present and not null.
const json* field(const json& body, const char* name) {
  auto found = body.find(name);
  if (found == body.end() || found->is_null()) return nullptr;
  return &*found;
}

// A number field in `range` (engine/sampling_ranges.h); `fallback` when absent or null.
double number_field(const json& body, const char* name, double fallback, const ValueRange& range) {
  const json* value = field(body, name);
  if (value == nullptr) return fallback;
  if (!value->is_number()) throw invalid_request(std::string("'") + name + "' must be a number", name);
  const double number = value->get<double>();
  // The sampler takes floats: a value the float cannot hold (1e300, or 1e-300 against an
  // open bound at 0) is out of range here, by name, not later.
  const float narrowed = static_cast<float>(number);
  if (std::isfinite(number) && !std::isfinite(narrowed)) {
    throw invalid_request(std::string("'") + name + "' must be " + range.text() + " and within a 32-bit float (got " +
                              value->dump() + ")",
                          name);
  }
  if (!range.contains(number)) {
    throw invalid_request(std::string("'") + name + "' must be " + range.text() + " (got " + value->dump() + ")", name);
  }
  if (range.low_open && narrowed == static_cast<float>(range.low)) {  // 1e-300 against (0, 1]: 0 as a float
    throw invalid_request(std::string("'") + name + "' must be " + range.text() +
                              " and not round to its open end in a 32-bit float (got " + value->dump() + ")",
                          name);
  }
  return number;
}

// A JSON number that is a whole number: an integer, or a float with no fraction (5.0, as a
// client computing max_tokens = budget * 0.5 sends it; JSON has one number type). Floats
// past int64 saturate. False for anything else.
bool whole_number(const json& value, int64_t& number) {
  if (value.is_number_integer()) {
    number = value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                 ? INT64_MAX
                 : value.get<int64_t>();
    return true;
  }
  if (!value.is_number_float()) return false;
  const double x = value.get<double>();
  if (!std::isfinite(x) || x != std::trunc(x)) return false;
  number = x >= 9.2e18 ? INT64_MAX : x <= -9.2e18 ? INT64_MIN : static_cast<int64_t>(x);
  return true;
}

int64_t integer_field(const json& body, const char* name, int64_t fallback, int64_t low, int64_t high) {
  const json* value = field(body, name);
  if (value == nullptr) return fallback;
  int64_t number = 0;
  if (!whole_number(*value, number)) throw invalid_request(std::string("'") + name + "' must be an integer", name);
  if (number < low || number > high) {
    throw invalid_request(std::string("'") + name + "' must be between " + std::to_string(low) + " and " +
                              std::to_string(high) + " (got " + value->dump() + ")",
                          name);
  }
  return number;
}

// `within` names the object holding the field, for the error's param ("stream_options.").
bool bool_field(const json& body, const char* name, bool fallback, const std::string& within = "") {
  const json* value = field(body, name);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) throw invalid_request("'" + within + name + "' must be a boolean", within + name);
  return value->get<bool>();
}

// A seed: any 64-bit integer, signed or not; a negative one is its two's complement (-1 is
// 18446744073709551615), the same draws as `generate --seed`. Nothing past that range is
// clamped into it (two seeds would draw alike); a seed written as a float must be exact there.
uint64_t seed_field(const json& seed) {
  const auto refuse = [&] {
    throw invalid_request("'seed' must be an integer from -9223372036854775808 to 18446744073709551615 (got " +
                              seed.dump() + ")",
                          "seed");
  };
  if (seed.is_number_unsigned()) return seed.get<uint64_t>();
  if (seed.is_number_integer()) return static_cast<uint64_t>(seed.get<int64_t>());
  if (!seed.is_number_float()) refuse();
  // Beyond 2^53 a double holds no longer every integer: an integer past 64 bits reaches here
  // rounded, and would be taken for another.
  constexpr double kExact = 9007199254740992.0;  // 2^53
  const double x = seed.get<double>();
  if (!std::isfinite(x) || x != std::trunc(x) || std::fabs(x) > kExact) refuse();
  return x < 0 ? static_cast<uint64_t>(static_cast<int64_t>(x)) : static_cast<uint64_t>(x);
}

// Fields of the OpenAI API this server knows but does not implement: refused by name
// rather than silently ignored (they would change the answer).
void refuse_unsupported(const json& body) {
  auto refuse = [](const std::string& name, const std::string& why) {
    throw ApiError(400, "invalid_request_error", "'" + name + "' is not supported by this server" + why, name,
                   "unsupported_parameter");
  };
  int64_t best_of = 0;
  if (const json* v = field(body, "best_of"); v != nullptr && !whole_number(*v, best_of)) {
    throw invalid_request("'best_of' must be an integer", "best_of");
  } else if (v != nullptr && best_of != 1) {
    refuse("best_of", " (only 1)");
  }
  for (const char* name : {"functions", "function_call", "audio", "prediction", "guided_json", "guided_regex",
                           "guided_choice", "guided_grammar", "structured_outputs", "allowed_token_ids", "bad_words"}) {
    if (field(body, name) != nullptr) refuse(name, "");
  }
  if (const json* v = field(body, "use_beam_search"); v != nullptr && *v != json(false)) refuse("use_beam_search", "");
  if (field(body, "prompt_logprobs") != nullptr) {
    refuse("prompt_logprobs", " (/v1/completions with echo and logprobs lists a prompt's log-probabilities)");
  }
  if (const json* v = field(body, "modalities"); v != nullptr && *v != json::array({"text"})) refuse("modalities", "");
}

// logit_bias: {"token id": bias in [-100, 100]}, as OpenAI takes it; the bias is added to
// the token's logit before every draw (-100 all but bans it, 100 all but forces it).
std::vector<TokenBias> parse_logit_bias(const json& body, int vocab_size) {
  std::vector<TokenBias> out;
  const json* given = field(body, "logit_bias");
  if (given == nullptr) return out;
  if (!given->is_object()) throw invalid_request("'logit_bias' must be an object of token ids and biases", "logit_bias");
  if (given->size() > static_cast<size_t>(kMaxLogitBiasPerRow)) {
    throw invalid_request("'logit_bias' has " + std::to_string(given->size()) + " entries; at most " +
                              std::to_string(kMaxLogitBiasPerRow) + " are supported",
                          "logit_bias");
  }
  for (const auto& [key, value] : given->items()) {
    const bool digits = !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
    const int64_t id = digits ? std::stoll(key) : -1;
    if (id < 0 || id >= vocab_size) {
      throw invalid_request("'logit_bias' keys must be token ids in [0, " + std::to_string(vocab_size) + ") (got \"" +
                                key + "\")",
                            "logit_bias");
    }
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100)) {
      throw invalid_request("'logit_bias' values must be numbers in [-100, 100] (got " + value.dump() + " for " + key + ")",
                            "logit_bias");
    }
    if (std::any_of(out.begin(), out.end(), [&](const TokenBias& entry) { return entry.id == id; })) {
      throw invalid_request("'logit_bias' names token " + std::to_string(id) + " twice", "logit_bias");
    }
    out.push_back(TokenBias{static_cast<int32_t>(id), static_cast<float>(value.get<double>())});
  }
  return out;
}

std::string check_model(const json& body, const RequestLimits& limits) {
  const json* model = field(body, "model");
  if (model == nullptr) return limits.served_model_name;
  if (!model->is_string()) throw invalid_request("'model' must be a string", "model");
  if (model->get<std::string>() != limits.served_model_name) throw model_not_found(model->get<std::string>(), limits);
  return limits.served_model_name;
}

// vLLM's truncate_prompt_tokens: each prompt keeps its last k tokens (-1: as many as the
// context holds, which leaves no room for an answer, as in vLLM). The prompt as the client
// gave it or the template rendered it: what this server adds around it (fill-in-the-middle's
// tokens and suffix, a forced tool call's opening) comes after and is never cut. The checks
// against the context come after too. An echo of a prompt so cut is its tokens' text.
void truncate_prompts(const json& body, const RequestLimits& limits, GenerationRequest& out) {
  const json* given = field(body, "truncate_prompt_tokens");
  if (given == nullptr) return;
  int64_t keep = 0;
  if (!whole_number(*given, keep) || (keep < 1 && keep != -1)) {
    throw invalid_request("'truncate_prompt_tokens' must be -1 (the context's length) or a count of at least 1 (got " +
                              given->dump() + ")",
                          "truncate_prompt_tokens");
  }
  if (keep > limits.max_context) {
    throw invalid_request("'truncate_prompt_tokens' is " + std::to_string(keep) + ", more than the context limit of " +
                              std::to_string(limits.max_context) + " tokens",
                          "truncate_prompt_tokens");
  }
  const size_t kept = static_cast<size_t>(keep == -1 ? limits.max_context : keep);
  for (int p = 0; p < out.prompt_count(); ++p) {
    std::vector<int32_t>& prompt = p == 0 ? out.prompt : out.more_prompts[static_cast<size_t>(p - 1)];
    if (prompt.size() <= kept) continue;
    prompt.erase(prompt.begin(), prompt.end() - static_cast<std::ptrdiff_t>(kept));
    if (static_cast<size_t>(p) < out.prompt_texts.size()) out.prompt_texts[static_cast<size_t>(p)].reset();
  }
}

// reasoning_effort (OpenAI's, for models that reason): Qwen3 reasons or does not
// (`enable_thinking`), with no graded effort, so "none" turns the reasoning off and every
// other level leaves it on. Contradicting chat_template_kwargs.enable_thinking is an error;
// a model without reasoning has nothing to turn off, and its template ignores the switch.
void parse_reasoning_effort(const json& body, nlohmann::ordered_json& extra) {
  const json* effort = field(body, "reasoning_effort");
  if (effort == nullptr || effort->is_null()) return;
  static constexpr std::array<std::string_view, 6> kLevels = {"none", "minimal", "low", "medium", "high", "xhigh"};
  if (!effort->is_string() ||
      std::find(kLevels.begin(), kLevels.end(), effort->get<std::string>()) == kLevels.end()) {
    throw invalid_request("'reasoning_effort' must be one of \"none\", \"minimal\", \"low\", \"medium\", \"high\", "
                          "\"xhigh\" (got " + effort->dump() + ")",
                          "reasoning_effort");
  }
  const bool thinking = effort->get<std::string>() != "none";
  if (const auto it = extra.find("enable_thinking"); it != extra.end() && it->is_boolean() && it->get<bool>() != thinking) {
    throw invalid_request("'reasoning_effort' " + effort->dump() + " contradicts 'chat_template_kwargs.enable_thinking' " +
                              it->dump(),
                          "reasoning_effort");
  }
  extra["enable_thinking"] = thinking;
}

// A token id from a request: an integer in the vocabulary, else a 400 naming `param`
// (`not_an_id`: the message for what is no integer).
int32_t vocabulary_id(const json& id, const RequestLimits& limits, const char* param, const char* not_an_id) {
  int64_t value = 0;
  if (!whole_number(id, value)) throw invalid_request(not_an_id, param);  // 72.0 is 72, as other integer fields
  if (value < 0 || value >= limits.vocab_size) {
    throw invalid_request("token id " + id.dump() + " is outside the vocabulary [0, " + std::to_string(limits.vocab_size) +
                              ")",
                          param);
  }
  return static_cast<int32_t>(value);
}

// suffix (completions): the text after an insertion, as code models fill in the middle.
// Qwen's tokenizers (Qwen2.5-Coder's training) mark it <|fim_prefix|>PROMPT<|fim_suffix|>
// SUFFIX<|fim_middle|>, and the model writes the middle. An empty suffix is no insertion.
// Chat has no suffix: the field is refused there as unsupported.
void fill_in_the_middle(const json& body, const Tokenizer& tokenizer, GenerationRequest& out) {
  const json* suffix = field(body, "suffix");
  if (suffix == nullptr || suffix->is_null()) return;
  if (!suffix->is_string()) throw invalid_request("'suffix' must be a string", "suffix");
  const std::string text = suffix->get<std::string>();
  if (text.empty()) return;
  if (out.chat) {
    throw ApiError(400, "invalid_request_error", "'suffix' is not supported on /v1/chat/completions (it is on /v1/completions)",
                   "suffix", "unsupported_parameter");
  }
  const auto prefix_id = tokenizer.token_to_id("<|fim_prefix|>");
  const auto suffix_id = tokenizer.token_to_id("<|fim_suffix|>");
  const auto middle_id = tokenizer.token_to_id("<|fim_middle|>");
  if (!prefix_id || !suffix_id || !middle_id) {
    throw ApiError(400, "invalid_request_error",
                   "'suffix' needs a tokenizer with fill-in-the-middle tokens (<|fim_prefix|>, <|fim_suffix|>, "
                   "<|fim_middle|>); this model's has none",
                   "suffix", "unsupported_parameter");
  }
  if (out.echo) throw invalid_request("'echo' cannot be combined with 'suffix'", "echo");
  const std::vector<int32_t> after = tokenizer.encode(text, true);  // as the prompt's text is read
  const auto insert = [&](std::vector<int32_t>& before) {
    std::vector<int32_t> prompt = {*prefix_id};
    prompt.insert(prompt.end(), before.begin(), before.end());
    prompt.push_back(*suffix_id);
    prompt.insert(prompt.end(), after.begin(), after.end());
    prompt.push_back(*middle_id);
    before = std::move(prompt);
  };
  insert(out.prompt);
  for (std::vector<int32_t>& more : out.more_prompts) insert(more);
  // The middle ends where the model opens another part, as Qwen's own fill-in-the-middle
  // example stops (besides the model's EOS).
  for (const char* marker : {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>",
                             "<|file_sep|>", "<|im_end|>"}) {
    if (const auto id = tokenizer.token_to_id(marker)) out.stop_ids.push_back(*id);
  }
}

// The ids that end a constrained text: the chat turn's end ids (or the tokenizer's EOS), and
// the model's EOS.
std::vector<int32_t> text_end_ids(const ModelText& model, const GenerationRequest& out) {
  std::vector<int32_t> ids = out.chat ? out.stop_ids : std::vector<int32_t>();
  if (const auto eos = model.tokenizer->eos_id(); eos && !out.chat) ids.push_back(*eos);
  if (model.config != nullptr) {
    for (const int32_t id : model.config->eos_token_ids) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }
  return ids;
}

// response_format: {"type": "text"} (free), {"type": "json_object"} (any JSON object) or
// {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}.
// A forced tool call's grammar, when there is one, takes the answer instead.
void parse_response_format(const json& body, const ModelText& model, GenerationRequest& out) {
  const json* format = field(body, "response_format");
  if (format == nullptr) return;
  if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
    throw invalid_request("'response_format' must be an object with a 'type' (\"text\", \"json_object\" or "
                          "\"json_schema\")",
                          "response_format");
  }
  const std::string type = (*format)["type"].get<std::string>();
  std::shared_ptr<const structured::Grammar> grammar;
  if (type == "text") {
    return;
  } else if (type == "json_object") {
    grammar = structured::cached_grammar("json_object", structured::any_json_object_grammar);
  } else if (type == "json_schema") {
    const json* spec = field(*format, "json_schema");
    if (spec == nullptr || !spec->is_object()) {
      throw invalid_request("'response_format.json_schema' must be an object with the 'schema'",
                            "response_format.json_schema");
    }
    const json* schema = field(*spec, "schema");
    if (schema == nullptr) {
      throw invalid_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
    }
    try {
      grammar = structured::cached_grammar("json_schema " + schema->dump(),
                                           [&] { return structured::compile_json_schema(*schema); });
    } catch (const Error& error) {
      throw invalid_request(std::string("'response_format.json_schema.schema': ") + error.message(),
                            "response_format.json_schema.schema");
    }
    // OpenAI's rules for the rest of it: a name of 1-64 letters, digits, '_' and '-'; strict
    // true or false (the grammar holds the answer to the schema either way).
    const json* name = field(*spec, "name");
    if (name == nullptr || !name->is_string()) {
      throw invalid_request("'response_format.json_schema.name' is required (a string)",
                            "response_format.json_schema.name");
    }
    const std::string& text = name->get_ref<const std::string&>();
    if (text.empty() || text.size() > 64 || !std::all_of(text.begin(), text.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
        })) {
      throw invalid_request("'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-' (got " +
                                quote_for_message(text) + ")",
                            "response_format.json_schema.name");
    }
    if (const json* strict = field(*spec, "strict"); strict != nullptr && !strict->is_boolean() && !strict->is_null()) {
      throw invalid_request("'response_format.json_schema.strict' must be true or false", "response_format.json_schema.strict");
    }
  } else {
    throw ApiError(400, "invalid_request_error",
                   "'response_format' of type '" + type +
                       "' is not supported by this server (\"text\", \"json_object\" and \"json_schema\" are)",
                   "response_format", "unsupported_parameter");
  }
  if (out.structured) return;  // a forced tool call's grammar answers
  structured::ConstraintOptions options;
  options.grammar = std::move(grammar);
  options.end_ids = text_end_ids(model, out);
  if (out.chat && out.may_think) {
    // Reasoning comes before the answer, free; the grammar applies after </think>.
    const auto open = model.tokenizer->token_to_id("<think>");
    const auto close = model.tokenizer->token_to_id("</think>");
    if (open && close) {
      options.think_open = *open;
      options.think_close = *close;
      options.thinking = out.reasoning_open;
    }
  }
  out.structured = std::move(options);
}

// The fields chat and completions share; `prompt` must already be set.
void parse_common(const json& body, const ModelText& model, const RequestLimits& limits, GenerationRequest& out,
                  int default_max_tokens) {
  refuse_unsupported(body);
  out.model = check_model(body, limits);
  // OpenAI's end-user id: nothing here uses it, but it is a string.
  if (const json* user = field(body, "user"); user != nullptr && !user->is_string()) {
    throw invalid_request("'user' must be a string", "user");
  }
  out.prompt_tokens_details = limits.prompt_tokens_details;
  out.tokens_as_ids = bool_field(body, "return_tokens_as_token_ids", false);
  out.return_token_ids = bool_field(body, "return_token_ids", false);
  out.stream = bool_field(body, "stream", false);
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) throw invalid_request("'stream_options' must be an object", "stream_options");
    // As OpenAI: options of a stream that is not one are a mistake, not a no-op.
    if (!out.stream) throw invalid_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    out.include_usage = bool_field(*options, "include_usage", false, "stream_options.");
    // vLLM's: the usage so far in every chunk, where include_usage asks for usage at all.
    const bool continuous = bool_field(*options, "continuous_usage_stats", false, "stream_options.");
    out.continuous_usage = out.include_usage && continuous;
  }
  // Several prompts: the longest bounds the new tokens (the first of that length is named).
  int longest = 0;
  for (int p = 1; p < out.prompt_count(); ++p) {
    if (out.prompt_at(p).size() > out.prompt_at(longest).size()) longest = p;
  }
  const int prompt_tokens = static_cast<int>(out.prompt_at(longest).size());
  const int room = limits.max_context - prompt_tokens;
  const std::string the_prompt = out.prompt_count() > 1 ? "prompt " + std::to_string(longest) : "the prompt";
  if (room <= 0) {
    throw ApiError(400, "invalid_request_error",
                   the_prompt + " has " + std::to_string(prompt_tokens) + " tokens, at or over the context limit of " +
                       std::to_string(limits.max_context) + " tokens",
                   out.chat ? "messages" : "prompt", "context_length_exceeded");
  }
  const char* max_name = field(body, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  // With echo the answer may be the prompt alone (its log-probabilities, as evaluations ask);
  // a completion that asks for 0 without it is told so.
  if (const json* asked = field(body, max_name); asked != nullptr && !out.chat && !out.echo) {
    if (int64_t zero = -1; whole_number(*asked, zero) && zero == 0) {
      throw invalid_request("'" + std::string(max_name) + "' must be at least 1 (0 only with 'echo', for the "
                                "prompt's log-probabilities)",
                            max_name);
    }
  }
  const int64_t max_tokens = integer_field(body, max_name, std::min(default_max_tokens, room), out.echo ? 0 : 1, INT32_MAX);
  if (max_tokens > room) {
    throw ApiError(400, "invalid_request_error",
                   "'" + std::string(max_name) + "' is " + std::to_string(max_tokens) + " but " + the_prompt + " has " +
                       std::to_string(prompt_tokens) + " tokens and the context limit is " +
                       std::to_string(limits.max_context) + ": at most " + std::to_string(room) + " new tokens fit",
                   max_name, "context_length_exceeded");
  }
  out.max_tokens = static_cast<int>(max_tokens);
  out.min_tokens = static_cast<int>(integer_field(body, "min_tokens", 0, 0, out.max_tokens));
  out.ignore_eos = bool_field(body, "ignore_eos", false);
  out.include_stop = bool_field(body, "include_stop_str_in_output", false);
  out.skip_special = bool_field(body, "skip_special_tokens", true);
  out.n = static_cast<int>(integer_field(body, "n", 1, 1, limits.max_n));
  if (field(body, "best_of") != nullptr && out.n > 1) {  // only best_of 1 gets here
    throw invalid_request("'best_of' (1) must be at least 'n' (" + std::to_string(out.n) + ")", "best_of");
  }
  out.logit_bias = parse_logit_bias(body, limits.vocab_size);

  // Sampling: OpenAI's defaults with generation_config.json's values, then the request's.
  SamplingParams& s = out.sampling;
  if (model.config != nullptr) {
    s = api_default_sampling(*model.config);
  } else {
    s.temperature = 1.f;
  }
  namespace range = sampling_range;
  s.temperature = static_cast<float>(number_field(body, "temperature", s.temperature, range::kTemperature));
  s.top_p = static_cast<float>(number_field(body, "top_p", s.top_p, range::kTopP));
  // vLLM spells "off" as -1; 0 means off here.
  int64_t top_k = 0;
  if (const json* k = field(body, "top_k"); k != nullptr && whole_number(*k, top_k) && top_k < 0) {
    if (top_k != -1) {
      throw invalid_request("'top_k' must be -1 or 0 (off) or a positive count (got " + k->dump() + ")", "top_k");
    }
    s.top_k = 0;
  } else {
    s.top_k = static_cast<int>(integer_field(body, "top_k", s.top_k, 0, INT32_MAX));
  }
  s.min_p = static_cast<float>(number_field(body, "min_p", s.min_p, range::kMinP));
  s.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", 0, range::kApiPresencePenalty));
  s.frequency_penalty = static_cast<float>(number_field(body, "frequency_penalty", 0, range::kApiFrequencyPenalty));
  s.repetition_penalty =
      static_cast<float>(number_field(body, "repetition_penalty", s.repetition_penalty, range::kApiRepetitionPenalty));
  if (const json* seed = field(body, "seed")) {
    s.seed = seed_field(*seed);
    out.seeded = true;
  } else {
    // No seed: every request its own stream (a counter keeps them apart).
    s.seed = process_unique_bits();
  }
  parse_response_format(body, model, out);
  if (out.structured && out.min_tokens > 0) {
    throw invalid_request("'min_tokens' cannot be combined with structured output (the grammar decides where the "
                          "answer ends)",
                          "min_tokens");
  }

  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      out.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& item : *stop) {
        if (!item.is_string()) throw invalid_request("'stop' must be a string or an array of strings", "stop");
        out.stop.push_back(item.get<std::string>());
      }
    } else {
      throw invalid_request("'stop' must be a string or an array of strings", "stop");
    }
    if (static_cast<int>(out.stop.size()) > limits.max_stop) {
      throw invalid_request("'stop' has " + std::to_string(out.stop.size()) + " strings; at most " +
                                std::to_string(limits.max_stop) + " are allowed",
                            "stop");
    }
    for (const std::string& text : out.stop) {
      if (text.empty()) throw invalid_request("'stop' strings must not be empty", "stop");
      if (static_cast<int>(text.size()) > limits.max_stop_bytes) {
        throw invalid_request("a 'stop' string has " + std::to_string(text.size()) + " bytes; at most " +
                                  std::to_string(limits.max_stop_bytes) + " are allowed",
                              "stop");
      }
    }
  }
  if (const json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) throw invalid_request("'stop_token_ids' must be an array of token ids", "stop_token_ids");
    if (ids->size() > static_cast<size_t>(kMaxStopTokenIds)) {
      throw invalid_request("'stop_token_ids' has " + std::to_string(ids->size()) + " ids; at most " +
                                std::to_string(kMaxStopTokenIds) + " are allowed",
                            "stop_token_ids");
    }
    for (const json& id : *ids) {
      const int32_t token = vocabulary_id(id, limits, "stop_token_ids", "'stop_token_ids' must be an array of token ids");
      if (std::find(out.stop_token_ids.begin(), out.stop_token_ids.end(), token) == out.stop_token_ids.end()) {
        out.stop_token_ids.push_back(token);
      }
    }
  }
}

// How a chat prompt ends (vLLM's fields): a new assistant turn opened (the default), the
// conversation as it is, or the last message's turn left open for the model to go on.
struct PromptEnd {
  bool generation_prompt = true;
  bool continue_final = false;
};

PromptEnd prompt_end(const json& body) {
  PromptEnd end;
  end.continue_final = bool_field(body, "continue_final_message", false);
  end.generation_prompt = bool_field(body, "add_generation_prompt", !end.continue_final);
  if (end.continue_final && end.generation_prompt) {
    throw invalid_request("'continue_final_message' continues the last message: 'add_generation_prompt' must be false",
                          "add_generation_prompt");
  }
  return end;
}

std::string message_text(const json& message, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  const json* content = field(message, "content");
  if (content == nullptr) return "";
  if (content->is_string()) return content->get<std::string>();
  if (content->is_array()) {
    // Parts are joined by a line break, as vLLM joins them for templates that take a string
    // (Qwen's do): a system prompt sent in parts does not run its words together. An
    // assistant's earlier refusal part counts as its text.
    const bool assistant = member_is(message, "role", "assistant");
    std::string text;
    for (size_t i = 0; i < content->size(); ++i) {
      const json& part = (*content)[i];
      const char* key = part.is_object() && member_is(part, "type", "text")                 ? "text"
                        : assistant && part.is_object() && member_is(part, "type", "refusal") ? "refusal"
                                                                                              : nullptr;
      if (key == nullptr || !part.contains(key) || !part[key].is_string()) {
        throw invalid_request("'" + where + "' parts must be {\"type\": \"text\", \"text\": ...} (no images or audio)" +
                                  (assistant ? " or {\"type\": \"refusal\", \"refusal\": ...}" : ""),
                              where);
      }
      if (i > 0) text += '\n';
      text += part[key].get<std::string>();
    }
    return text;
  }
  throw invalid_request("'" + where + "' must be a string or an array of text parts", where);
}

// tool_choice "none" with tools in the prompt: the call's opening tag is biased out of every
// draw (as logit_bias -100 does), so the answer is a message. With no such token in the
// vocabulary there is nothing to bias (and nothing is parsed as a call).
void ban_tool_calls(const Tokenizer& tokenizer, GenerationRequest& out) {
  const auto open_id = tokenizer.token_to_id(std::string(kToolCallOpen));
  if (!open_id) return;
  constexpr float kBan = -100.f;
  for (TokenBias& entry : out.logit_bias) {
    if (entry.id == *open_id) {
      entry.bias = std::min(entry.bias, kBan);
      return;
    }
  }
  if (out.logit_bias.size() >= static_cast<size_t>(kMaxLogitBiasPerRow)) {
    throw invalid_request("'logit_bias' has " + std::to_string(out.logit_bias.size()) + " entries; with tool_choice " +
                              "\"none\" at most " + std::to_string(kMaxLogitBiasPerRow - 1) +
                              " (one more bans the call tag)",
                          "logit_bias");
  }
  out.logit_bias.push_back(TokenBias{*open_id, kBan});
}

// The answer begins with the call: its opening (with a named tool, up to the arguments) ends
// the prompt, and the output parser reads it first. The model writes the rest under a
// grammar: the call's JSON, a tool's name and arguments that fit that tool's parameters
// schema, then </tool_call>; where several calls may come, more calls or the turn's end.
void force_tool_call(const ModelText& model, const std::optional<std::string>& name, const json& tools,
                     GenerationRequest& out) {
  const Tokenizer& tokenizer = *model.tokenizer;
  const auto append = [&](std::string_view text, bool control) {
    const std::vector<int32_t> ids = tokenizer.encode(text, control);
    out.prompt.insert(out.prompt.end(), ids.begin(), ids.end());
  };
  if (out.reasoning_open) {
    // A thinking-only template opened <think>: it is closed empty, as Qwen3's templates write
    // an answer without reasoning (the newline after the tag is tokenized with the rest).
    while (!out.prompt.empty()) {
      const int32_t id = out.prompt.back();
      if (tokenizer.decode(std::span<const int32_t>(&id, 1)).find_first_not_of(" \n") != std::string::npos) break;
      out.prompt.pop_back();
    }
    append("\n\n</think>\n\n", true);
    out.reasoning_open = false;
  }
  // The name is the client's text: it never becomes a control token.
  const std::string opening = "\n{\"name\": " + (name ? json(*name).dump() + ", \"arguments\":" : std::string("\""));
  append(kToolCallOpen, true);
  append(opening, false);
  out.forced_tool_text = std::string(kToolCallOpen) + opening;
  const auto open_id = tokenizer.token_to_id(std::string(kToolCallOpen));
  const auto close_id = tokenizer.token_to_id(std::string(kToolCallClose));
  if (open_id && close_id) {
    std::vector<std::pair<std::string, nlohmann::ordered_json>> callable;
    for (const auto& tool : tools) {
      const std::string tool_name = tool["function"]["name"].get<std::string>();
      if (name && tool_name != *name) continue;
      const json* parameters = field(tool["function"], "parameters");
      callable.emplace_back(tool_name, parameters != nullptr ? *parameters : json());
    }
    structured::ConstraintOptions options;
    options.grammar = structured::cached_grammar("tool_calls " + json(callable).dump(),
                                                 [&] { return structured::compile_tool_calls(callable); });
    options.prefix = opening;
    options.end_ids = {*close_id};
    if (!out.single_tool_call) {
      options.call_open = *open_id;
      options.final_ids = text_end_ids(model, out);  // the turn's end and the model's EOS
    }
    out.structured = std::move(options);
  }
  if (out.single_tool_call) {
    // One call is all the answer holds: it ends at the call's close.
    if (close_id) out.stop_ids.push_back(*close_id);
  }
}

// The chat's messages as its template takes them: roles checked, content flattened to text,
// tool calls' arguments as objects.
nlohmann::ordered_json parse_conversation(const json& body) {
  const json* messages = field(body, "messages");
  if (messages == nullptr) throw invalid_request("'messages' is required", "messages");
  if (!messages->is_array()) throw invalid_request("'messages' must be an array", "messages");
  if (messages->empty()) throw invalid_request("'messages' must not be empty", "messages");
  // The template sees plain messages: roles checked, content flattened to text.
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) throw invalid_request("'" + where + "' must be an object", where);
    const json* role = field(message, "role");
    if (role == nullptr || !role->is_string()) throw invalid_request("'" + where + ".role' must be a string", where + ".role");
    const std::string role_name = role->get<std::string>();
    if (role_name != "system" && role_name != "user" && role_name != "assistant" && role_name != "tool" &&
        role_name != "developer" && role_name != "function") {
      throw invalid_request("'" + where + ".role' must be system, developer, user, assistant, tool or function (got '" +
                                role_name + "')",
                            where + ".role");
    }
    // Only an assistant's turn may go without content (a turn of tool calls), as OpenAI's API has it.
    if (role_name != "assistant" && field(message, "content") == nullptr) {
      throw invalid_request("'" + where + ".content' is required for a " + role_name + " message", where + ".content");
    }
    nlohmann::ordered_json item = message;
    // The deprecated "function" role (a function's result, as older clients still send a
    // history) is a tool's answer to the template; "developer" is the system's turn.
    item["role"] = role_name == "developer" ? "system" : role_name == "function" ? "tool" : role_name;
    item["content"] = message_text(message, i);
    // An earlier answer's reasoning sent back as `reasoning` (vLLM's name) reaches the template
    // under the name Qwen3's reads, `reasoning_content`.
    if (const json* reasoning = field(message, "reasoning");
        reasoning != nullptr && reasoning->is_string() && field(message, "reasoning_content") == nullptr) {
      item.erase("reasoning");
      item["reasoning_content"] = *reasoning;
    }
    // The deprecated assistant's "function_call" (the call a "function" message answers) is
    // its one tool call to the template.
    if (const json* call = field(message, "function_call"); call != nullptr && role_name == "assistant" &&
                                                            field(message, "tool_calls") == nullptr) {
      if (!call->is_object()) throw invalid_request("'" + where + ".function_call' must be an object", where + ".function_call");
      item.erase("function_call");
      item["tool_calls"] = nlohmann::ordered_json::array({{{"type", "function"}, {"function", *call}}});
    }
    if (const json* calls = item.contains("tool_calls") && !item["tool_calls"].is_null() ? &item["tool_calls"] : nullptr) {
      // Templates expect arguments as objects; the API carries them as JSON text.
      if (!calls->is_array()) throw invalid_request("'" + where + ".tool_calls' must be an array", where + ".tool_calls");
      for (auto& call : item["tool_calls"]) {
        if (call.contains("function") && call["function"].contains("arguments") &&
            call["function"]["arguments"].is_string()) {
          try {
            // Integers past 64 bits kept exactly (the template prints them as Python would).
            JsonParseOptions options{ErrorCategory::kInvalidArgument};
            options.exact_big_integers = true;
            call["function"]["arguments"] = parse_ordered_json(call["function"]["arguments"].get<std::string>(),
                                                               "tool call arguments", options);
          } catch (const Error&) {
            throw invalid_request("'" + where + ".tool_calls' arguments must be JSON text", where + ".tool_calls");
          }
        }
      }
    }
    conversation.push_back(std::move(item));
  }
  return conversation;
}

// The request's tools (null: none).
nlohmann::ordered_json parse_tools(const json& body) {
  nlohmann::ordered_json tools;
  if (const json* given = field(body, "tools")) {
    if (!given->is_array()) throw invalid_request("'tools' must be an array", "tools");
    for (const json& tool : *given) {
      if (!tool.is_object() || !member_is(tool, "type", "function") || !tool.contains("function") ||
          !tool["function"].is_object() || !tool["function"].contains("name") || !tool["function"]["name"].is_string()) {
        throw invalid_request("each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tools");
      }
    }
    if (!given->empty()) tools = *given;
  }
  return tools;
}

// The server's default template variables, under the request's chat_template_kwargs and
// reasoning_effort's switch (which contradicts only the request's own enable_thinking).
nlohmann::ordered_json template_kwargs(const json& body, const ModelText& model) {
  nlohmann::ordered_json own = nlohmann::ordered_json::object();
  if (const json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) throw invalid_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    own = *kwargs;
  }
  parse_reasoning_effort(body, own);
  nlohmann::ordered_json extra = model.default_template_kwargs;
  for (const auto& [key, value] : own.items()) extra[key] = value;
  return extra;
}

}  // namespace

GenerationRequest parse_chat_request(const json& body, const ModelText& model, const RequestLimits& limits) {
  if (model.chat_template == nullptr) throw no_chat_template(model);
  GenerationRequest out;
  out.chat = true;
  if (bool_field(body, "echo", false)) {
    throw ApiError(400, "invalid_request_error", "'echo' is not supported by this server on /v1/chat/completions (it is on "
                   "/v1/completions)", "echo", "unsupported_parameter");
  }
  fill_in_the_middle(body, *model.tokenizer, out);  // refuses a suffix
  const nlohmann::ordered_json conversation = parse_conversation(body);
  nlohmann::ordered_json tools = parse_tools(body);
  // tool_choice: "auto" (the default), "none" (the tools stay in the prompt, as OpenAI's and
  // vLLM's, and the call's opening tag is not drawn), or a forced call: "required" (some
  // tool) or {"type": "function", "function": {"name": ...}} (that one).
  std::optional<std::string> forced_name;  // none with "required"
  bool forced = false;
  bool no_calls = false;
  if (const json* choice = field(body, "tool_choice")) {
    if (choice->is_string() && (*choice == "auto" || *choice == "none" || *choice == "required")) {
      no_calls = *choice == "none";
      forced = *choice == "required";
      // As vLLM: "none" may stand alone; "auto" chooses among tools, so there must be some.
      if (*choice == "auto" && field(body, "tools") == nullptr) {
        throw invalid_request("'tool_choice' \"auto\" needs 'tools'", "tool_choice");
      }
    } else if (choice->is_object() && member_is(*choice, "type", "function")) {
      const json* function = field(*choice, "function");
      const json* name = function != nullptr && function->is_object() ? field(*function, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        throw invalid_request("'tool_choice' names its function as {\"type\": \"function\", \"function\": {\"name\": ...}}",
                              "tool_choice");
      }
      forced = true;
      forced_name = name->get<std::string>();
    } else if (choice->is_object() && choice->contains("type") && (*choice)["type"].is_string()) {
      throw ApiError(400, "invalid_request_error",
                     "'tool_choice' of type '" + (*choice)["type"].get<std::string>() +
                         "' is not supported by this server (\"auto\", \"none\", \"required\" or a function are)",
                     "tool_choice", "unsupported_parameter");
    } else {
      throw invalid_request("'tool_choice' must be \"auto\", \"none\", \"required\" or a named function (got " +
                                choice->dump() + ")",
                            "tool_choice");
    }
  }
  if (forced) {
    if (tools.is_null()) throw invalid_request("'tool_choice' forces a tool call but 'tools' is empty", "tool_choice");
    if (forced_name && std::none_of(tools.begin(), tools.end(), [&](const auto& tool) {
          return tool["function"]["name"] == *forced_name;
        })) {
      throw invalid_request("'tool_choice' names '" + *forced_name + "', which is not one of 'tools'", "tool_choice");
    }
    if (forced_name && (forced_name->find(kToolCallOpen) != std::string::npos ||
                        forced_name->find(kToolCallClose) != std::string::npos)) {
      throw invalid_request("a forced tool's name may not contain the call tags", "tool_choice");
    }
  }
  // false: at most one call an answer (the first the model writes; later ones are dropped).
  // A named tool is called once.
  out.single_tool_call = !bool_field(body, "parallel_tool_calls", true) || forced_name.has_value();
  out.named_tool_choice = forced_name.has_value();
  nlohmann::ordered_json extra = template_kwargs(body, model);
  // A forced call is written from the answer's first token: no reasoning before it.
  if (forced) extra["enable_thinking"] = false;
  const PromptEnd end = prompt_end(body);
  if (forced && (!end.generation_prompt || end.continue_final)) {
    throw invalid_request("a forced tool call opens a new assistant turn: it cannot be combined with "
                          "'add_generation_prompt': false or 'continue_final_message'",
                          "tool_choice");
  }
  try {
    out.prompt = encode_chat_prompt(*model.tokenizer, *model.chat_template, conversation, tools, end.generation_prompt,
                                    extra, end.continue_final);
  } catch (const Error& error) {
    throw invalid_request(std::string("the chat template could not render these messages: ") + error.message(), "messages");
  }
  truncate_prompts(body, limits, out);  // the rendered chat, before a forced call's opening ends it
  // A chat answer ends at its turn's end (the original Qwen names only <|endoftext|> as EOS).
  if (model.config != nullptr) out.stop_ids = chat_stop_ids(*model.config, *model.tokenizer);
  out.parse_tool_calls = !tools.is_null() && !no_calls;
  out.parse_reasoning = true;
  // Templates of thinking-only models end the prompt with "<think>\n": the output then
  // starts inside the reasoning and only closes it.
  if (const auto think = model.tokenizer->token_to_id("<think>")) {
    for (size_t back = 1; back <= std::min<size_t>(3, out.prompt.size()); ++back) {
      const int32_t id = out.prompt[out.prompt.size() - back];
      if (id == *think) {
        out.reasoning_open = true;
        break;
      }
      const std::string text = model.tokenizer->decode(std::span<const int32_t>(&id, 1));
      if (text.find_first_not_of(" \n") != std::string::npos) break;
    }
  }
  out.may_think = !forced && !(extra.contains("enable_thinking") && extra["enable_thinking"] == false);
  if (forced) force_tool_call(model, forced_name, tools, out);
  parse_common(body, model, limits, out, limits.max_context);
  if (no_calls && !tools.is_null()) ban_tool_calls(*model.tokenizer, out);
  if (bool_field(body, "logprobs", false)) {
    out.top_logprobs = static_cast<int>(integer_field(body, "top_logprobs", 0, 0, limits.max_logprobs));
  } else if (field(body, "top_logprobs") != nullptr && integer_field(body, "top_logprobs", 0, 0, limits.max_logprobs) > 0) {
    // 0 is "none", what clients send by default whether or not they ask for log-probabilities.
    throw invalid_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  }
  return out;
}

GenerationRequest parse_completion_request(const json& body, const ModelText& model, const RequestLimits& limits) {
  GenerationRequest out;
  const json* prompt = field(body, "prompt");
  if (prompt == nullptr) throw invalid_request("'prompt' is required", "prompt");
  constexpr const char* kNotAPrompt = "'prompt' must be a string, an array of token ids, or an array of those";
  // One prompt: text, or an array of token ids. Completions take raw text: special-token
  // strings in it become their tokens, as the model's own documents are written.
  const auto one_prompt = [&](const json& text, const std::string& which, size_t index) {
    std::vector<int32_t> ids;
    if (text.is_string()) {
      ids = model.tokenizer->encode(text.get<std::string>(), true);
      out.prompt_texts.resize(std::max(out.prompt_texts.size(), index + 1));
      out.prompt_texts[index] = text.get<std::string>();
    } else if (text.is_array()) {
      ids.reserve(text.size());
      for (const json& id : text) ids.push_back(vocabulary_id(id, limits, "prompt", kNotAPrompt));
    } else {
      throw invalid_request(kNotAPrompt, "prompt");
    }
    if (ids.empty()) throw invalid_request(which + " must not be empty", "prompt");
    return ids;
  };
  // Several prompts come as an array of texts or of id arrays (clients batch them so); each
  // gets its own choices.
  if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    if (prompt->size() > static_cast<size_t>(limits.max_prompts)) {
      throw invalid_request("'prompt' holds " + std::to_string(prompt->size()) + " prompts, over this server's limit of " +
                                std::to_string(limits.max_prompts),
                            "prompt");
    }
    const bool several = prompt->size() > 1;
    for (size_t p = 0; p < prompt->size(); ++p) {
      const json& each = (*prompt)[p];
      if (!each.is_string() && !each.is_array()) throw invalid_request(kNotAPrompt, "prompt");
      const std::string which = several ? "prompt " + std::to_string(p) : "'prompt'";
      if (p == 0) {
        out.prompt = one_prompt(each, which, p);
      } else {
        out.more_prompts.push_back(one_prompt(each, which, p));
      }
    }
  } else {
    out.prompt = one_prompt(*prompt, "'prompt'", 0);
  }
  out.echo = bool_field(body, "echo", false);
  truncate_prompts(body, limits, out);  // the client's prompts, before the wrapping below
  fill_in_the_middle(body, *model.tokenizer, out);
  // The tokenizer's EOS ends a completion besides the model's own (generation_config.json),
  // as it ends `qwenrt generate`'s text.
  if (const auto eos = model.tokenizer->eos_id()) {
    if (std::find(out.stop_ids.begin(), out.stop_ids.end(), *eos) == out.stop_ids.end()) out.stop_ids.push_back(*eos);
  }
  parse_common(body, model, limits, out, 16);  // OpenAI's default for completions
  if (const json* logprobs = field(body, "logprobs")) {
    if (logprobs->is_boolean()) {
      if (logprobs->get<bool>()) out.top_logprobs = 0;
    } else {
      out.top_logprobs = static_cast<int>(integer_field(body, "logprobs", 0, 0, limits.max_logprobs));
    }
  }
  return out;
}

TokenizeRequest parse_tokenize_request(const json& body, const ModelText& model, const RequestLimits& limits) {
  check_model(body, limits);
  const json* prompt = field(body, "prompt");
  const bool chat = field(body, "messages") != nullptr;
  if ((prompt != nullptr) == chat) throw invalid_request("give either 'prompt' (text) or 'messages' (a chat)", "prompt");
  TokenizeRequest out;
  out.token_strs = bool_field(body, "return_token_strs", false);
  (void)bool_field(body, "add_special_tokens", false);  // a boolean, and nothing to add
  if (!chat) {
    if (!prompt->is_string()) throw invalid_request("'prompt' must be a string", "prompt");
    // As /v1/completions takes text: special-token strings become their tokens.
    out.ids = model.tokenizer->encode(prompt->get<std::string>(), true);
    return out;
  }
  if (model.chat_template == nullptr) throw no_chat_template(model, "give 'prompt'");
  const nlohmann::ordered_json conversation = parse_conversation(body);
  const nlohmann::ordered_json tools = parse_tools(body);
  const nlohmann::ordered_json extra = template_kwargs(body, model);
  const PromptEnd end = prompt_end(body);
  try {
    out.ids = encode_chat_prompt(*model.tokenizer, *model.chat_template, conversation, tools, end.generation_prompt, extra,
                                 end.continue_final);
    return out;
  } catch (const Error& error) {
    throw invalid_request(std::string("the chat template could not render these messages: ") + error.message(), "messages");
  }
}

std::string parse_detokenize_request(const json& body, const ModelText& model, const RequestLimits& limits) {
  check_model(body, limits);
  const json* tokens = field(body, "tokens");
  if (tokens == nullptr || !tokens->is_array()) throw invalid_request("'tokens' must be an array of token ids", "tokens");
  if (tokens->size() > static_cast<size_t>(limits.max_context)) {
    throw invalid_request("'tokens' holds " + std::to_string(tokens->size()) + " ids, over the context of " +
                              std::to_string(limits.max_context),
                          "tokens");
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (const json& id : *tokens) {
    ids.push_back(vocabulary_id(id, limits, "tokens", "'tokens' must be an array of token ids"));
  }
  return model.tokenizer->decode(ids);
}

}  // namespace qwenrt::server
