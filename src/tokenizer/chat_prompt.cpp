#include "tokenizer/chat_prompt.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/added_tokens.h"

namespace qwenrt {
namespace {

// A private-use character stands in for the '<' of special-token strings inside message
// content while the template renders, so those strings cannot be taken for scaffolding.
// Either character, typed in the content itself, is kept by a second one put before it.
constexpr const char* kDefangedLt = "\xee\x80\x80";  // U+E000
constexpr const char* kKeepNext = "\xee\x80\x81";    // U+E001
constexpr std::string_view kPrivateLead = "\xee\x80";  // the first two bytes of both

std::vector<const AddedToken*> special_tokens_of(const Tokenizer& tokenizer) {
  std::vector<const AddedToken*> specials;
  for (const auto& token : tokenizer.added_tokens()) {
    if (token.special && !token.content.empty()) specials.push_back(&token);
  }
  return specials;
}

bool is_marker(std::string_view text, size_t at) {
  return text.compare(at, 3, kDefangedLt) == 0 || text.compare(at, 3, kKeepNext) == 0;
}

void defang(std::string& text, const std::vector<const AddedToken*>& specials) {
  if (text.find(kPrivateLead) != std::string::npos) {
    std::string kept;
    kept.reserve(text.size() + 6);
    for (size_t i = 0; i < text.size(); ++i) {
      if (is_marker(text, i)) kept += kKeepNext;
      kept += text[i];
    }
    text.swap(kept);
  }
  for (const AddedToken* token : specials) {
    size_t at = 0;
    while ((at = text.find(token->content, at)) != std::string::npos) {
      // Replace the first byte of the occurrence; the rest of it stays as typed.
      text.replace(at, 1, kDefangedLt);
      at += 3;
    }
  }
}

void defang_json(nlohmann::ordered_json& value, const std::vector<const AddedToken*>& specials) {
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    defang(text, specials);
    value = text;
  } else if (value.is_array() || value.is_object()) {
    for (auto& item : value) defang_json(item, specials);
  }
}

// Undoes defang: a stand-in becomes '<' again, a kept character itself.
std::string restore(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t from = 0, at = 0;
  while ((at = text.find(kPrivateLead, from)) != std::string_view::npos) {
    if (!is_marker(text, at)) {  // another private-use character: as it is
      out.append(text.substr(from, at + kPrivateLead.size() - from));
      from = at + kPrivateLead.size();
      continue;
    }
    out.append(text.substr(from, at - from));
    if (text.compare(at, 3, kDefangedLt) == 0) {
      out += '<';
      from = at + 3;
    } else {
      out.append(text.substr(at + 3, 3));  // the kept character
      from = std::min(text.size(), at + 6);
    }
  }
  out.append(text.substr(from));
  return out;
}

}  // namespace

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                        const nlohmann::ordered_json& messages,
                                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra_vars, bool continue_final_message) {
  const auto specials = special_tokens_of(tokenizer);
  nlohmann::ordered_json safe_messages = messages;
  nlohmann::ordered_json safe_tools = tools;
  defang_json(safe_messages, specials);
  defang_json(safe_tools, specials);
  std::string rendered = chat_template.render(safe_messages, safe_tools, add_generation_prompt, extra_vars);
  if (continue_final_message) {
    // Cut after the final message's content (its end of turn dropped), as transformers does:
    // found without its outer whitespace (a template may trim it), and kept with its trailing
    // whitespace where the template kept that.
    const nlohmann::ordered_json* content =
        safe_messages.is_array() && !safe_messages.empty() && safe_messages.back().is_object() &&
                safe_messages.back().contains("content")
            ? &safe_messages.back()["content"]
            : nullptr;
    const std::string_view text = content != nullptr && content->is_string()
                                      ? std::string_view(content->get_ref<const std::string&>())
                                      : std::string_view();
    constexpr std::string_view kSpace = " \t\n\r\f\v";
    const size_t first = text.find_first_not_of(kSpace);
    if (first == std::string_view::npos) {
      throw Error(ErrorCategory::kInvalidArgument, "continue_final_message: the last message has no text to continue");
    }
    const std::string_view left = text.substr(first);
    const std::string_view stripped = left.substr(0, left.find_last_not_of(kSpace) + 1);
    size_t at = rendered.rfind(stripped);
    if (at == std::string::npos) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "continue_final_message: the template does not render the last message's content");
    }
    // Where the content shows once in the render, it is there. Where it shows more often (a
    // short content also in the end-of-turn text after it: "end" in "<|im_end|>"), it is the
    // showing where a marker put in its place renders (a second render, needed only then);
    // where the template renders what comes before differently for the marker, its last
    // showing, as transformers looks.
    if (at != rendered.find(stripped)) {
      nlohmann::ordered_json marked = safe_messages;
      const std::string marker = "\x01qwenrt-final-message\x01";
      marked.back()["content"] = marker;
      const std::string with_marker = chat_template.render(marked, safe_tools, add_generation_prompt, extra_vars);
      const size_t place = with_marker.find(marker);
      if (place != std::string::npos && rendered.compare(0, place, with_marker, 0, place) == 0) {
        // Where the content starts there (up to its leading whitespace), not further on.
        const size_t found = rendered.find(stripped, place);
        if (found <= place + first) at = found;
      }
    }
    rendered.resize(at + (std::string_view(rendered).substr(at).starts_with(left) ? left.size() : stripped.size()));
  }

  // Split at the special tokens that remain (the scaffolding), leftmost and then longest,
  // with the tokenizer's own added-token matcher (plain rules: no strip or word flags);
  // encode the text between them as plain text, exactly as HF splits at added tokens first.
  std::vector<tok::AddedTokenRule> rules;
  for (const AddedToken* token : specials) rules.push_back({token->content, token->id, true, false, false, false});
  std::vector<tok::Segment> segments;
  tok::AddedTokenMatcher(std::move(rules)).split(rendered, /*special_as_text=*/false, segments);
  // The original Qwen's own chat code (make_context) encodes a turn's role, its "\n" and its
  // content one by one, so a content that starts with whitespace does not merge with that
  // "\n": its turns are encoded so.
  const std::optional<int32_t> turn_start = tokenizer.qwen_v1() ? tokenizer.token_to_id("<|im_start|>") : std::nullopt;
  std::vector<int32_t> ids;
  for (const tok::Segment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    const std::string text = restore(std::string_view(rendered).substr(segment.begin, segment.end - segment.begin));
    const size_t newline = text.find('\n');
    if (turn_start && !ids.empty() && ids.back() == *turn_start && newline != std::string::npos) {
      tokenizer.encode_into(std::string_view(text).substr(0, newline), false, ids);
      tokenizer.encode_into("\n", false, ids);
      tokenizer.encode_into(std::string_view(text).substr(newline + 1), false, ids);
    } else {
      tokenizer.encode_into(text, false, ids);
    }
  }
  return ids;
}

std::vector<int32_t> chat_stop_ids(const ModelConfig& config, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  if (auto eos = tokenizer.eos_id()) ids.push_back(*eos);
  if (config.architecture == Architecture::kQwenV1) {
    for (const char* stop : {"<|im_end|>", "<|im_start|>", "<|endoftext|>"}) {
      if (auto id = tokenizer.token_to_id(stop)) ids.push_back(*id);
    }
  }
  return ids;
}

}  // namespace qwenrt
