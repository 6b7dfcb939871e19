#include "cli/common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>

#include "core/error.h"
#include "core/json.h"
#include "engine/sampler.h"
#include "model/config.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/utf8.h"

namespace qwenrt::cli {

namespace {

// "1", "0.5", "1e+30": short, as a user wrote numbers.
std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.12g", value);
  return text;
}

// A validator of the number in an option's text: `wrong` says what is wrong with a finite
// value ("must be ..."; "" when it is right), and the message quotes the text as given (a
// large integer's float would read as another number).
CLI::Validator number_check(std::string description, std::function<std::string(double)> wrong) {
  return CLI::Validator(
      [wrong = std::move(wrong)](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        if (!std::isfinite(value)) return "must be a finite number (got " + text + ")";
        const std::string why = wrong(value);
        if (!why.empty()) return why + " (got " + text + ")";
        // Sampling options are floats: checked as the float they become too (1e39 is
        // infinite there, 1e-50 is 0), which is then named as the reason.
        if (std::fabs(value) > std::numeric_limits<float>::max()) {
          return "must be a finite number (got " + text + ", past a 32-bit float's range)";
        }
        const double narrowed = static_cast<double>(static_cast<float>(value));
        const std::string why_narrowed = wrong(narrowed);
        if (why_narrowed.empty()) return why_narrowed;
        return why_narrowed + " (got " + text + ", " + number_text(narrowed) + " as a 32-bit float)";
      },
      std::move(description));
}

// A seed's text past 2^64-1, which the parser would clamp to it: refused, as a negative one is.
CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        // Read as the parser reads an integer (decimal, +, 0x): past 2^64-1 it would clamp.
        errno = 0;
        (void)std::strtoull(text.c_str(), nullptr, 0);
        if (errno == ERANGE) return "must be at most 18446744073709551615 (got " + text + ")";
        return "";
      },
      "");
}

}  // namespace

std::string printable_line(const std::string& text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  for (; i < text.size() && out.size() < max_bytes; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    char escape[8];
    if (byte == '\n') {
      out += "\\n";
    } else if (byte == '\t') {
      out += "\\t";
    } else if (byte == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7f) {
      append_byte_escape(out, byte);
    } else if (tok::c1_control_at(text, i)) {
      std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned char>(text[++i]));
      out += escape;
    } else {
      out += text[i];
    }
  }
  // Not inside a character: back to the start of the one cut.
  while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xc0) == 0x80 && !out.empty()) {
    out.pop_back();
    --i;
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size() - i) + " more bytes)";
  return out;
}

std::string unescape_stop(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    const char* meant = nullptr;
    if (text[i] == '\\') {
      meant = next == 'n' ? "\n" : next == 't' ? "\t" : next == 'r' ? "\r" : next == '\\' ? "\\" : nullptr;
    }
    if (meant == nullptr) {
      out += text[i];
    } else {
      out += meant;
      ++i;
    }
  }
  return out;
}

CLI::Validator at_least(double low) {
  return number_check(low == 0 ? "NONNEGATIVE" : ">= " + number_text(low), [low](double value) {
    return value >= low ? "" : "must be at least " + number_text(low);
  });
}

CLI::Validator more_than(double low) {
  return number_check(low == 0 ? "POSITIVE" : "> " + number_text(low), [low](double value) {
    return value > low ? "" : "must be more than " + number_text(low);
  });
}

CLI::Validator between(double low, double high, bool low_open) {
  const std::string range = (low_open ? "(" : "[") + number_text(low) + ", " + number_text(high) + "]";
  return number_check("in " + range, [=](double value) {
    const bool inside = (low_open ? value > low : value >= low) && value <= high;
    return inside ? "" : "must be in " + range;
  });
}

CLI::Validator finite_number() {
  return number_check("", [](double) { return std::string(); });
}

CLI::Validator in_range(const ValueRange& range) {
  if (!range.bounded_below() && !range.bounded_above()) return finite_number();
  if (!range.bounded_above()) return range.low_open ? more_than(range.low) : at_least(range.low);
  return between(range.low, range.high, range.low_open);
}

CLI::Validator device_name() {
  return CLI::Validator(
      [](std::string& value) {
        try {
          (void)parse_device(value);
        } catch (const Error& error) {
          return std::string(error.what());
        }
        return std::string();
      },
      "", "");
}

std::string utf8_problem(const std::string& text) {
  const size_t valid = tok::utf8_valid_prefix(text);
  return valid == text.size() ? std::string() : "not valid UTF-8 (byte " + std::to_string(valid + 1) + " of it)";
}

CLI::Validator utf8_text() {
  return CLI::Validator([](std::string& value) { return utf8_problem(value); }, "", "");
}

void add_tokenizer_option(CLI::App* command, ModelArgs& args) {
  command
      ->add_option("--tokenizer", args.tokenizer_dir,
                   "folder with tokenizer.json (or qwen.tiktoken), tokenizer_config.json and the chat template "
                   "(default: the model's)")
      ->check(CLI::ExistingDirectory);
}

void add_model_options(CLI::App* command, ModelArgs& args) {
  command->add_option("-m,--model", args.model_dir, "Hugging Face model folder (config.json, *.safetensors)")
      ->required()
      ->check(CLI::ExistingDirectory);
  command->add_option("--device", args.device, "auto (a usable GPU, else the CPU), cpu, gpu or gpu:N (cuda, cuda:N: the same)")
      ->check(device_name())
      ->capture_default_str();
  command->add_option("--dtype", args.dtype, "GPU weight/activation type: bf16 or f16 (the CPU computes in f32)")
      ->check(CLI::IsMember({"bf16", "f16", "fp16", "bfloat16", "float16"}))
      ->capture_default_str();
  command->add_option("--threads", args.threads, "CPU threads (0: all cores)")
      ->check(between(0, kMaxThreads, false))
      ->capture_default_str();
  command->add_option("--max-context", args.max_context,
                      "tokens per sequence the KV cache is planned for (0: the model's maximum, capped at 32768)")
      ->check(at_least(0));
  command->add_option("--kv-cache-gb", args.kv_cache_gb,
                      "KV cache size in GiB (0: enough for one --max-context sequence)")
      ->check(between(0, 1 << 20));
  command->add_flag("--memory-report", args.memory_report,
                    "print where the memory goes: weights, KV cache, workspace, runtime, measured peak");
}

void add_sampling_options(CLI::App* command, SamplingArgs& args, bool model_defaults) {
  command->add_option("--temperature", args.temperature,
                      model_defaults ? "sampling temperature; 0 = greedy (default: greedy, or generation_config.json's "
                                       "settings when it sets do_sample; its repetition_penalty either way, as "
                                       "transformers applies it)"
                                     : "sampling temperature; 0 = greedy (default: greedy; generation_config.json is "
                                       "not read, so runs compare like with like)")
      ->check(in_range(sampling_range::kTemperature));
  command->add_option("--top-k", args.top_k,
                      model_defaults ? "keep the k most likely tokens (0: off; default: generation_config.json's top_k, "
                                       "else 50, as transformers; used only when sampling)"
                                     : "keep the k most likely tokens (0: off)")
      ->check(in_range(sampling_range::kTopK));
  command->add_option("--top-p", args.top_p, "nucleus sampling: keep the smallest set with probability >= p, in (0, 1]")
      ->check(in_range(sampling_range::kTopP));
  command->add_option("--min-p", args.min_p, "drop tokens below min_p × the top probability, in [0, 1]")
      ->check(in_range(sampling_range::kMinP));
  command->add_option("--repetition-penalty", args.repetition_penalty,
                      "penalise tokens already in the context (1: off)")
      ->check(in_range(sampling_range::kRepetitionPenalty));
  command->add_option("--presence-penalty", args.presence_penalty,
                      "subtract this from tokens already generated (0: off; the prompt's do not count, as in "
                      "OpenAI's API)")
      ->check(in_range(sampling_range::kPresencePenalty));
  command->add_option("--frequency-penalty", args.frequency_penalty,
                      "subtract this × count for tokens already generated (0: off)")
      ->check(in_range(sampling_range::kFrequencyPenalty));
  command->add_option("--seed", args.seed,
                      "random seed, 0 to 2^64-1 (default 0: the same settings give the same output run after run; "
                      "pass another seed for other draws)")
      ->check(at_least(0))
      ->check(seed_range());
}

SamplingParams effective_sampling(const SamplingArgs& args, const CLI::App& command, const ModelConfig& config) {
  SamplingParams params = model_default_sampling(config);
  if (command.count("--temperature")) params.temperature = args.temperature;
  if (command.count("--top-k")) params.top_k = args.top_k;
  if (command.count("--top-p")) params.top_p = args.top_p;
  if (command.count("--min-p")) params.min_p = args.min_p;
  if (command.count("--repetition-penalty")) params.repetition_penalty = args.repetition_penalty;
  if (command.count("--presence-penalty")) params.presence_penalty = args.presence_penalty;
  if (command.count("--frequency-penalty")) params.frequency_penalty = args.frequency_penalty;
  params.seed = args.seed;
  // At temperature 0 the choice is the argmax: options that shape a draw change nothing
  // (penalties still do, as they change the logits). Said, as transformers warns.
  if (params.temperature == 0.f) {
    std::string unused;
    for (const char* name : {"--top-k", "--top-p", "--min-p", "--seed"}) {
      if (command.count(name)) unused += (unused.empty() ? "" : ", ") + std::string(name);
    }
    if (!unused.empty()) {
      std::fprintf(stderr, "note: %s %s no effect at temperature 0 (greedy); give --temperature to sample\n",
                   unused.c_str(), unused.find(',') == std::string::npos ? "has" : "have");
    }
  }
  return params;
}

void print_sampling(const SamplingParams& p, const ModelConfig& config) {
  std::fprintf(stderr,
               "sampling: temperature %g, top_k %d, top_p %g, min_p %g, repetition %g, presence %g, "
               "frequency %g, seed %llu%s\n",
               p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty, p.presence_penalty,
               p.frequency_penalty, static_cast<unsigned long long>(p.seed),
               config.default_do_sample ? " (defaults from generation_config.json)" : "");
}

void print_memory_report(Engine& engine, size_t request_kv_bytes) {
  const MemoryPlan& plan = engine.memory_plan();
  engine.device_used_now();
  std::fprintf(stderr, "memory (%s)\n", engine.backend().name().c_str());
  if (plan.weights > 0 || plan.mapped_weights == 0) {
    std::fprintf(stderr, "  weights        %s\n", format_bytes(static_cast<double>(plan.weights)).c_str());
  }
  if (plan.mapped_weights > 0 && engine.backend().uses_host_memory()) {
    std::fprintf(stderr, "  mapped weights %s (used in place from the checkpoint files)\n",
                 format_bytes(static_cast<double>(plan.mapped_weights)).c_str());
  }
  std::fprintf(stderr, "  KV cache       %s (%d blocks of %d tokens and a scratch one, %s per token, %d-token context)\n",
               format_bytes(static_cast<double>(plan.kv_pool)).c_str(), plan.kv_blocks, plan.kv_block_size,
               format_bytes(static_cast<double>(plan.kv_bytes_per_token)).c_str(), plan.max_context);
  std::fprintf(stderr, "  workspace      %s\n", format_bytes(static_cast<double>(plan.workspace)).c_str());
  if (plan.device_total > 0) {
    std::fprintf(stderr, "  backend        %s (matrix library, attention partials, sampling)\n",
                 format_bytes(static_cast<double>(engine.memory_plan().backend_workspace)).c_str());
    std::fprintf(stderr, "  runtime/other  %s (in use before loading: driver context, other processes)\n",
                 format_bytes(static_cast<double>(plan.used_before_load)).c_str());
    const size_t peak = engine.device_used_peak();
    const size_t planned = plan.weights + plan.kv_pool + plan.used_before_load;
    std::fprintf(stderr, "  peak in use    %s of %s; %s beyond weights, KV cache and runtime\n",
                 format_bytes(static_cast<double>(peak)).c_str(), format_bytes(static_cast<double>(plan.device_total)).c_str(),
                 format_bytes(static_cast<double>(peak > planned ? peak - planned : 0)).c_str());
  }
  if (request_kv_bytes > 0) {
    std::fprintf(stderr, "  this request   %s of KV cache\n", format_bytes(static_cast<double>(request_kv_bytes)).c_str());
  }
}

namespace {
int g_stdout_failure_errno = 0;  // the first failed write's; one process, one stdout
}  // namespace

bool stdout_ok() {
  if (!std::ferror(stdout)) return true;
  // A write cut short by Ctrl-C in chat (EINTR) is the stop asked for, not the failure.
  if (g_stdout_failure_errno == 0 && errno != EINTR) g_stdout_failure_errno = errno;
  return false;
}

int stdout_failure_errno() { return g_stdout_failure_errno; }

double seconds_since_process_start() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The positions a model was trained for: max_position_embeddings, or what config.json's
// rope_scaling extends it to.
static int64_t trained_positions(const ModelConfig& config) {
  int64_t trained = config.max_position_embeddings;
  if (config.rope.type != RopeType::kDefault && config.rope.factor > 1) {
    const int64_t base = config.rope.original_max_position_embeddings > 0 ? config.rope.original_max_position_embeddings
                                                                           : config.max_position_embeddings;
    trained = std::max<int64_t>(trained, static_cast<int64_t>(static_cast<double>(base) * config.rope.factor));
  }
  return trained;
}

void note_context_past_training(const ModelConfig& config, int64_t context, const std::string& what,
                                const char* consequence, const char* source) {
  const int64_t trained = trained_positions(config);
  if (trained > 0 && context > trained) {
    std::fprintf(stderr, "note: %s is past the %lld positions this model was trained for (%s: "
                         "max_position_embeddings%s); %s\n",
                 what.c_str(), static_cast<long long>(trained), source,
                 config.rope.type != RopeType::kDefault ? " and rope_scaling" : "", consequence);
  }
}

// A --max-context past the trained positions is allowed, with a note.
static void note_max_context_past_training(const ModelArgs& args) {
  if (args.max_context <= 0) return;
  ModelConfig config;
  try {
    config = load_model_config(args.model_dir);
  } catch (const std::exception&) {
    return;  // loading the model says what is wrong with the folder
  }
  note_context_past_training(config, args.max_context, "--max-context " + std::to_string(args.max_context),
                             "text beyond them may degrade");
}

EngineOptions engine_options(const ModelArgs& args) {
  EngineOptions options;
  options.device = args.device;
  options.dtype = parse_dtype(args.dtype);
  options.threads = args.threads;
  options.max_context = args.max_context;
  options.kv_cache_gb = args.kv_cache_gb;
  note_max_context_past_training(args);
  if (isatty(STDERR_FILENO)) {
    auto start = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    options.load_progress = [start](uint64_t done, uint64_t total) {
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start).count();
      double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
      int filled = static_cast<int>(fraction * 30);
      std::string bar(filled, '#');
      bar.resize(30, '.');
      double rate = seconds > 0 ? static_cast<double>(done) / seconds / 1e9 : 0.0;
      std::fprintf(stderr, "\rloading [%s] %5.1f%%  %.2f/%.2f GB  %.2f GB/s", bar.c_str(),
                   fraction * 100, static_cast<double>(done) / 1e9, static_cast<double>(total) / 1e9, rate);
      if (done >= total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  return options;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '[' || c == ']') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (end == i) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "--ids: expected non-negative integers separated by spaces or commas, got '" +
                      text.substr(i, 20) + "'");
    }
    if (end - i > 10) {
      throw Error(ErrorCategory::kInvalidArgument, "--ids: token id " + text.substr(i, std::min<size_t>(end - i, 20)) +
                                                       (end - i > 20 ? "..." : "") + " is too large");
    }
    int64_t value = std::stoll(text.substr(i, end - i));
    if (value > std::numeric_limits<int32_t>::max()) {
      throw Error(ErrorCategory::kInvalidArgument, "--ids: token id " + text.substr(i, end - i) + " is too large");
    }
    ids.push_back(static_cast<int32_t>(value));
    i = end;
  }
  return ids;
}

void prepare_chat(const ModelConfig& config, const Tokenizer& tokenizer, GenerateOptions& options) {
  const std::vector<int32_t> stops = chat_stop_ids(config, tokenizer);
  options.extra_stop_ids.insert(options.extra_stop_ids.end(), stops.begin(), stops.end());
  if (config.architecture != Architecture::kQwenV1) return;
  if (config.chat_format != "chatml") {
    std::fprintf(stderr,
                 "note: this is a base model (generation_config.json chat_format \"%s\"), not a Chat "
                 "model; it was not trained on the ChatML turns chat uses\n",
                 config.chat_format.empty() ? "absent" : config.chat_format.c_str());
  }
}

}  // namespace qwenrt::cli
