// ChatTemplate: renders a model's Jinja chat template (tokenizer_config.json `chat_template`)
// byte-identically to transformers' `tokenizer.apply_chat_template(..., tokenize=False)`:
// same variables (messages, tools, documents=None, add_generation_prompt, the special tokens,
// extra variables such as enable_thinking), same jinja2 environment semantics.
//
//   auto tmpl = qwenrt::ChatTemplate::load("Qwen3-8B/");
//   std::string prompt = tmpl.render(messages, nullptr, /*add_generation_prompt=*/true,
//                                    {{"enable_thinking", false}});
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template/limits.h"

namespace qwenrt {

// The special tokens transformers passes to the template (tokenizer.special_tokens_map):
// a token that tokenizer_config.json leaves null is not defined in the template at all.
struct SpecialTokens {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> pad_token;
  std::vector<std::string> additional_special_tokens;
};

class ChatTemplate {
 public:
  // One template source. Throws qwenrt::Error naming line and column when it does not parse
  // or uses a construct this interpreter does not support.
  explicit ChatTemplate(const std::string& source, SpecialTokens special_tokens = {});

  // From a parsed tokenizer_config.json: `chat_template` is a string or a list of
  // {"name", "template"}; special tokens come from the same file.
  static ChatTemplate from_tokenizer_config(const nlohmann::json& config);
  static ChatTemplate load_tokenizer_config(const std::filesystem::path& file);
  // A model folder: tokenizer_config.json, with chat_template.jinja overriding its
  // `chat_template` when present (as transformers loads it).
  static ChatTemplate load(const std::filesystem::path& model_dir);
  // The same, but a folder without a template (no chat_template.jinja, no `chat_template` in
  // tokenizer_config.json, not an original Qwen folder) gives nullopt rather than an error.
  // A template the folder has that fails to load, or an unreadable tokenizer_config.json,
  // still throws: "none" and "broken" stay apart (serve answers them differently).
  static std::optional<ChatTemplate> load_if_present(const std::filesystem::path& model_dir);
  // The same folder's special tokens with the template of `template_file` (the commands'
  // --chat-template): a Jinja template, or a tokenizer_config.json whose `chat_template` is
  // taken. Errors name the file.
  static ChatTemplate load(const std::filesystem::path& model_dir, const std::filesystem::path& template_file);

  // messages: JSON array of {"role", "content", ...} (OpenAI/transformers format).
  // tools: null for none, else a JSON array of tool schemas. extra_vars: JSON object of more
  // template variables (e.g. {"enable_thinking": false}); null for none.
  // With named templates, "tool_use" is used when tools are given and exists, else "default".
  // The render runs within `limits` (limits.h; docs/SECURITY.md); `stats`, when given,
  // receives what it used.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt,
                     const nlohmann::ordered_json& extra_vars = nlohmann::ordered_json(),
                     const chat_template::RenderLimits& limits = {},
                     chat_template::RenderStats* stats = nullptr) const;

  // Names of the templates (one unnamed template is called "default").
  std::vector<std::string> names() const;
  const SpecialTokens& special_tokens() const { return special_tokens_; }

 private:
  static std::optional<ChatTemplate> load_folder(const std::filesystem::path& model_dir, bool required);
  struct Compiled;
  ChatTemplate() = default;
  const Compiled& select(bool has_tools) const;

  std::map<std::string, std::shared_ptr<const Compiled>> templates_;
  SpecialTokens special_tokens_;
};

}  // namespace qwenrt
