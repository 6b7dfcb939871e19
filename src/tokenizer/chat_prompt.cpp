#include "tokenizer/chat_prompt.h"

#include <string>

namespace qwenrt {
namespace {

// A private-use character stands in for the '<' of special-token strings inside message
// content while the template renders, so those strings cannot be taken for scaffolding.
constexpr const char* kDefangedLt = "\xee\x80\x80";  // U+E000

std::vector<const AddedToken*> special_tokens_of(const Tokenizer& tokenizer) {
  std::vector<const AddedToken*> specials;
  for (const auto& token : tokenizer.added_tokens()) {
    if (token.special && !token.content.empty()) specials.push_back(&token);
  }
  return specials;
}

void defang(std::string& text, const std::vector<const AddedToken*>& specials) {
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

std::string restore(std::string text) {
  size_t at = 0;
  while ((at = text.find(kDefangedLt, at)) != std::string::npos) {
    text.replace(at, 3, "<");
    at += 1;
  }
  return text;
}

}  // namespace

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                        const nlohmann::ordered_json& messages,
                                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra_vars) {
  const auto specials = special_tokens_of(tokenizer);
  nlohmann::ordered_json safe_messages = messages;
  nlohmann::ordered_json safe_tools = tools;
  defang_json(safe_messages, specials);
  defang_json(safe_tools, specials);
  const std::string rendered = chat_template.render(safe_messages, safe_tools, add_generation_prompt, extra_vars);

  // Split at the special tokens that remain (the scaffolding), leftmost and then longest;
  // encode the text between them as plain text, exactly as HF splits at added tokens first.
  std::vector<int32_t> ids;
  size_t position = 0;
  size_t text_start = 0;
  while (position < rendered.size()) {
    const AddedToken* match = nullptr;
    for (const AddedToken* token : specials) {
      if (rendered.compare(position, token->content.size(), token->content) == 0 &&
          (match == nullptr || token->content.size() > match->content.size())) {
        match = token;
      }
    }
    if (match == nullptr) {
      ++position;
      continue;
    }
    if (position > text_start) {
      tokenizer.encode_into(restore(rendered.substr(text_start, position - text_start)), false, ids);
    }
    ids.push_back(match->id);
    position += match->content.size();
    text_start = position;
  }
  if (text_start < rendered.size()) tokenizer.encode_into(restore(rendered.substr(text_start)), false, ids);
  return ids;
}

}  // namespace qwenrt
