// qwenrt generate: continue a prompt of token ids.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"

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
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string format = "text";
};

int run_generate(const GenerateArgs& args) {
  std::vector<int32_t> prompt = parse_ids(args.ids);
  if (prompt.empty()) throw Error(ErrorCategory::kInvalidArgument, "--ids: no token ids given");
  if (args.top_p <= 0.f || args.top_p > 1.f) {
    throw Error(ErrorCategory::kInvalidArgument, "--top-p must be in (0, 1]");
  }
  Engine engine(args.model.model_dir, engine_options(args.model));
  GenerateOptions options;
  options.max_new_tokens = args.max_new_tokens;
  options.stop_at_eos = !args.ignore_eos;
  options.sampling.temperature = args.temperature;
  options.sampling.top_k = args.top_k;
  options.sampling.top_p = args.top_p;
  options.sampling.min_p = args.min_p;
  options.sampling.repetition_penalty = args.repetition_penalty;
  options.sampling.seed = args.seed;
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
  cmd->add_option("--temperature", args->temperature, "sampling temperature; 0 = greedy")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "keep the k most likely tokens (0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", args->top_p, "nucleus sampling: keep the smallest set with probability >= p, in (0, 1]");
  cmd->add_option("--min-p", args->min_p, "drop tokens below min_p × the top probability, in [0, 1]")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repetition-penalty", args->repetition_penalty, "penalise tokens already in the context (1: off)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "random seed; same seed and settings give the same output");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_option("--format", args->format, "text: ids as they are generated; json: ids and timings")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([args, &exit_code]() { exit_code = run_generate(*args); });
}

}  // namespace qwenrt::cli
