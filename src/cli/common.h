// Options and helpers shared by the commands that load a model.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/units.h"  // format_bytes for the reports
#include "engine/sampling_ranges.h"
#include "qwenrt/engine.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::cli {

struct ModelArgs {
  std::string model_dir;
  bool memory_report = false;
  std::string device = "auto";
  std::string dtype = "bf16";
  int threads = 0;
  int max_context = 0;
  double kv_cache_gb = 0;
  std::string tokenizer_dir;  // --tokenizer, where the command takes it; empty: the model's folder

  const std::string& tokenizer_folder() const { return tokenizer_dir.empty() ? model_dir : tokenizer_dir; }
};

struct SamplingArgs {
  float temperature = 0.f;
  int top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  uint64_t seed = 0;
};

// Checks of a numeric option with messages a user reads at a glance ("must be at least 1
// (got 0)"); each refuses what is not a number, NaN and infinities, and checks the value as
// the float it becomes (a sampling option: 1e39 is infinite, 1e-50 is 0).
CLI::Validator at_least(double low);                                  // >= low
CLI::Validator more_than(double low);                                 // > low
CLI::Validator between(double low, double high, bool low_open = false);  // [low, high] or (low, high]
CLI::Validator finite_number();                                       // any finite number
CLI::Validator in_range(const ValueRange& range);                     // a range of engine/sampling_ranges.h
CLI::Validator device_name();  // --device: auto, cpu, gpu[:N], cuda[:N], checked before anything loads
CLI::Validator utf8_text();    // text for the model: valid UTF-8 (the first bad byte named)
// "not valid UTF-8 (byte N of it)" for text that is not, naming its first bad byte; else "".
std::string utf8_problem(const std::string& text);

// --threads at most: far past any machine's cores, short of what makes a pool of threads
// the work itself (100,000 took minutes to start).
constexpr int kMaxThreads = 1024;

// Adds --temperature, --top-k, --top-p, --min-p, the penalties and --seed, validated.
// model_defaults: the command starts from generation_config.json's sampling (generate,
// chat); bench does not.
void add_sampling_options(CLI::App* command, SamplingArgs& args, bool model_defaults = true);
// The model's recommended defaults (generation_config.json, when it asks for sampling) under
// the options given on the command line.
SamplingParams effective_sampling(const SamplingArgs& args, const CLI::App& command, const ModelConfig& config);
void print_sampling(const SamplingParams& params, const ModelConfig& config);

// Adds -m/--model, --device, --dtype, --threads, --max-context, --kv-cache-gb.
void add_model_options(CLI::App* command, ModelArgs& args);
// --tokenizer DIR: the tokenizer (and chat template) from another folder than the model's.
void add_tokenizer_option(CLI::App* command, ModelArgs& args);
// Turns the parsed options into EngineOptions (with a load progress bar on a terminal).
EngineOptions engine_options(const ModelArgs& args);
// A note on stderr when `context` positions (`what` names them) are past those the model was
// trained for; `consequence` says what that means for the command, `source` where the
// config came from.
void note_context_past_training(const ModelConfig& config, int64_t context, const std::string& what,
                                const char* consequence, const char* source = "config.json");
// Seconds since the process started (main calls it first, which fixes the start).
double seconds_since_process_start();

// Whether stdout is still taking output. A streaming command asks after each piece and stops
// once it fails; the first failure's reason is kept for the message at exit (by then errno
// has moved on, and the final flush has nothing left to fail on).
bool stdout_ok();
int stdout_failure_errno();  // 0 when none was seen

// Parses "1 2 3" or "1,2,3" into ids; throws Error(kInvalidArgument) on anything else.
std::vector<int32_t> parse_ids(const std::string& text);

// A chat's stops (chat_stop_ids: the tokenizer's EOS, and the original Qwen's ChatML turn
// markers) added to `options`; for the original Qwen, a note on stderr when the folder is a
// base model (chat_format "raw").
void prepare_chat(const ModelConfig& config, const Tokenizer& tokenizer, GenerateOptions& options);

// A stop string as typed on a command line: \n, \t, \r and \\ become a line break, a tab,
// a carriage return and a backslash (a shell passes "\n" as two characters); any other
// backslash stays as it is.
std::string unescape_stop(const std::string& text);

// A message fit for one terminal line: control characters (C0, DEL and C1, which a file's
// names or a model's strings may carry into an error) written as escapes, and text past
// `max_bytes` cut at a character's start with the count of what was left out.
std::string printable_line(const std::string& text, size_t max_bytes = 2000);

// Prints the memory plan, the measured peak and (when given) one request's KV use to stderr.
void print_memory_report(Engine& engine, size_t request_kv_bytes = 0);

}  // namespace qwenrt::cli
