// qwenrt generate: continue a prompt given as token ids, as text, or as a chat message
// rendered with the model's own chat template.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/stop_strings.h"
#include "model/config.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/line_editor.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string ids;
  std::string prompt;
  std::string chat;
  std::string system;
  std::string chat_template;  // a file replacing the folder's template
  bool think = false;
  bool no_think = false;
  std::vector<std::string> stop;
  int max_new_tokens = 32;
  SamplingArgs sampling;
  bool verbose = false;
  bool stats = false;
  bool ignore_eos = false;
  std::string format = "text";
};

int run_generate(const GenerateArgs& args, const CLI::App& cmd) {
  const int sources = (cmd.count("--ids") > 0) + (cmd.count("--prompt") > 0) + (cmd.count("--chat") > 0);
  if (sources != 1) {
    throw Error(ErrorCategory::kInvalidArgument, "give exactly one of --ids, -p/--prompt or --chat");
  }
  for (const char* chat_only : {"--chat-template", "--system", "--think", "--no-think"}) {
    if (cmd.count(chat_only) > 0 && cmd.count("--chat") == 0) {
      throw Error(ErrorCategory::kInvalidArgument, std::string(chat_only) + " applies to --chat only");
    }
  }
  if (args.think && args.no_think) throw Error(ErrorCategory::kInvalidArgument, "give --think or --no-think, not both");
  // Text in and out needs the tokenizer (the model folder's, or --tokenizer).
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> prompt;
  if (cmd.count("--ids")) {
    prompt = parse_ids(args.ids);
    if (prompt.empty()) throw Error(ErrorCategory::kInvalidArgument, "--ids: no token ids given");
  } else {
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(args.model.tokenizer_folder()));
    if (cmd.count("--prompt")) {
      prompt = tokenizer->encode(args.prompt, /*allow_special=*/true);
    } else {
      ChatTemplate chat_template = ChatTemplate::load(args.model.tokenizer_folder(), args.chat_template);
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (cmd.count("--system")) messages.push_back({{"role", "system"}, {"content", args.system}});
      messages.push_back({{"role", "user"}, {"content", args.chat}});
      nlohmann::ordered_json vars = nlohmann::ordered_json::object();
      if (args.think || args.no_think) vars["enable_thinking"] = args.think;
      prompt = encode_chat_prompt(*tokenizer, chat_template, messages, nullptr, true, vars);
    }
    if (prompt.empty()) throw Error(ErrorCategory::kInvalidArgument, "the prompt encodes to no tokens");
  }
  if (!args.stop.empty() && !tokenizer) {
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(args.model.tokenizer_folder()));
  }
  Engine engine(args.model.model_dir, engine_options(args.model));
  // Ids the tokenizer made that the model has no row for: the folder's tokenizer and
  // config.json do not belong together (ids the user typed are checked as such later).
  if (tokenizer && cmd.count("--ids") == 0) {
    const int vocab = engine.config().vocab_size;
    for (const int32_t id : prompt) {
      if (id >= vocab) {
        throw Error(ErrorCategory::kInvalidModel,
                    "the tokenizer gave token id " + std::to_string(id) + ", past the model's vocabulary of " +
                        std::to_string(vocab) + " (config.json vocab_size): " + args.model.model_dir +
                        "'s tokenizer does not belong to its weights");
      }
    }
  }
  GenerateOptions options;
  options.max_new_tokens = args.max_new_tokens;
  options.stop_at_eos = !args.ignore_eos;
  if (!args.ignore_eos && cmd.count("--chat")) {
    prepare_chat(engine.config(), *tokenizer, options);
  } else if (tokenizer && tokenizer->eos_id() && !args.ignore_eos) {
    options.extra_stop_ids.push_back(*tokenizer->eos_id());
  }
  options.sampling = effective_sampling(args.sampling, cmd, engine.config());
  if (args.verbose) {
    print_sampling(options.sampling, engine.config());
    print_memory_report(engine);
  }
  const bool text = args.format == "text";
  // On a terminal the model's control characters are shown, not acted on (terminal_text).
  const bool to_terminal = isatty(STDOUT_FILENO) != 0;
  // --ids prints ids in text format, also when --stop loaded the tokenizer.
  const bool print_ids = text && cmd.count("--ids") > 0;
  bool first = true;
  // Streamed text: never a broken UTF-8 character, never text past a stop string.
  std::unique_ptr<StreamDecoder> decoder;
  if (tokenizer) decoder = std::make_unique<StreamDecoder>(*tokenizer, /*skip_special=*/true);
  StopMatcher stops(args.stop);
  std::string generated_text;
  auto emit = [&](const std::string& piece) {
    generated_text += piece;
    if (text && !print_ids && !piece.empty()) {
      const std::string shown = to_terminal ? terminal_text(piece) : piece;
      std::fwrite(shown.data(), 1, shown.size(), stdout);
      std::fflush(stdout);
    }
  };
  double first_token_since_start = 0;
  GenerateResult result = engine.generate(prompt, options, [&](int32_t id) {
    if (first_token_since_start == 0) first_token_since_start = seconds_since_process_start();
    if (print_ids) {
      std::printf(first ? "%d" : " %d", id);
      std::fflush(stdout);
      first = false;
    }
    if (decoder) {
      emit(stops.push(decoder->push(id)));
      if (stops.stopped()) return false;
    }
    // Output nobody can take (a full disk, a closed pipe with SIGPIPE ignored): stop here;
    // main reports the failed write.
    return stdout_ok();
  });
  if (decoder && !stops.stopped()) {
    emit(stops.push(decoder->flush()));
    emit(stops.flush());
  }
  if (stops.stopped()) result.finish_reason = "stop";
  if (result.finish_reason == "length" && static_cast<int>(result.ids.size()) < args.max_new_tokens) {
    // Cut short of -n: said, not left for the user to count.
    const int pool = engine.memory_plan().kv_blocks * engine.memory_plan().kv_block_size;
    std::fprintf(stderr,
                 "note: stopped after %zu of the %d tokens asked for: the sequence filled its room (%d prompt "
                 "tokens; context limit %d tokens, KV cache %d); raise --max-context or --kv-cache-gb\n",
                 result.ids.size(), args.max_new_tokens, result.prompt_tokens, engine.max_context(), pool);
  }
  if (args.model.memory_report) print_memory_report(engine, result.kv_bytes_used);
  if (text) std::printf("\n");
  std::fflush(stdout);  // the text before the statistics on stderr
  if (args.stats) {
    double decoded = result.ids.size() > 1 ? static_cast<double>(result.ids.size() - 1) : 0.0;
    std::fprintf(stderr, "prompt  %d tokens in %.1f ms (%.1f tokens/s)\n", result.prompt_tokens,
                 result.prompt_seconds * 1e3,
                 result.prompt_seconds > 0 ? result.prompt_tokens / result.prompt_seconds : 0.0);
    const StartupTimes& startup = engine.startup_times();
    if (result.ids.empty()) {  // -n 0: no first token to time (the JSON says null)
      std::fprintf(stderr, "first token: none generated\n");
      std::fprintf(stderr, "startup load %.2f s, warm-up %.2f s\n", startup.load_seconds, startup.warmup_seconds);
    } else {
      std::fprintf(stderr, "first token after %.1f ms\n", result.time_to_first_token * 1e3);
      std::fprintf(stderr, "startup load %.2f s, warm-up %.2f s; process start to first token %.2f s\n",
                   startup.load_seconds, startup.warmup_seconds, first_token_since_start);
    }
    if (decoded > 0 && result.decode_seconds > 0) {
      std::fprintf(stderr, "decode  %zu tokens, %.1f tokens/s (%s)\n", result.ids.size(), decoded / result.decode_seconds,
                   result.finish_reason.c_str());
    } else {
      // The first token comes with the prompt: a decode rate needs a second one.
      std::fprintf(stderr, "decode  %zu token%s, no rate (%s)\n", result.ids.size(), result.ids.size() == 1 ? "" : "s",
                   result.finish_reason.c_str());
    }
    if (!args.model.memory_report) print_memory_report(engine, result.kv_bytes_used);
  }
  if (text) return kExitOk;
  nlohmann::ordered_json out;
  out["ids"] = result.ids;
  if (tokenizer) out["text"] = generated_text;
  if (stops.stopped()) out["stop"] = stops.matched();
  out["finish_reason"] = result.finish_reason;
  out["prompt_tokens"] = result.prompt_tokens;
  out["generated_tokens"] = result.ids.size();
  // Times to the microsecond and rates to a hundredth; null where there is nothing to time.
  const auto ms = [](double seconds) { return std::round(seconds * 1e6) / 1e3; };
  const auto rate = [](double count, double seconds) {
    return count > 0 && seconds > 0 ? nlohmann::ordered_json(std::round(count / seconds * 100) / 100)
                                    : nlohmann::ordered_json(nullptr);
  };
  out["prompt_ms"] = ms(result.prompt_seconds);
  out["time_to_first_token_ms"] =
      result.ids.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(ms(result.time_to_first_token));
  out["load_ms"] = ms(engine.startup_times().load_seconds);
  out["warmup_ms"] = ms(engine.startup_times().warmup_seconds);
  out["process_start_to_first_token_ms"] =
      result.ids.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(ms(first_token_since_start));
  out["prompt_tokens_per_s"] = rate(result.prompt_tokens, result.prompt_seconds);
  double decoded = result.ids.size() > 1 ? static_cast<double>(result.ids.size() - 1) : 0.0;
  out["decode_tokens_per_s"] = rate(decoded, result.decode_seconds);
  out["device"] = engine.backend().name();
  // Invalid UTF-8 cannot occur in decoded text, but ids-only prompts may still decode into
  // replacement characters; never let the report fail on encoding.
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return kExitOk;
}

}  // namespace

void add_generate_command(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = root.add_subcommand(
      "generate", "Continue a prompt: token ids (--ids), raw text (-p) or one chat message (--chat)");
  add_model_options(cmd, args->model);
  add_tokenizer_option(cmd, args->model);
  cmd->add_option("--ids", args->ids, "prompt token ids, e.g. \"151644 872 198\"");
  cmd->add_option("-p,--prompt", args->prompt,
                  "prompt text, encoded as is (special-token strings become control tokens, as in transformers)")
      ->check(utf8_text());
  cmd->add_option("--chat", args->chat,
                  "one user message, wrapped in the model's chat template (its text stays plain text)")
      ->check(utf8_text());
  cmd->add_option("--system", args->system, "system prompt for --chat (default: the template's own)")
      ->check(utf8_text());
  cmd->add_option("--chat-template", args->chat_template,
                  "file with the chat template for --chat instead of the folder's: a Jinja template or a "
                  "tokenizer_config.json whose chat_template is taken")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--think", args->think, "Qwen3: let the model think first (enable_thinking=true)");
  cmd->add_flag("--no-think", args->no_think, "Qwen3: answer without thinking (enable_thinking=false)");
  cmd->add_option("--stop", args->stop,
                  "stop when this text appears (repeatable); its text is not printed (the ids that make it are, "
                  "as transformers and vLLM keep them). \\n, \\t, \\r and \\\\ in it are a line break, a tab, a "
                  "carriage return and a backslash, so --stop \"\\n\\n\" stops at a blank line")
      ->transform(CLI::Validator(
          [](std::string& text) {
            // An empty stop string would match before any text: refused, as serve refuses it.
            if (text.empty()) return std::string("a stop string must not be empty");
            if (std::string problem = utf8_problem(text); !problem.empty()) return problem + ": it could never match";
            text = unescape_stop(text);
            return std::string();
          },
          ""));
  cmd->add_option("-n,--max-new-tokens", args->max_new_tokens, "tokens to generate at most")
      ->check(at_least(0))
      ->capture_default_str();
  add_sampling_options(cmd, args->sampling);
  cmd->add_flag("-v,--verbose", args->verbose, "print the sampling settings in effect and the memory plan");
  cmd->add_flag("--stats", args->stats, "print prompt and decode speed, time to first token and memory (stderr)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_option("--format", args->format,
                  "text: the generated text as it is produced (ids for --ids); json: ids, text (not with --ids, "
                  "unless --stop loads the tokenizer) and timings (null where nothing was timed)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([args, cmd, &exit_code]() { exit_code = run_generate(*args, *cmd); });
}

}  // namespace qwenrt::cli
