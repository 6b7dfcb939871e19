// The OpenAI API as the server speaks it: errors with their HTTP status, and requests
// parsed and validated into what the generation service runs. No device code here.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "structured/constraint.h"

namespace qwenrt {
class Tokenizer;
class ChatTemplate;
struct ModelConfig;
}  // namespace qwenrt

namespace qwenrt::server {

// An error that reaches the client as {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int http_status, std::string error_type, std::string error_message, std::string error_param = "",
           std::string error_code = "")
      : std::runtime_error(error_message), status(http_status), message(std::move(error_message)), type(std::move(error_type)),
        param(std::move(error_param)), code(std::move(error_code)) {}
  int status;
  std::string message;  // whole: what() ends at a NUL the request put in it (a model name with \u0000)
  std::string type;   // invalid_request_error (401 too, as OpenAI answers it), server_error, ...
  std::string param;  // the request field at fault, "" for none
  std::string code;   // a short machine-readable code, "" for none
};

std::string error_body(const ApiError& error);
ApiError invalid_request(std::string message, std::string param = "");

// 64 random-looking bits, different on every call and in every run of the server (request
// ids, tool-call ids, the seed of a request that gives none).
uint64_t process_unique_bits();
// PREFIX-<16 hex digits> from process_unique_bits: request, response and call ids.
std::string new_id(const char* prefix);

// Parses a request body as JSON. Library failures become one 400 ApiError line.
nlohmann::ordered_json parse_json_body(std::string_view body);
// `text` (JSON) with each escaped surrogate that is not half of a pair ("\ud83d" alone) written
// as "\ufffd" instead; nullopt where there is none (the text is taken as it is).
std::optional<std::string> lone_surrogates_replaced(std::string_view text);

// Caps a request is checked against (each a serve flag).
struct RequestLimits {
  int max_n = 8;
  int max_prompts = 64;           // prompts per completions request
  int max_stop = 32;              // stop strings per request
  int max_stop_bytes = 256;       // bytes per stop string
  int max_logprobs = 20;          // top_logprobs / logprobs
  int max_context = 0;            // the engine's context, tokens
  int vocab_size = 0;             // the model's
  std::string served_model_name;
  bool prompt_tokens_details = false;  // usage.prompt_tokens_details.cached_tokens in every answer
};

// 404 for a model name other than the served one (OpenAI's type and code).
ApiError model_not_found(const std::string& asked, const RequestLimits& limits);

// What the model files contribute to parsing.
struct ModelText {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: chat completions refused
  const ModelConfig* config = nullptr;          // sampling defaults from generation_config.json
  // Template variables every chat request starts from (serve's --default-chat-template-kwargs),
  // its chat_template_kwargs over them key by key.
  nlohmann::ordered_json default_template_kwargs = nlohmann::ordered_json::object();
  bool chat_template_failed = false;  // the folder has a template that failed to load (the log says why)
};

struct GenerationRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  bool continuous_usage = false;  // vLLM's stream_options.continuous_usage_stats: usage in every chunk
  bool prompt_tokens_details = false;  // usage gives prompt_tokens_details.cached_tokens (serve's option)
  std::string model;
  std::vector<int32_t> prompt;
  // Completions given several prompts: the ones after the first. Each prompt gets its n
  // choices, numbered prompt × n + choice as OpenAI numbers them.
  std::vector<std::vector<int32_t>> more_prompts;
  // Completions: each prompt as the client wrote it where it came as text (echo returns it
  // so, not re-decoded from its ids: the tokenizer's normalization would change it); empty
  // or shorter than the prompts where they came as ids.
  std::vector<std::optional<std::string>> prompt_texts;
  int max_tokens = 16;
  int min_tokens = 0;
  bool ignore_eos = false;
  SamplingParams sampling;
  bool seeded = false;  // the client gave the seed (else the request drew its own)
  int n = 1;
  std::vector<std::string> stop;
  bool include_stop = false;  // vLLM's include_stop_str_in_output: the matched stop string stays in the text
  bool skip_special = true;   // vLLM's skip_special_tokens: false shows special tokens in the text
  std::vector<int32_t> stop_ids;  // tokens that end a choice besides the model's EOS (chat: the turn's end)
  // vLLM's stop_token_ids: ids the client named that end a choice, also with ignore_eos.
  std::vector<int32_t> stop_token_ids;
  std::vector<TokenBias> logit_bias;  // added to the logits of every draw
  int top_logprobs = -1;        // -1: no logprobs; else logprobs with this many alternatives
  // vLLM's return_tokens_as_token_ids: logprobs name each token "token_id:N" (its text may
  // be no whole character; ids are what a trainer needs).
  bool tokens_as_ids = false;
  // vLLM's return_token_ids: the prompt's ids and each choice's generated ids are listed
  // (prompt_token_ids, token_ids; in a stream, each chunk's new ids).
  bool return_token_ids = false;
  // Completions' echo: each choice's text opens with the prompt's (max_tokens may then be 0);
  // with logprobs, the prompt's tokens are listed first with theirs (the first has none).
  bool echo = false;
  bool parse_tool_calls = false;  // chat with tools: <tool_call> blocks become tool_calls
  bool single_tool_call = false;  // parallel_tool_calls: false (calls after the first are dropped)
  bool parse_reasoning = false;   // chat: <think> … </think> becomes reasoning_content
  bool reasoning_open = false;    // the prompt itself opened <think> (thinking-only templates)
  std::string forced_tool_text;   // tool_choice forced a call: the call's opening, which ends the prompt
  bool named_tool_choice = false;  // tool_choice named the function (OpenAI then finishes with "stop")
  bool may_think = false;         // chat: the template lets the model open <think> (enable_thinking not false)
  // Structured output (response_format, or a forced tool call's JSON): the grammar and what
  // comes around its text; the service adds the vocabulary. Empty: free text.
  std::optional<structured::ConstraintOptions> structured;

  int prompt_count() const { return 1 + static_cast<int>(more_prompts.size()); }
  // The p-th prompt (0: `prompt`).
  const std::vector<int32_t>& prompt_at(int p) const { return p == 0 ? prompt : more_prompts[static_cast<size_t>(p - 1)]; }
  // The p-th prompt's text as the client wrote it, or null where it came as ids.
  const std::string* prompt_text(int p) const {
    const auto i = static_cast<size_t>(p);
    return i < prompt_texts.size() && prompt_texts[i] ? &*prompt_texts[i] : nullptr;
  }
  // Every choice of every prompt.
  int choices() const { return n * prompt_count(); }
};

GenerationRequest parse_chat_request(const nlohmann::ordered_json& body, const ModelText& model, const RequestLimits& limits);
GenerationRequest parse_completion_request(const nlohmann::ordered_json& body, const ModelText& model,
                                           const RequestLimits& limits);
// POST /tokenize (as vLLM has it): the ids of {"prompt": TEXT} as /v1/completions takes the
// text, or of {"messages": [...]} rendered as /v1/chat/completions renders a chat (with
// `tools`, `chat_template_kwargs`, `reasoning_effort`, and `add_generation_prompt`, default
// true). No context check: the caller learns the count. An unknown model is a 404.
// `return_token_strs` also asks for each id's vocabulary string; `add_special_tokens` (a
// boolean) changes nothing: Qwen's tokenizers add no special tokens around a text.
struct TokenizeRequest {
  std::vector<int32_t> ids;
  bool token_strs = false;
};
TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body, const ModelText& model,
                                       const RequestLimits& limits);
// POST /detokenize: the text of {"tokens": [ids]} (ids in the vocabulary, at most the context).
std::string parse_detokenize_request(const nlohmann::ordered_json& body, const ModelText& model,
                                     const RequestLimits& limits);

}  // namespace qwenrt::server
