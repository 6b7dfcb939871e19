#include "server/responses.h"

#include <algorithm>

#include "core/json.h"
#include "tokenizer/utf8.h"

namespace qwenrt::server {

// Keys in the order they are written: OpenAI's order, and completions' top_logprobs most likely first.
using json = nlohmann::ordered_json;

namespace {

json bytes_of(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

std::string sse(const json& value) {
  // Invalid UTF-8 cannot occur (the decoder completes characters); replace, never throw.
  return "data: " + value.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json tool_call_json(const ToolCall& call) {
  return {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace

ResponseBuilder::ResponseBuilder(const GenerationRequest& request, std::string id, int64_t created, int prompt_tokens,
                                 std::string system_fingerprint)
    : request_(request),
      id_(std::move(id)),
      created_(created),
      prompt_tokens_(prompt_tokens),
      fingerprint_(std::move(system_fingerprint)) {
  for (int i = 0; i < request.choices(); ++i) choices_.emplace_back(request);
}

json ResponseBuilder::usage() const {
  int completion = 0;
  for (const Choice& choice : choices_) completion += choice.completion_tokens;
  json usage = {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion},
                {"total_tokens", prompt_tokens_ + completion}};
  if (request_.prompt_tokens_details) {
    // A prompt is counted once however many choices it has: as its first choice found the
    // cache (the others of a batch may have found that one's blocks).
    int cached = 0;
    for (size_t first = 0; first < choices_.size(); first += static_cast<size_t>(request_.n)) {
      cached += choices_[first].cached_prompt_tokens;
    }
    usage["prompt_tokens_details"] = {{"cached_tokens", cached}};
  }
  return usage;
}

void ResponseBuilder::add_tool_call(Choice& choice, const ToolCallDelta& delta) {
  if (delta.starts) {
    choice.tool_calls.push_back(ToolCall{delta.id, delta.name, delta.arguments});
  } else {
    choice.tool_calls.at(static_cast<size_t>(delta.index)).arguments += delta.arguments;
  }
}

std::string ResponseBuilder::finish_reason(const Choice& choice) const {
  // "tool_calls" says the calls are ready to run: each one's arguments are JSON. A call
  // whose arguments broke off (a stop, the end of the turn) keeps the choice's own reason,
  // and so does a call the request named (OpenAI answers those with "stop").
  if (choice.finish == "stop" && !choice.tool_calls.empty() && !request_.named_tool_choice &&
      std::all_of(choice.tool_calls.begin(), choice.tool_calls.end(),
                  [](const ToolCall& call) { return json::accept(call.arguments); })) {
    return "tool_calls";
  }
  return choice.finish;
}

void ResponseBuilder::finish(Choice& choice, const ChoiceEvent& event) {
  choice.finish = event.finish_reason;
  if (!event.stop_string.empty()) {
    choice.stop_reason = event.stop_string;
  } else if (event.stop_token >= 0) {
    choice.stop_reason = event.stop_token;
  }
}

json ResponseBuilder::chunk(json choices, int choice) const {
  json out = {{"id", id_},
              {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", request_.model},
              {"system_fingerprint", fingerprint_.empty() ? json(nullptr) : json(fingerprint_)},
              {"choices", std::move(choices)}};
  if (!request_.include_usage) return out;
  out["usage"] = nullptr;
  if (request_.continuous_usage && choice >= 0) {
    // vLLM's continuous_usage_stats: a choice's chunk counts that choice alone (its prompt's
    // tokens, its own so far); the last chunk's usage counts the request.
    const int prompt = static_cast<int>(request_.prompt_at(choice / request_.n).size());
    const int completion = choices_[static_cast<size_t>(choice)].completion_tokens;
    out["usage"] = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }
  return out;
}

namespace {

// A token as return_tokens_as_token_ids names it (vLLM's spelling).
std::string id_name(const LogprobToken& token) { return "token_id:" + std::to_string(token.id); }

// A token as the legacy completions logprobs name it: its text, or where its bytes are no
// whole UTF-8 (a piece of a character), "bytes:" and each byte as \xNN, as OpenAI's
// completions spell them: two pieces of characters are two keys of top_logprobs, not one
// U+FFFD that keeps only the likelier.
std::string legacy_token(const LogprobToken& token) {
  if (tok::utf8_valid_prefix(token.bytes) == token.bytes.size()) return token.text;
  std::string out = "bytes:";
  for (const char c : token.bytes) append_byte_escape(out, static_cast<unsigned char>(c));
  return out;
}

// The characters the bytes of an unfinished character show as when cut off (U+FFFDs).
size_t cut_length(const std::string& unfinished) {
  std::string cut;
  tok::append_utf8_lossy(unfinished, cut);
  return tok::utf8_length(cut);
}

}  // namespace

json ResponseBuilder::chat_logprobs(const std::vector<LogprobEntry>& entries) const {
  // With return_tokens_as_token_ids the token is named by its id; its bytes stay its own.
  const auto name = [&](const LogprobToken& token) { return request_.tokens_as_ids ? id_name(token) : token.text; };
  json content = json::array();
  for (const LogprobEntry& entry : entries) {
    json top = json::array();
    for (const LogprobToken& alternative : entry.top) {
      top.push_back({{"token", name(alternative)}, {"logprob", alternative.logprob}, {"bytes", bytes_of(alternative.bytes)}});
    }
    content.push_back(
        {{"token", name(entry)}, {"logprob", entry.logprob}, {"bytes", bytes_of(entry.bytes)}, {"top_logprobs", top}});
  }
  return content;
}

void ResponseBuilder::add_completion_logprobs(Choice& out, const ChoiceEvent& event, Choice& text) {
  const std::vector<LogprobEntry>& entries = event.logprobs;
  // With return_tokens_as_token_ids tokens are named by their ids (text_offset still counts
  // the text's characters, where vLLM adds up the names' lengths).
  const auto name = [&](const LogprobToken& token) { return request_.tokens_as_ids ? id_name(token) : legacy_token(token); };
  for (const LogprobEntry& entry : entries) {
    const std::string token = name(entry);
    out.tokens.push_back(token);
    if (entry.none) {
      out.token_logprobs.push_back(nullptr);
      out.top_logprobs.push_back(nullptr);
    } else {
      out.token_logprobs.push_back(entry.logprob);
      // Keyed by the token: the token itself is always there (OpenAI's legacy rule: up to
      // logprobs + 1 entries), also when it is not among the most likely. Tokens alike (ids
      // of no bytes) share a key, which keeps the likelier's log-prob.
      json top = json::object();
      for (const LogprobToken& alternative : entry.top) {
        const std::string key = name(alternative);
        if (!top.contains(key)) top[key] = alternative.logprob;
      }
      top[token] = entry.logprob;
      out.top_logprobs.push_back(top);
    }
    // Where the token starts in `text`: the characters decoded before it, as the streaming
    // decoder decodes them. A token that goes on with a character begun earlier (a
    // continuation byte first) points at that character, and so does a special token (the
    // decoder skips it and keeps the bytes); a token that cuts the character off, and the
    // token that ends the choice (the decoder then flushes), come after its U+FFFD. A token
    // of no bytes (an id the model has and the tokenizer lacks) adds nothing and cuts nothing.
    size_t offset = text.characters;
    const bool adds = entry.in_text && !entry.bytes.empty();
    const bool continues = adds && (static_cast<unsigned char>(entry.bytes[0]) & 0xC0) == 0x80;
    if (!text.unfinished.empty() && (entry.ends || (adds && !continues))) offset += cut_length(text.unfinished);
    out.text_offsets.push_back(offset);
    if (!adds) continue;
    text.unfinished += entry.bytes;
    text.characters += tok::utf8_length(tok::take_finished_utf8(text.unfinished));
  }
  if (event.echo && !text.unfinished.empty()) {
    // The echoed prompt's text was decoded alone: a character it cuts off is a U+FFFD
    // there, and the generated text starts afresh.
    text.characters += cut_length(text.unfinished);
    text.unfinished.clear();
  }
}

json ResponseBuilder::completion_logprobs(const Choice& choice) {
  return {{"tokens", choice.tokens}, {"token_logprobs", choice.token_logprobs}, {"top_logprobs", choice.top_logprobs},
          {"text_offset", choice.text_offsets}};
}

// The event's text through the choice's tag parser; at the choice's end, what it held too.
ParsedDelta ResponseBuilder::parse(Choice& choice, const ChoiceEvent& event) {
  return event.finish_reason.empty() ? choice.parser.push(event.text) : choice.parser.flush(event.text);
}

ResponseBuilder::Choice& ResponseBuilder::choice_of(const ChoiceEvent& event) {
  Choice& choice = choices_[static_cast<size_t>(event.choice)];
  if (event.cached_prompt_tokens >= 0) choice.cached_prompt_tokens = event.cached_prompt_tokens;
  if (request_.return_token_ids && event.token_id >= 0) choice.token_ids.push_back(event.token_id);
  return choice;
}

void ResponseBuilder::add_stream_ids(Choice& choice, int index, json& item) {
  if (!request_.return_token_ids) return;
  if (!request_.chat && !choice.ids_started) item["prompt_token_ids"] = request_.prompt_at(index / request_.n);
  choice.ids_started = true;
  item["token_ids"] = choice.token_ids;
  choice.token_ids.clear();
}

void ResponseBuilder::stream(const ChoiceEvent& event, std::string& out) {
  Choice& choice = choice_of(event);
  const bool logprobs = request_.top_logprobs >= 0;
  if (event.finish_reason == "error") {
    choice.completion_tokens += event.tokens;
    choice.finish = "error";
    if (error_) return;  // one error event for the request, not one for each of its choices
    error_ = ApiError(500, "server_error", event.error.empty() ? "generation failed" : event.error);
    out += "data: " + error_body(*error_) + "\n\n";
    return;
  }
  if (!request_.chat) {
    choice.completion_tokens += event.tokens;
    json item = {{"index", event.choice}, {"text", event.text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (logprobs && !event.logprobs.empty()) {
      Choice part(request_);
      add_completion_logprobs(part, event, choice);
      item["logprobs"] = completion_logprobs(part);
    }
    if (!event.finish_reason.empty()) {
      finish(choice, event);
      item["finish_reason"] = finish_reason(choice);
      item["stop_reason"] = choice.stop_reason;
    }
    // With return_token_ids a token's id goes out with the step that drew it, its text held
    // back or not (a partial character, a stop string's start), as vLLM sends it.
    if (!event.text.empty() || !event.logprobs.empty() || !event.finish_reason.empty() || !choice.token_ids.empty()) {
      add_stream_ids(choice, event.choice, item);
      out += sse(chunk(json::array({item}), event.choice));
    }
    return;
  }
  if (!choice.started) {
    choice.started = true;
    json first = chunk(json::array({{{"index", event.choice},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}}),
                       event.choice);
    // As vLLM: the prompt's ids with the first chunk (of each choice).
    if (request_.return_token_ids) first["prompt_token_ids"] = request_.prompt;
    out += sse(first);
  }
  // Counted after the role's chunk: with continuous_usage_stats that one shows the tokens before.
  choice.completion_tokens += event.tokens;
  ParsedDelta parsed = parse(choice, event);
  json delta = json::object();
  if (!parsed.reasoning.empty()) {
    // Under both names: `reasoning_content` (what DeepSeek's API began, Open WebUI and LiteLLM
    // read) and `reasoning` (vLLM's name since late 2025, which current clients read).
    delta["reasoning_content"] = parsed.reasoning;
    delta["reasoning"] = parsed.reasoning;
  }
  if (!parsed.content.empty()) delta["content"] = parsed.content;
  if (!parsed.tool_calls.empty()) {
    // OpenAI's streamed calls: the first piece has the id, type and name, later ones only
    // more of the arguments.
    json calls = json::array();
    for (const ToolCallDelta& call : parsed.tool_calls) {
      json function = {{"arguments", call.arguments}};
      if (call.starts) function["name"] = call.name;
      json piece = {{"index", call.index}, {"function", function}};
      if (call.starts) {
        piece["id"] = call.id;
        piece["type"] = "function";
      }
      calls.push_back(std::move(piece));
      add_tool_call(choice, call);
    }
    delta["tool_calls"] = calls;
  }
  // A token whose text is held back still sends its id (an empty delta) where the client asked
  // for ids, as vLLM does; on the last event the finish chunk carries it.
  const bool ids_alone = !choice.token_ids.empty() && event.finish_reason.empty();
  if (!delta.empty() || (logprobs && !event.logprobs.empty()) || ids_alone) {
    json item = {{"index", event.choice}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (logprobs && !event.logprobs.empty()) {
      item["logprobs"] = {{"content", chat_logprobs(event.logprobs)}, {"refusal", nullptr}};
    }
    add_stream_ids(choice, event.choice, item);
    out += sse(chunk(json::array({item}), event.choice));
  }
  if (!event.finish_reason.empty()) {
    finish(choice, event);
    json item = {{"index", event.choice},
                 {"delta", json::object()},
                 {"logprobs", nullptr},
                 {"finish_reason", finish_reason(choice)},
                 {"stop_reason", choice.stop_reason}};
    add_stream_ids(choice, event.choice, item);
    out += sse(chunk(json::array({item}), event.choice));
  }
}

std::string ResponseBuilder::stream_end() {
  std::string out;
  if (request_.include_usage) {
    json last = chunk(json::array());
    last["usage"] = usage();
    out += sse(last);
  }
  out += "data: [DONE]\n\n";
  return out;
}

void ResponseBuilder::collect(const ChoiceEvent& event) {
  Choice& choice = choice_of(event);
  choice.completion_tokens += event.tokens;
  if (event.finish_reason == "error") {
    if (!error_) error_ = ApiError(500, "server_error", event.error.empty() ? "generation failed" : event.error);
    choice.finish = "error";
    return;
  }
  if (request_.chat) {
    ParsedDelta parsed = parse(choice, event);
    choice.content += parsed.content;
    choice.reasoning += parsed.reasoning;
    for (const ToolCallDelta& call : parsed.tool_calls) add_tool_call(choice, call);
    for (auto& entry : chat_logprobs(event.logprobs)) choice.logprobs.push_back(std::move(entry));
  } else {
    choice.content += event.text;
    add_completion_logprobs(choice, event, choice);
  }
  if (!event.finish_reason.empty()) finish(choice, event);
}

std::string ResponseBuilder::body() const {
  json choices = json::array();
  const bool logprobs = request_.top_logprobs >= 0;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& choice = choices_[i];
    json item = {{"index", i}};
    if (request_.chat) {
      json message = {{"role", "assistant"}};
      // No answer beside calls or reasoning is null (as OpenAI for calls, vLLM for reasoning), not "".
      const bool only_else = choice.content.empty() && (!choice.tool_calls.empty() || !choice.reasoning.empty());
      message["content"] = only_else ? json(nullptr) : json(choice.content);
      message["refusal"] = nullptr;  // the API's field for a safety refusal: this server has none
      if (!choice.reasoning.empty()) {
        message["reasoning_content"] = choice.reasoning;  // both names, as in a stream's deltas
        message["reasoning"] = choice.reasoning;
      }
      if (!choice.tool_calls.empty()) {
        json calls = json::array();
        for (const ToolCall& call : choice.tool_calls) calls.push_back(tool_call_json(call));
        message["tool_calls"] = calls;
      }
      item["message"] = message;
      item["logprobs"] = logprobs ? json{{"content", choice.logprobs}, {"refusal", nullptr}} : json(nullptr);
    } else {
      item["text"] = choice.content;
      item["logprobs"] = logprobs ? completion_logprobs(choice) : json(nullptr);
    }
    item["finish_reason"] = finish_reason(choice);
    item["stop_reason"] = choice.stop_reason;
    if (request_.return_token_ids) {
      // As vLLM: a completions choice carries its prompt's ids, a chat response its one prompt's.
      if (!request_.chat) item["prompt_token_ids"] = request_.prompt_at(static_cast<int>(i) / request_.n);
      item["token_ids"] = choice.token_ids;
    }
    choices.push_back(item);
  }
  json out = {{"id", id_},
              {"object", request_.chat ? "chat.completion" : "text_completion"},
              {"created", created_},
              {"model", request_.model},
              {"system_fingerprint", fingerprint_.empty() ? json(nullptr) : json(fingerprint_)},
              {"choices", choices},
              {"usage", usage()}};
  if (request_.return_token_ids && request_.chat) out["prompt_token_ids"] = request_.prompt;
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace qwenrt::server
