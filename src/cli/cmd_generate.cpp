// qwenrt generate: continue a prompt of token ids.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "model/config.h"

namespace qwenrt::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string ids;
  int max_new_tokens = 32;
  float temperature = 0.f;
  int top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  uint64_t seed = 0;
  bool verbose = false;
  bool ignore_eos = false;
  std::string format = "text";
};

// Sampling settings: the model's recommended defaults (generation_config.json, when it asks
// for sampling) under the options given on the command line.
SamplingParams effective_sampling(const GenerateArgs& args, const CLI::App& cmd, const ModelConfig& config) {
  SamplingParams params;
  if (config.default_do_sample) {
    params.temperature = config.default_temperature.value_or(1.f);
    params.top_p = config.default_top_p.value_or(1.f);
    params.top_k = config.default_top_k.value_or(0);
    params.min_p = config.default_min_p.value_or(0.f);
    params.repetition_penalty = config.default_repetition_penalty.value_or(1.f);
  }
  if (cmd.count("--temperature")) params.temperature = args.temperature;
  if (cmd.count("--top-k")) params.top_k = args.top_k;
  if (cmd.count("--top-p")) params.top_p = args.top_p;
  if (cmd.count("--min-p")) params.min_p = args.min_p;
  if (cmd.count("--repetition-penalty")) params.repetition_penalty = args.repetition_penalty;
  if (cmd.count("--presence-penalty")) params.presence_penalty = args.presence_penalty;
  if (cmd.count("--frequency-penalty")) params.frequency_penalty = args.frequency_penalty;
  params.seed = args.seed;
  return params;
}

int run_generate(const GenerateArgs& args, const CLI::App& cmd) {
  std::vector<int32_t> prompt = parse_ids(args.ids);
  if (prompt.empty()) throw Error(ErrorCategory::kInvalidArgument, "--ids: no token ids given");
  if (cmd.count("--top-p") && (args.top_p <= 0.f || args.top_p > 1.f)) {
    throw Error(ErrorCategory::kInvalidArgument, "--top-p must be in (0, 1]");
  }
  Engine engine(args.model.model_dir, engine_options(args.model));
  GenerateOptions options;
  options.max_new_tokens = args.max_new_tokens;
  options.stop_at_eos = !args.ignore_eos;
  options.sampling = effective_sampling(args, cmd, engine.config());
  if (args.verbose) {
    const SamplingParams& p = options.sampling;
    std::fprintf(stderr,
                 "sampling: temperature %g, top_k %d, top_p %g, min_p %g, repetition %g, presence %g, "
                 "frequency %g, seed %llu%s\n",
                 p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty, p.presence_penalty,
                 p.frequency_penalty, static_cast<unsigned long long>(p.seed),
                 engine.config().default_do_sample ? " (defaults from generation_config.json)" : "");
    print_memory_report(engine);
  }
  const bool text = args.format == "text";
  bool first = true;
  GenerateResult result = engine.generate(prompt, options, [&](int32_t id) {
    if (text) {
      std::printf(first ? "%d" : " %d", id);
      std::fflush(stdout);
      first = false;
    }
    return true;
  });
  if (args.model.memory_report) print_memory_report(engine, result.kv_bytes_used);
  if (text) {
    std::printf("\n");
    return kExitOk;
  }
  nlohmann::ordered_json out;
  out["ids"] = result.ids;
  out["finish_reason"] = result.finish_reason;
  out["prompt_tokens"] = result.prompt_tokens;
  out["generated_tokens"] = result.ids.size();
  out["prompt_ms"] = result.prompt_seconds * 1e3;
  out["time_to_first_token_ms"] = result.time_to_first_token * 1e3;
  out["prompt_tokens_per_s"] = result.prompt_seconds > 0 ? result.prompt_tokens / result.prompt_seconds : 0.0;
  double decoded = result.ids.size() > 1 ? static_cast<double>(result.ids.size() - 1) : 0.0;
  out["decode_tokens_per_s"] = result.decode_seconds > 0 ? decoded / result.decode_seconds : 0.0;
  out["device"] = engine.backend().name();
  std::printf("%s\n", out.dump().c_str());
  return kExitOk;
}

}  // namespace

void add_generate_command(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = root.add_subcommand("generate", "Continue a prompt given as token ids");
  add_model_options(cmd, args->model);
  cmd->add_option("--ids", args->ids, "prompt token ids, e.g. \"151644 872 198\"")->required();
  cmd->add_option("-n,--max-new-tokens", args->max_new_tokens, "tokens to generate at most")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--temperature", args->temperature,
                  "sampling temperature; 0 = greedy (default: greedy, or generation_config.json's "
                  "settings when it sets do_sample)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", args->top_k, "keep the k most likely tokens (0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", args->top_p, "nucleus sampling: keep the smallest set with probability >= p, in (0, 1]");
  cmd->add_option("--min-p", args->min_p, "drop tokens below min_p × the top probability, in [0, 1]")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repetition-penalty", args->repetition_penalty, "penalise tokens already in the context (1: off)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--presence-penalty", args->presence_penalty, "subtract this from tokens already present (0: off)");
  cmd->add_option("--frequency-penalty", args->frequency_penalty, "subtract this × count for tokens already present (0: off)");
  cmd->add_flag("-v,--verbose", args->verbose, "print the sampling settings in effect and the memory plan");
  cmd->add_option("--seed", args->seed, "random seed; same seed and settings give the same output");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_option("--format", args->format, "text: ids as they are generated; json: ids and timings")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([args, cmd, &exit_code]() { exit_code = run_generate(*args, *cmd); });
}

}  // namespace qwenrt::cli
