// `qwenrt template`: renders a model's chat template for a conversation, exactly as
// transformers' apply_chat_template(..., tokenize=False) does; with --ids, tokenizes it.
#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::cli {

namespace {

struct TemplateOptions {
  std::string model_dir;
  std::string tokenizer_config;
  std::string chat_template;  // with model_dir: a file replacing its template
  std::string messages_file;
  std::string tools_file;
  bool add_generation_prompt = false;
  bool ids = false;
  std::vector<std::string> vars;
};

std::string read_input(const std::string& path) {
  // stdin as a file of its own: read to the same bound as any other.
  return read_text_file(path == "-" ? "/dev/stdin" : path);
}

nlohmann::ordered_json read_json(const std::string& path, const char* what) {
  JsonParseOptions options;
  options.category = ErrorCategory::kInvalidArgument;
  options.exact_big_integers = true;  // the template's alone: printed as Python prints them
  return parse_ordered_json(read_input(path), std::string(what) + " file " + path, options);
}

// NAME=VALUE, VALUE as JSON when it parses (true, 3, "x", [1]), else as a plain string.
void add_var(nlohmann::ordered_json& vars, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error(ErrorCategory::kInvalidArgument, "--var expects NAME=VALUE, got '" + assignment + "'");
  }
  const std::string name = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  try {
    JsonParseOptions options;
    options.exact_big_integers = true;  // as the messages file's
    vars[name] = parse_ordered_json(value, "--var " + name, options);
  } catch (const Error&) {
    vars[name] = value;
  }
}

void run_template(const TemplateOptions& opt) {
  if (opt.model_dir.empty() == opt.tokenizer_config.empty()) {
    throw Error(ErrorCategory::kInvalidArgument, "give exactly one of -m/--model DIR and --tokenizer-config FILE");
  }
  if (!opt.chat_template.empty() && opt.model_dir.empty()) {
    throw Error(ErrorCategory::kInvalidArgument, "--chat-template goes with -m/--model DIR (whose special tokens it takes)");
  }
  const ChatTemplate tmpl = opt.model_dir.empty() ? ChatTemplate::load_tokenizer_config(opt.tokenizer_config)
                                                  : ChatTemplate::load(opt.model_dir, opt.chat_template);
  nlohmann::ordered_json messages = read_json(opt.messages_file, "messages");
  nlohmann::ordered_json tools;  // null: no tools
  if (messages.is_object()) {
    // A conversation file {"messages": [...], "tools": [...]} is accepted too.
    if (messages.contains("tools")) tools = messages["tools"];
    if (!messages.contains("messages")) {
      throw Error(ErrorCategory::kInvalidArgument, "messages file " + opt.messages_file + " has no \"messages\" array");
    }
    nlohmann::ordered_json list = messages["messages"];
    messages = std::move(list);
  }
  if (!opt.tools_file.empty()) {
    if (!tools.is_null()) {
      throw Error(ErrorCategory::kInvalidArgument, "tools come from --tools or from the messages file's \"tools\", "
                                                   "not both (" + opt.messages_file + " has them)");
    }
    tools = read_json(opt.tools_file, "tools");
  }
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  for (const auto& v : opt.vars) add_var(vars, v);
  const std::string prompt = tmpl.render(messages, tools, opt.add_generation_prompt, vars);
  if (!opt.ids) {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
    return;
  }
  const std::string dir = opt.model_dir.empty()
                              ? std::filesystem::path(opt.tokenizer_config).parent_path().string()
                              : opt.model_dir;
  const auto tokenizer = Tokenizer::load(dir.empty() ? "." : dir);
  // As generate --chat, chat and serve feed the model: the template's scaffolding becomes
  // control tokens, the messages' text stays plain text.
  const auto ids = encode_chat_prompt(tokenizer, tmpl, messages, tools, opt.add_generation_prompt, vars);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_template_command(CLI::App& root, int& exit_code) {
  auto opt = std::make_shared<TemplateOptions>();
  CLI::App* cmd = root.add_subcommand(
      "template",
      "Render a model's chat template for a conversation, byte-identical to transformers' "
      "apply_chat_template(..., tokenize=False). The prompt is printed exactly, with no newline added.");
  cmd->add_option("-m,--model", opt->model_dir,
                  "Model folder: its tokenizer_config.json (and chat_template.jinja, which takes precedence)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--tokenizer-config", opt->tokenizer_config,
                  "A tokenizer_config.json file holding chat_template and the special tokens")
      ->check(CLI::ExistingFile);
  cmd->add_option("--chat-template", opt->chat_template,
                  "With -m: a file whose template replaces the folder's (a Jinja template, or a "
                  "tokenizer_config.json whose chat_template is taken); the special tokens stay the folder's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--messages", opt->messages_file,
                  "JSON file ('-' for stdin): an array of messages {\"role\", \"content\", ...}, or an object "
                  "{\"messages\": [...], \"tools\": [...]}")
      ->required();
  cmd->add_option("--tools", opt->tools_file, "JSON file with an array of tool schemas (the template's `tools`)");
  cmd->add_flag("--add-generation-prompt", opt->add_generation_prompt,
                "End with the assistant turn header (add_generation_prompt=True)");
  cmd->add_option("--var", opt->vars,
                  "Extra template variable NAME=VALUE, repeatable; VALUE is JSON if it parses (true, 3, [..]), "
                  "else a string. Example: --var enable_thinking=false");
  cmd->add_flag("--ids", opt->ids,
                "Print the prompt's token ids (space-separated) instead of its text: those generate --chat, chat "
                "and serve feed the model (a message's text never becomes a control token)");
  cmd->callback([opt, &exit_code]() {
    run_template(*opt);
    exit_code = kExitOk;
  });
}

}  // namespace qwenrt::cli
