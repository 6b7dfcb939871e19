#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include "tokenizer/chat_template/chat_template.h"

#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/lexer.h"
#include "tokenizer/chat_template/parser.h"
#include "tokenizer/tokenizer_impl.h"

namespace qwenrt {

using chat_template::Expr;
using chat_template::Stmt;

struct ChatTemplate::Compiled {
  chat_template::Template tree;
};

namespace {

// A folder's tokenizer_config.json, or an empty object where it has none.
nlohmann::json folder_config(const std::filesystem::path& config_path) {
  return std::filesystem::exists(config_path) ? read_json_file(config_path) : nlohmann::json::object();
}

// jinja2 resolves filter and test names when it compiles a template, except in a "soft"
// place: an `if` statement's conditions and branches, a conditional expression, and a
// `set` there. An unknown name elsewhere is an error at load time even on a path that never
// runs; in a soft place it is an error only when evaluated (jinja2's runtime error), so a
// template whose unsupported filter sits in a branch it never takes still renders. A loop's
// body, a macro, a call, filter, set or with block start a new frame, which is not soft, as
// jinja2's inner frames.
void check_names(const Expr* e, bool soft) {
  if (e == nullptr) return;
  const bool known = e->kind == chat_template::ExprKind::kFilter ? chat_template::has_filter(e->name)
                     : e->kind == chat_template::ExprKind::kTest ? chat_template::has_test(e->name)
                                                                 : true;
  if (!known && !soft) {
    throw Error(ErrorCategory::kUnsupported, "chat template at " + chat_template::where(e->line, e->column) + ": " +
                                                 (e->kind == chat_template::ExprKind::kFilter ? "filter '" : "test '") +
                                                 e->name + "' is not supported");
  }
  const bool inner_soft = soft || e->kind == chat_template::ExprKind::kCondition;
  for (const auto& child : e->children) check_names(child.get(), inner_soft);
  for (const auto& [key, value] : e->keywords) check_names(value.get(), inner_soft);
}

void check_names(const chat_template::Body& body, bool soft) {
  using chat_template::StmtKind;
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::kIf:
        for (const auto& c : s->conditions) check_names(c.get(), true);
        for (const auto& b : s->bodies) check_names(b, true);
        check_names(s->else_body, true);
        break;
      case StmtKind::kFor:
        check_names(s->expr.get(), soft);  // the iterable: evaluated where the loop stands
        check_names(s->condition.get(), false);
        check_names(s->body, false);
        check_names(s->else_body, false);
        break;
      case StmtKind::kOutput:
      case StmtKind::kSet:
        check_names(s->expr.get(), soft);
        break;
      case StmtKind::kWith:
        for (const auto& c : s->conditions) check_names(c.get(), soft);
        check_names(s->body, false);
        break;
      case StmtKind::kCallBlock:  // the call itself where the block stands; its body a frame of its own
        check_names(s->expr.get(), soft);
        for (const auto& p : s->params) check_names(p.default_value.get(), false);
        check_names(s->body, false);
        break;
      default:  // macros, filter and set blocks, {% generation %}: a frame of their own
        check_names(s->expr.get(), false);
        check_names(s->condition.get(), false);
        for (const auto& c : s->conditions) check_names(c.get(), false);
        for (const auto& b : s->bodies) check_names(b, false);
        for (const auto& p : s->params) check_names(p.default_value.get(), false);
        check_names(s->body, false);
        check_names(s->else_body, false);
        break;
    }
  }
}

std::optional<std::string> token_text(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  throw Error(ErrorCategory::kInvalidModel, std::string("tokenizer_config.json: '") + key + "' is neither a string nor a token object");
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, SpecialTokens special_tokens)
    : special_tokens_(std::move(special_tokens)) {
  auto compiled = std::make_shared<Compiled>();
  compiled->tree = chat_template::parse_template(source);
  check_names(compiled->tree.body, /*soft=*/false);
  templates_["default"] = std::move(compiled);
}

ChatTemplate ChatTemplate::from_tokenizer_config(const nlohmann::json& config) {
  if (!config.is_object()) throw Error(ErrorCategory::kInvalidModel, "tokenizer_config.json is not a JSON object");
  SpecialTokens tokens;
  tokens.bos_token = token_text(config, "bos_token");
  tokens.eos_token = token_text(config, "eos_token");
  tokens.unk_token = token_text(config, "unk_token");
  tokens.pad_token = token_text(config, "pad_token");
  if (auto it = config.find("additional_special_tokens"); it != config.end() && it->is_array()) {
    for (const auto& t : *it) {
      if (t.is_string()) tokens.additional_special_tokens.push_back(t.get<std::string>());
      if (t.is_object() && t.contains("content") && t["content"].is_string()) {
        tokens.additional_special_tokens.push_back(t["content"].get<std::string>());
      }
    }
  }
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    throw Error(ErrorCategory::kInvalidModel, "tokenizer_config.json has no chat_template");
  }
  if (it->is_string()) return ChatTemplate(it->get<std::string>(), std::move(tokens));
  if (!it->is_array() || it->empty()) {
    throw Error(ErrorCategory::kInvalidModel, "tokenizer_config.json: chat_template is neither a string nor a list of {name, template}");
  }
  ChatTemplate result;
  result.special_tokens_ = std::move(tokens);
  for (const auto& entry : *it) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
        !entry["template"].is_string()) {
      throw Error(ErrorCategory::kInvalidModel, "tokenizer_config.json: chat_template list entries need string 'name' and 'template'");
    }
    const std::string name = entry["name"].get<std::string>();
    try {
      ChatTemplate one(entry["template"].get<std::string>());
      result.templates_[name] = one.templates_["default"];
    } catch (const Error& e) {
      throw Error(e.category(), "chat template '" + name + "': " + e.what());
    }
  }
  return result;
}

ChatTemplate ChatTemplate::load_tokenizer_config(const std::filesystem::path& file) {
  return from_tokenizer_config(read_json_file(file));
}

ChatTemplate ChatTemplate::load(const std::filesystem::path& model_dir) { return *load_folder(model_dir, true); }

std::optional<ChatTemplate> ChatTemplate::load_if_present(const std::filesystem::path& model_dir) {
  return load_folder(model_dir, false);
}

ChatTemplate ChatTemplate::load(const std::filesystem::path& model_dir, const std::filesystem::path& template_file) {
  if (template_file.empty()) return *load_folder(model_dir, true);
  const auto config_path = model_dir / "tokenizer_config.json";
  nlohmann::json config = folder_config(config_path);
  // The caller's template replaces the folder's; the special tokens stay the folder's.
  // A pipe (`--chat-template <(...)`) is read as a file is; folders and devices are refused
  // by the reader.
  std::error_code error;
  if (!std::filesystem::exists(template_file, error)) {
    throw Error(ErrorCategory::kIo, "chat template file " + template_file.string() + " does not exist");
  }
  const std::string text = read_text_file(template_file);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw Error(ErrorCategory::kInvalidArgument, "chat template file " + template_file.string() + " is empty");
  }
  // A tokenizer_config.json (another model's) gives its `chat_template`; any other text is
  // the template itself (a Jinja template is never a JSON object).
  nlohmann::json parsed;
  try {
    parsed = parse_json(text, template_file.string(), {ErrorCategory::kInvalidArgument});
  } catch (const Error&) {
    // not JSON: a template
  }
  if (parsed.is_object()) {
    if (!parsed.contains("chat_template")) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "chat template file " + template_file.string() + " is a JSON object without 'chat_template'");
    }
    config["chat_template"] = parsed["chat_template"];
  } else {
    config["chat_template"] = text;
  }
  try {
    return from_tokenizer_config(config);
  } catch (const Error& e) {
    throw Error(e.category(), "chat template file " + template_file.string() + ": " + e.what());
  }
}

std::optional<ChatTemplate> ChatTemplate::load_folder(const std::filesystem::path& model_dir, bool required) {
  const auto config_path = model_dir / "tokenizer_config.json";
  const auto jinja_path = model_dir / "chat_template.jinja";
  nlohmann::json config = folder_config(config_path);
  // The original Qwen's folders carry no template: its Chat models build ChatML in code
  // (qwen_generation_utils.make_context), with this default system prompt.
  const bool qwen_v1 = names_qwen_v1_tokenizer(model_dir);
  if (std::filesystem::exists(jinja_path)) {
    config["chat_template"] = read_text_file(jinja_path);
  } else if (!std::filesystem::exists(config_path) && !qwen_v1) {
    if (!required) return std::nullopt;
    throw Error(ErrorCategory::kIo, "no tokenizer_config.json or chat_template.jinja in " + model_dir.string());
  }
  if (!config.contains("chat_template") && qwen_v1) {
    config["chat_template"] =
        "{%- if messages | length == 0 or messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
        "{%- for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  }
  if (!required && config.is_object()) {
    const auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return std::nullopt;  // null is "none", as transformers reads it
  }
  // Its errors name the file, with its folder, and how to give another template: one about
  // tokenizer_config.json's fields names that file; one in the template's text names the file
  // the text came from.
  try {
    return from_tokenizer_config(config);
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::string config_name = "tokenizer_config.json";
    const std::string located =
        what.starts_with(config_name)
            ? config_path.string() + what.substr(config_name.size())
            : (std::filesystem::exists(jinja_path) ? jinja_path : config_path).string() + ": " + what;
    throw Error(e.category(), located + " (--chat-template FILE gives another)");
  }
}

std::vector<std::string> ChatTemplate::names() const {
  std::vector<std::string> out;
  for (const auto& [name, compiled] : templates_) out.push_back(name);
  return out;
}

const ChatTemplate::Compiled& ChatTemplate::select(bool has_tools) const {
  if (has_tools) {
    if (auto it = templates_.find("tool_use"); it != templates_.end()) return *it->second;
  }
  if (auto it = templates_.find("default"); it != templates_.end()) return *it->second;
  throw Error(ErrorCategory::kInvalidModel, "the tokenizer has several chat templates but none named 'default'");
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra_vars,
                                 const chat_template::RenderLimits& limits,
                                 chat_template::RenderStats* stats) const {
  using chat_template::Value;
  if (!messages.is_array()) throw Error(ErrorCategory::kInvalidArgument, "messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) throw Error(ErrorCategory::kInvalidArgument, "tools must be a JSON array or null");
  if (!extra_vars.is_null() && !extra_vars.is_object()) {
    throw Error(ErrorCategory::kInvalidArgument, "extra template variables must be a JSON object");
  }
  const Compiled& compiled = select(!tools.is_null());
  auto globals = std::make_shared<chat_template::Scope>();
  chat_template::add_builtin_globals(*globals);
  auto set_token = [&](const char* name, const std::optional<std::string>& token) {
    if (token) globals->vars[name] = Value::from_string(*token);
  };
  set_token("bos_token", special_tokens_.bos_token);
  set_token("eos_token", special_tokens_.eos_token);
  set_token("unk_token", special_tokens_.unk_token);
  set_token("pad_token", special_tokens_.pad_token);
  if (!special_tokens_.additional_special_tokens.empty()) {
    std::vector<Value> extra;
    for (const auto& t : special_tokens_.additional_special_tokens) extra.push_back(Value::from_string(t));
    globals->vars["additional_special_tokens"] = Value::list(std::move(extra));
  }
  try {
    if (extra_vars.is_object()) {
      for (const auto& [name, value] : extra_vars.items()) {
        if (name == "messages" || name == "tools" || name == "documents" || name == "add_generation_prompt") {
          throw Error(ErrorCategory::kInvalidArgument, "template variable '" + name + "' cannot be overridden");
        }
        globals->vars[name] = chat_template::from_json(value);
      }
    }
    globals->vars["messages"] = chat_template::from_json(messages);
    globals->vars["tools"] = chat_template::from_json(tools);
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorCategory::kInvalidArgument, std::string("chat template input: ") + e.what());
  }
  globals->vars["documents"] = Value::none();
  globals->vars["add_generation_prompt"] = Value::from_bool(add_generation_prompt);
  chat_template::Interpreter interpreter(compiled.tree, globals, limits);
  std::string out;
  try {
    out = interpreter.render();
  } catch (...) {
    if (stats) *stats = interpreter.stats();
    throw;
  }
  if (stats) *stats = interpreter.stats();
  return out;
}

}  // namespace qwenrt
