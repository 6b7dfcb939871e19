// qwenrt bench: prompt tokens/s, time to first token, decode tokens/s and device memory,
// with the fraction of the device's bandwidth and matrix throughput reached.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "model/presets.h"

namespace qwenrt::cli {
namespace {

struct BenchArgs {
  ModelArgs model;
  std::string synthetic;
  int prompt = 512;
  int gen = 128;
  int repeat = 3;
  int warmup = 1;
  std::string format = "table";
};

int run_bench(BenchArgs args, const CLI::App& cmd) {
  const bool have_model = !args.model.model_dir.empty();
  if (have_model && !args.synthetic.empty()) {
    throw Error(ErrorCategory::kInvalidArgument, "give either -m DIR or --synthetic NAME, not both");
  }
  if (args.model.device == "auto") args.model.device = cuda_backend_available() ? "cuda" : "cpu";
  // No model named: the synthetic preset that suits this machine.
  if (!have_model && args.synthetic.empty()) {
    if (args.model.device == "cpu") {
      args.synthetic = "qwen3-0.6b";
      if (cmd.count("--prompt") == 0) args.prompt = 64;
      if (cmd.count("--gen") == 0) args.gen = 16;
      if (cmd.count("--repeat") == 0) args.repeat = 1;
      if (cmd.count("--warmup") == 0) args.warmup = 0;
    } else {
      args.synthetic = "qwen2.5-7b";
    }
  }
  EngineOptions options = engine_options(args.model);
  if (args.model.max_context == 0) options.max_context = args.prompt + args.gen;
  std::string model_name = have_model ? args.model.model_dir : args.synthetic + " (synthetic)";
  if (args.format == "table") {
    std::fprintf(stderr, "preparing %s on %s...\n", model_name.c_str(), args.model.device.c_str());
  }
  std::unique_ptr<Engine> engine =
      have_model ? std::make_unique<Engine>(args.model.model_dir, options)
                 : std::make_unique<Engine>(synthetic_config(args.synthetic), options, 1234);
  BenchOptions bench;
  bench.prompt_tokens = args.prompt;
  bench.gen_tokens = args.gen;
  bench.repeat = args.repeat;
  bench.warmup = args.warmup;
  BenchResult result = engine->bench(bench);
  const MemoryPlan& plan = engine->memory_plan();
  DeviceInfo info = engine->backend().device_info();
  std::string dtype = dtype_name(engine->backend().activation_dtype());
  if (args.format == "json") {
    nlohmann::ordered_json out;
    out["model"] = model_name;
    out["device"] = info.name;
    out["dtype"] = dtype;
    out["prompt_tokens"] = result.prompt_tokens;
    out["gen_tokens"] = result.gen_tokens;
    out["repeat"] = result.repeat;
    out["prompt_tokens_per_s"] = result.prompt_tokens_per_s;
    out["prompt_ms"] = result.prompt_seconds * 1e3;
    out["time_to_first_token_ms"] = result.time_to_first_token * 1e3;
    out["decode_tokens_per_s"] = result.decode_tokens_per_s;
    out["decode_ms_per_token"] = result.decode_seconds * 1e3 / result.gen_tokens;
    out["decode_bytes_per_token"] = result.decode_bytes_per_token;
    out["bandwidth_fraction"] = result.bandwidth_fraction;
    out["prefill_flops"] = result.prefill_flops;
    out["matmul_fraction"] = result.matmul_fraction;
    out["memory"] = {{"weights", plan.weights},          {"mapped_weights", plan.mapped_weights},
                     {"kv_cache", plan.kv_pool},         {"workspace", plan.workspace},
                     {"runtime_other", plan.used_before_load}, {"peak_used", result.peak_used_bytes},
                     {"device_total", plan.device_total}};
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("qwenrt bench: %s on %s, %s, prompt %d, gen %d, %d run%s (medians)\n", model_name.c_str(),
              info.name.c_str(), dtype.c_str(), result.prompt_tokens, result.gen_tokens, result.repeat,
              result.repeat == 1 ? "" : "s");
  auto fraction = [](double value, double peak, const char* unit, double scale) {
    if (value <= 0) return std::string();
    char text[96];
    std::snprintf(text, sizeof(text), "  %4.1f%% of %.0f %s", value * 100, peak / scale, unit);
    return std::string(text);
  };
  std::printf("  %-20s %10.1f tok/s  (%.2f ms)%s\n", "prompt", result.prompt_tokens_per_s,
              result.prompt_seconds * 1e3,
              fraction(result.matmul_fraction, info.peak_matmul_flops, "TFLOP/s", 1e12).c_str());
  std::printf("  %-20s %10.2f ms\n", "time to first token", result.time_to_first_token * 1e3);
  std::printf("  %-20s %10.1f tok/s  (%.2f ms/token)%s\n", "decode", result.decode_tokens_per_s,
              result.decode_seconds * 1e3 / result.gen_tokens,
              fraction(result.bandwidth_fraction, info.peak_bandwidth, "GB/s", 1e9).c_str());
  std::printf("memory\n");
  std::printf("  %-20s %s\n", "weights", format_bytes(static_cast<double>(plan.weights ? plan.weights : plan.mapped_weights)).c_str());
  std::printf("  %-20s %s (%d tokens, %s/token)\n", "KV cache", format_bytes(static_cast<double>(plan.kv_pool)).c_str(),
              plan.kv_blocks * plan.kv_block_size, format_bytes(static_cast<double>(plan.kv_bytes_per_token)).c_str());
  std::printf("  %-20s %s\n", "workspace", format_bytes(static_cast<double>(plan.workspace)).c_str());
  if (plan.device_total > 0) {
    std::printf("  %-20s %s\n", "runtime/other", format_bytes(static_cast<double>(plan.used_before_load)).c_str());
    std::printf("  %-20s %s of %s\n", "peak in use", format_bytes(static_cast<double>(result.peak_used_bytes)).c_str(),
                format_bytes(static_cast<double>(plan.device_total)).c_str());
  }
  return kExitOk;
}

}  // namespace

void add_bench_command(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = root.add_subcommand(
      "bench",
      "Measure prompt tokens/s, time to first token, decode tokens/s and memory. With no model, "
      "runs the synthetic preset that suits this machine (GPU: qwen2.5-7b; CPU: a short qwen3-0.6b run)");
  cmd->add_option("-m,--model", args->model.model_dir, "Hugging Face model folder")->check(CLI::ExistingDirectory);
  std::string names;
  for (const auto& name : synthetic_names()) names += (names.empty() ? "" : ", ") + name;
  cmd->add_option("--synthetic", args->synthetic, "random weights of a released model's shape: " + names)
      ->check(CLI::IsMember(synthetic_names()));
  cmd->add_option("--device", args->model.device, "auto (a usable GPU, else the CPU), cpu, gpu or gpu:N (cuda, cuda:N: the same)")
      ->capture_default_str();
  cmd->add_option("--dtype", args->model.dtype, "GPU weight/activation type: bf16 or f16")
      ->check(CLI::IsMember({"bf16", "f16", "fp16", "bfloat16", "float16"}))
      ->capture_default_str();
  cmd->add_option("--threads", args->model.threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--prompt", args->prompt, "prompt tokens")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--gen", args->gen, "generated tokens")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "timed runs (medians are reported)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "untimed runs first")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--max-context", args->model.max_context, "KV cache context (default: prompt + gen)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--format", args->format, "table or json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  cmd->callback([args, cmd, &exit_code]() { exit_code = run_bench(*args, *cmd); });
}

}  // namespace qwenrt::cli
