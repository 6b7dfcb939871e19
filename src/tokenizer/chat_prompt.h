// Chat prompts as token ids: the template's own scaffolding (<|im_start|>, <|im_end|>, ...)
// becomes control tokens, while message content is always plain text — a user who types
// "<|im_start|>" gets the characters, not the control token (QWEN.md §Tokenizer).
// When no message contains a special-token string, the ids equal transformers'
// apply_chat_template(..., tokenize=True).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/config.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt {

// continue_final_message: the prompt ends right after the last message's content (its turn
// left open for the model to go on, as transformers' option of that name); an Error when the
// template does not render that content as given.
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                        const nlohmann::ordered_json& messages,
                                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra_vars = nlohmann::ordered_json(),
                                        bool continue_final_message = false);

// The tokens that end a chat answer besides the model's end-of-sequence ids: the
// tokenizer's EOS, and for the original Qwen (whose generation_config.json names only
// <|endoftext|>) the ChatML turn markers its own code stops at.
std::vector<int32_t> chat_stop_ids(const ModelConfig& config, const Tokenizer& tokenizer);

}  // namespace qwenrt
