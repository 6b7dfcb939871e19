// qwenrt score: log-probabilities of a token sequence under the model (teacher forcing).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"

namespace qwenrt::cli {
namespace {

struct ScoreArgs {
  ModelArgs model;
  std::string ids;
  std::string format = "text";
};

int run_score(const ScoreArgs& args) {
  std::vector<int32_t> ids = parse_ids(args.ids);
  if (ids.size() < 2) throw Error(ErrorCategory::kInvalidArgument, "--ids: scoring needs at least two token ids");
  Engine engine(args.model.model_dir, engine_options(args.model));
  ScoreResult result = engine.score(ids);
  if (args.model.memory_report) print_memory_report(engine);  // stderr: the JSON stays clean
  if (args.format == "json") {
    nlohmann::ordered_json out;
    out["logprobs"] = result.logprobs;
    out["argmax"] = result.argmax;
    out["nll_mean"] = result.nll_mean;
    out["ppl"] = result.perplexity;
    out["tokens"] = result.logprobs.size();  // scored: each after the first
    out["seconds"] = result.seconds;
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("position  token  logprob\n");
  for (size_t i = 0; i < result.logprobs.size(); ++i) {
    std::printf("%8zu %6d %9.5f\n", i + 1, ids[i + 1], result.logprobs[i]);
  }
  std::printf("mean NLL %.6f  perplexity %.4f  (%zu tokens, %zu of them scored: each after the first, %.3f s)\n",
              result.nll_mean, result.perplexity, ids.size(), result.logprobs.size(), result.seconds);
  return kExitOk;
}

}  // namespace

void add_score_command(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<ScoreArgs>();
  CLI::App* cmd = root.add_subcommand(
      "score", "Log-probability of each token given the ones before it, mean NLL and perplexity");
  add_model_options(cmd, args->model);
  cmd->add_option("--ids", args->ids, "token ids to score, e.g. \"1 2 3 4\" (at least two)")->required();
  cmd->add_option("--format", args->format,
                  "text: a table; json: {\"logprobs\", \"argmax\" (most likely token per position), \"nll_mean\", \"ppl\", "
                  "\"tokens\" (how many were scored), \"seconds\" (its wall time)}")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([args, &exit_code]() { exit_code = run_score(*args); });
}

}  // namespace qwenrt::cli
