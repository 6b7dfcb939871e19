// OpenAI response bodies from a request's choice events: whole responses (chat.completion,
// text_completion) and their streamed chunks (SSE `data:` lines).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/generation.h"
#include "server/output_parser.h"

namespace qwenrt::server {

class ResponseBuilder {
 public:
  ResponseBuilder(const GenerationRequest& request, std::string id, int64_t created, int prompt_tokens,
                  std::string system_fingerprint = "");
  // Streaming: the SSE events (each "data: …\n\n") this event adds.
  void stream(const ChoiceEvent& event, std::string& out);
  // Streaming: the usage chunk (when asked for) and [DONE].
  std::string stream_end();
  // Whole response: collects an event.
  void collect(const ChoiceEvent& event);
  std::string body() const;
  // The first error a choice ended with, if any.
  const std::optional<ApiError>& error() const { return error_; }

 private:
  struct Choice {
    explicit Choice(const GenerationRequest& request)
        : parser(request.chat && request.parse_reasoning, request.chat && request.parse_tool_calls,
                 request.reasoning_open, request.single_tool_call) {
      // A forced call's opening ended the prompt: the output continues it.
      if (!request.forced_tool_text.empty()) parser.push_forced_opening(request.forced_tool_text);
    }
    OutputParser parser;
    bool started = false;
    std::string content, reasoning;
    std::vector<ToolCall> tool_calls;
    nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();  // chat: entries; completions: see below
    std::vector<std::string> tokens;
    nlohmann::ordered_json token_logprobs = nlohmann::ordered_json::array();  // null for an echoed prompt's first token
    nlohmann::ordered_json top_logprobs = nlohmann::ordered_json::array();
    std::vector<size_t> text_offsets;
    std::string finish;
    nlohmann::ordered_json stop_reason;  // vLLM's: the stop string or stop token id that ended it, else null
    int completion_tokens = 0;
    int cached_prompt_tokens = 0;  // its prompt's tokens the prefix cache held
    // return_token_ids: the generated ids (whole response), or those not yet in a chunk (stream).
    std::vector<int32_t> token_ids;
    bool ids_started = false;  // a stream's chunk has given the choice's prompt_token_ids
    // Completions' text_offset: characters of the text so far, and the bytes of a character
    // its tokens have not finished yet.
    size_t characters = 0;
    std::string unfinished;
  };
  static ParsedDelta parse(Choice& choice, const ChoiceEvent& event);
  // The choice an event is for, with what the event tells of its prompt recorded (and its
  // token's id where return_token_ids asks).
  Choice& choice_of(const ChoiceEvent& event);
  static void add_tool_call(Choice& choice, const ToolCallDelta& delta);
  // A chunk of `choices`; `choice`: the choice it carries, whose usage so far it shows where asked.
  nlohmann::ordered_json chunk(nlohmann::ordered_json choices, int choice = -1) const;
  nlohmann::ordered_json usage() const;
  std::string finish_reason(const Choice& choice) const;
  // Takes a finishing event's reason and stop_reason into `choice`.
  static void finish(Choice& choice, const ChoiceEvent& event);
  // return_token_ids in a stream: the ids `choice` has waiting go into `item` (a completions
  // choice also gets its prompt's ids with its first chunk; chat's come with the role's chunk).
  void add_stream_ids(Choice& choice, int index, nlohmann::ordered_json& item);
  nlohmann::ordered_json chat_logprobs(const std::vector<LogprobEntry>& entries) const;
  // Adds `entries` to `out`; `text` is the choice whose text they belong to (`out` itself,
  // or for a streamed chunk the choice), whose character count places them.
  void add_completion_logprobs(Choice& out, const ChoiceEvent& event, Choice& text);
  static nlohmann::ordered_json completion_logprobs(const Choice& choice);

  const GenerationRequest& request_;
  std::string id_;
  int64_t created_;
  int prompt_tokens_;
  std::string fingerprint_;
  std::vector<Choice> choices_;
  std::optional<ApiError> error_;
};

}  // namespace qwenrt::server
