// qwenrt bench: prompt tokens/s, time to first token, decode tokens/s and device memory,
// with the fraction of the device's bandwidth and matrix throughput reached. With --batch N,
// N sequences are prefilled and then decoded together (the batched step).
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "model/config.h"
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
  int prefill_chunk = 0;  // tokens per forward pass (0: the engine's default)
  bool no_graphs = false;
  SamplingArgs sampling;
  int batch = 0;  // 0: the single-sequence benchmark
  std::string format = "table";
};

// `host`: the backend uses the checkpoint's matrices in place (the CPU), so the weights it
// allocated are only what it converted or copied, and the mapped files are listed beside.
void print_memory(const MemoryPlan& plan, size_t peak_used, bool host) {
  std::printf("memory\n");
  const bool mapped = host && plan.mapped_weights > 0;
  if (plan.weights > 0 || !mapped) {
    std::printf("  %-20s %s%s\n", "weights", format_bytes(static_cast<double>(plan.weights)).c_str(),
                mapped ? " (converted or copied)" : "");
  }
  if (mapped) {
    std::printf("  %-20s %s (used in place from the checkpoint files)\n", "mapped weights",
                format_bytes(static_cast<double>(plan.mapped_weights)).c_str());
  }
  std::printf("  %-20s %s (%d tokens and a scratch block, %s/token)\n", "KV cache",
              format_bytes(static_cast<double>(plan.kv_pool)).c_str(),
              plan.kv_blocks * plan.kv_block_size, format_bytes(static_cast<double>(plan.kv_bytes_per_token)).c_str());
  std::printf("  %-20s %s\n", "workspace", format_bytes(static_cast<double>(plan.workspace)).c_str());
  if (plan.device_total > 0) {
    std::printf("  %-20s %s\n", "runtime/other", format_bytes(static_cast<double>(plan.used_before_load)).c_str());
    std::printf("  %-20s %s of %s\n", "peak in use", format_bytes(static_cast<double>(peak_used)).c_str(),
                format_bytes(static_cast<double>(plan.device_total)).c_str());
  }
}

// The device as the table names it: a CPU with the threads it ran on.
std::string device_text(const DeviceInfo& info) {
  if (info.threads <= 0) return info.name;
  return info.name + " (" + std::to_string(info.threads) + " thread" + (info.threads == 1 ? "" : "s") + ")";
}

// The settings a run is repeated with: the threads (null on a GPU), the warm-up runs and the
// sampling seed (which only a temperature above 0 uses).
nlohmann::ordered_json json_header(const std::string& model_name, const DeviceInfo& info, const std::string& dtype,
                                   const BenchArgs& args) {
  nlohmann::ordered_json out;
  out["model"] = model_name;
  out["device"] = info.name;
  out["threads"] = info.threads > 0 ? nlohmann::ordered_json(info.threads) : nlohmann::ordered_json();
  out["dtype"] = dtype;
  out["warmup"] = args.warmup;
  out["seed"] = args.sampling.seed;
  return out;
}

// Each run's rates on stderr as it ends: always beside the table, and beside JSON where
// stderr is a terminal (a person waiting; a script reading stderr gets the JSON alone).
std::function<void(const BenchRunDone&)> progress(const BenchArgs& args) {
  if (args.format != "table" && !isatty(STDERR_FILENO)) return nullptr;
  return [](const BenchRunDone& run) {
    std::fprintf(stderr, "  %s %d of %d: prompt %.1f tok/s, decode %.1f tok/s\n", run.warmup ? "warm-up" : "run",
                 run.index, run.of, run.prompt_tokens_per_s, run.decode_tokens_per_s);
  };
}

nlohmann::ordered_json memory_json(const MemoryPlan& plan, size_t peak_used) {
  // What the peak holds beyond weights, KV cache and the runtime's own context: workspaces,
  // the backend's buffers, recorded graphs (the part a smaller chunk or batch shrinks).
  // Those come from the device's own count of its memory; with none (the CPU) they are null,
  // not measured, rather than 0.
  const size_t fixed = plan.weights + plan.kv_pool + plan.used_before_load;
  const bool measured = plan.device_total > 0;
  const auto device = [measured](size_t bytes) { return measured ? nlohmann::ordered_json(bytes) : nlohmann::ordered_json(); };
  return {{"weights", plan.weights},
          {"mapped_weights", plan.mapped_weights},
          {"kv_cache", plan.kv_pool},
          {"workspace", plan.workspace},
          {"backend_workspace", plan.backend_workspace},
          {"runtime_other", device(plan.used_before_load)},
          {"peak_used", device(peak_used)},
          {"beyond_weights_kv_runtime", device(peak_used > fixed ? peak_used - fixed : 0)},
          {"device_total", device(plan.device_total)}};
}

SamplingParams bench_sampling(const SamplingArgs& args) {
  SamplingParams params;
  params.temperature = args.temperature;
  params.top_k = args.top_k;
  params.top_p = args.top_p;
  params.min_p = args.min_p;
  params.repetition_penalty = args.repetition_penalty;
  params.presence_penalty = args.presence_penalty;
  params.frequency_penalty = args.frequency_penalty;
  params.seed = args.seed;
  return params;
}

int report_batch(Engine& engine, const BenchArgs& args, const std::string& model_name) {
  BatchBenchOptions bench;
  bench.batch = args.batch;
  bench.prompt_tokens = args.prompt;
  bench.gen_tokens = args.gen;
  bench.repeat = args.repeat;
  bench.warmup = args.warmup;
  bench.sampling = bench_sampling(args.sampling);
  bench.on_run = progress(args);
  const char* sampling = bench.sampling.temperature > 0 ? "sampled" : "greedy";
  BatchBenchResult result = engine.bench_batch(bench);
  const MemoryPlan& plan = engine.memory_plan();
  DeviceInfo info = engine.backend().device_info();
  std::string dtype = dtype_name(engine.backend().activation_dtype());
  if (args.format == "json") {
    nlohmann::ordered_json out = json_header(model_name, info, dtype, args);
    out["batch"] = result.batch;
    out["prompt_tokens"] = result.prompt_tokens;
    out["gen_tokens"] = result.gen_tokens;
    out["repeat"] = result.repeat;
    // The same names as a single stream's report where they mean the same.
    out["prefill_chunk"] = engine.max_batch_tokens();
    out["sampling"] = sampling;
    out["prompt_tokens_per_s"] = result.prefill_tokens_per_s;
    out["prompt_ms"] = result.prefill_seconds * 1e3;
    out["decode_tokens_per_s"] = result.decode_tokens_per_s;
    out["decode_ms"] = result.decode_seconds * 1e3;
    out["step_ms"] = {{"median", result.step_ms_median}, {"p90", result.step_ms_p90}, {"max", result.step_ms_max}};
    out["step_device_ms"] = {{"median", result.step_device_ms_median}};
    out["kv"] = {{"blocks_in_use", result.kv_blocks_in_use},
                 {"blocks_total", result.kv_blocks_total},
                 {"bytes_in_use", result.kv_bytes_in_use}};
    out["memory"] = memory_json(plan, result.peak_used_bytes);
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("qwenrt bench: %s on %s, %s, batch %d, prompt %d, gen %d each (%s), %d run%s (medians)\n",
              model_name.c_str(), device_text(info).c_str(), dtype.c_str(), result.batch, result.prompt_tokens,
              result.gen_tokens, sampling, result.repeat, result.repeat == 1 ? "" : "s");
  std::printf("  %-20s %10.1f tok/s  (%.2f ms for %d prompts, %d tokens per pass)\n", "prompt",
              result.prefill_tokens_per_s, result.prefill_seconds * 1e3, result.batch, engine.max_batch_tokens());
  std::printf("  %-20s %10.1f tok/s  (%.2f ms for %d steps; decode time only)\n", "decode",
              result.decode_tokens_per_s, result.decode_seconds * 1e3, result.gen_tokens);
  std::printf("  %-20s %10.2f ms median, %.2f p90, %.2f max; on the device %.2f ms median\n", "decode step",
              result.step_ms_median, result.step_ms_p90, result.step_ms_max, result.step_device_ms_median);
  std::printf("  %-20s %10s (%d of %d blocks)\n", "KV in use",
              format_bytes(static_cast<double>(result.kv_bytes_in_use)).c_str(), result.kv_blocks_in_use,
              result.kv_blocks_total);
  print_memory(plan, result.peak_used_bytes, engine.backend().uses_host_memory());
  return kExitOk;
}

int run_bench(BenchArgs args, const CLI::App& cmd) {
  const bool have_model = !args.model.model_dir.empty();
  if (have_model && !args.synthetic.empty()) {
    throw Error(ErrorCategory::kInvalidArgument, "give either -m DIR or --synthetic NAME, not both");
  }
  if (args.model.device == "auto") args.model.device = gpu_backend_available() ? "cuda" : "cpu";
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
  // The single stream's timed loop draws without penalties (they need each sequence's
  // history on the device); the batched step has them. Said before anything loads.
  if (args.batch == 0 && bench_sampling(args.sampling).has_penalties()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "bench measures --repetition-penalty, --presence-penalty and --frequency-penalty with --batch N only "
                "(--batch 1 for one sequence)");
  }
  EngineOptions options = engine_options(args.model);
  if (static_cast<int64_t>(args.prompt) + args.gen > kMaxContextTokens) {
    throw Error(ErrorCategory::kInvalidArgument, "--prompt + --gen is " +
                                                     std::to_string(static_cast<int64_t>(args.prompt) + args.gen) +
                                                     " tokens, more than the longest context qwenrt plans for (" +
                                                     std::to_string(kMaxContextTokens) + ")");
  }
  // Said before the weights load, in the words the engine would use after.
  if (args.model.max_context > 0) check_bench_context(args.prompt, args.gen, args.model.max_context);
  if (args.model.max_context == 0) {
    options.max_context = args.prompt + args.gen;
    // Speed past the trained positions is still speed; the note says the text there is not
    // what the model was made for. (A --max-context given is noted by engine_options.)
    std::optional<ModelConfig> config;
    try {
      config = have_model ? load_model_config(args.model.model_dir) : synthetic_config(args.synthetic);
    } catch (const std::exception&) {
      // loading the model says what is wrong with the folder or the name
    }
    if (config) {
      note_context_past_training(*config, options.max_context,
                                 "--prompt + --gen (" + std::to_string(options.max_context) + " tokens)",
                                 "the speed is measured there all the same, but answers would degrade",
                                 have_model ? "config.json" : "the preset");
    }
  }
  options.record_decode = !args.no_graphs;
  if (args.batch > 0) {
    options.max_seqs = args.batch;
    if (args.prefill_chunk > 0) options.max_batch_tokens = args.prefill_chunk;
    options.max_batch_tokens = std::max(options.max_batch_tokens, args.batch);
    // The pool holds every sequence's prompt and generated tokens, unless --kv-cache-gb says otherwise.
    if (args.model.kv_cache_gb == 0) options.kv_cache_tokens = options.max_context * args.batch;
  } else if (args.prefill_chunk > 0) {
    options.max_batch_tokens = args.prefill_chunk;
  }
  std::string model_name = have_model ? args.model.model_dir : args.synthetic + " (synthetic)";
  if (args.format == "table") {
    std::fprintf(stderr, "preparing %s on %s...\n", model_name.c_str(), args.model.device.c_str());
  }
  std::unique_ptr<Engine> engine =
      have_model ? std::make_unique<Engine>(args.model.model_dir, options)
                 : std::make_unique<Engine>(synthetic_config(args.synthetic), options, 1234);
  if (args.batch > 0) return report_batch(*engine, args, model_name);
  BenchOptions bench;
  bench.prompt_tokens = args.prompt;
  bench.gen_tokens = args.gen;
  bench.repeat = args.repeat;
  bench.warmup = args.warmup;
  bench.sampling = bench_sampling(args.sampling);
  bench.on_run = progress(args);
  BenchResult result = engine->bench(bench);
  const MemoryPlan& plan = engine->memory_plan();
  DeviceInfo info = engine->backend().device_info();
  std::string dtype = dtype_name(engine->backend().activation_dtype());
  if (args.format == "json") {
    nlohmann::ordered_json out = json_header(model_name, info, dtype, args);
    out["prompt_tokens"] = result.prompt_tokens;
    out["gen_tokens"] = result.gen_tokens;
    out["repeat"] = result.repeat;
    out["prefill_chunk"] = result.prefill_chunk;
    out["decode_graphs"] = options.record_decode && engine->backend().name() != "cpu";  // recorded on GPUs only
    out["sampling"] = bench.sampling.temperature > 0 ? "sampled" : "greedy";
    out["prompt_tokens_per_s"] = result.prompt_tokens_per_s;
    out["prompt_ms"] = result.prompt_seconds * 1e3;
    out["time_to_first_token_ms"] = result.time_to_first_token * 1e3;
    out["decode_tokens_per_s"] = result.decode_tokens_per_s;
    out["decode_ms_per_token"] = result.decode_seconds * 1e3 / result.gen_tokens;
    out["decode_bytes_per_token"] = result.decode_bytes_per_token;
    // A fraction of a ceiling this card has none measured for is unknown: null, not 0.
    const auto known = [](double fraction) {
      return fraction > 0 ? nlohmann::ordered_json(fraction) : nlohmann::ordered_json(nullptr);
    };
    out["bandwidth_fraction"] = known(result.bandwidth_fraction);
    out["prefill_flops"] = result.prefill_flops;
    out["matmul_fraction"] = known(result.matmul_fraction);
    // Against the memory's rated figure, which every card states (a measured copy reaches less).
    out["rated_bandwidth_bytes_per_s"] = known(info.rated_bandwidth);
    out["rated_bandwidth_fraction"] = known(result.rated_bandwidth_fraction);
    out["memory"] = memory_json(plan, result.peak_used_bytes);
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("qwenrt bench: %s on %s, %s, prompt %d (chunks of %d), gen %d (%s), %d run%s (medians)\n",
              model_name.c_str(), device_text(info).c_str(), dtype.c_str(), result.prompt_tokens, result.prefill_chunk,
              result.gen_tokens, bench.sampling.temperature > 0 ? "sampled" : "greedy", result.repeat,
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
  // No measured ceiling for this card: the fraction of its memory's rated figure instead.
  const std::string decode_fraction =
      result.bandwidth_fraction > 0 ? fraction(result.bandwidth_fraction, info.peak_bandwidth, "GB/s", 1e9)
                                    : fraction(result.rated_bandwidth_fraction, info.rated_bandwidth, "GB/s rated", 1e9);
  std::printf("  %-20s %10.1f tok/s  (%.2f ms/token)%s\n", "decode", result.decode_tokens_per_s,
              result.decode_seconds * 1e3 / result.gen_tokens, decode_fraction.c_str());
  print_memory(plan, result.peak_used_bytes, engine->backend().uses_host_memory());
  return kExitOk;
}

}  // namespace

void add_bench_command(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = root.add_subcommand(
      "bench",
      "Measure prompt tokens/s, time to first token, decode tokens/s and memory. With no model, "
      "runs the synthetic preset that suits this machine (GPU: qwen2.5-7b; CPU: a short qwen3-0.6b run, where not given otherwise: --prompt 64 --gen 16 --repeat 1 --warmup 0)");
  cmd->add_option("-m,--model", args->model.model_dir, "Hugging Face model folder")->check(CLI::ExistingDirectory);
  std::string names;
  for (const auto& name : synthetic_names()) names += (names.empty() ? "" : ", ") + name;
  cmd->add_option("--synthetic", args->synthetic, "random weights of a released model's shape: " + names)
      ->check(CLI::IsMember(synthetic_names()));
  cmd->add_option("--device", args->model.device, "auto (a usable GPU, else the CPU), cpu, gpu or gpu:N (cuda, cuda:N: the same)")
      ->check(device_name())
      ->capture_default_str();
  cmd->add_option("--dtype", args->model.dtype, "GPU weight/activation type: bf16 or f16")
      ->check(CLI::IsMember({"bf16", "f16", "fp16", "bfloat16", "float16"}))
      ->capture_default_str();
  cmd->add_option("--threads", args->model.threads, "CPU threads (0: all cores)")->check(between(0, kMaxThreads, false));
  cmd->add_option("--prompt", args->prompt, "prompt tokens")->check(more_than(0))->capture_default_str();
  cmd->add_option("--gen", args->gen, "decode steps timed, each a generated token, after the one the prompt's pass samples")->check(more_than(0))->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "timed runs (medians are reported)")->check(more_than(0))->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "untimed runs first")->check(at_least(0))->capture_default_str();
  cmd->add_option("--max-context", args->model.max_context, "KV cache context (default: prompt + gen)")
      ->check(at_least(0));
  cmd->add_option("--prefill-chunk,--max-batch-tokens", args->prefill_chunk,
                  "prompt tokens per forward pass (default 512; at least --batch, at most the context times the "
                  "sequences a pass may hold; the report gives the limit used, which a shorter prompt does not reach)")
      ->check(at_least(0));
  cmd->add_flag("--no-graphs", args->no_graphs, "GPU: launch each decode step's kernels one by one instead of replaying a recorded graph");
  add_sampling_options(cmd, args->sampling, /*model_defaults=*/false);
  cmd->add_option("--batch", args->batch,
                  "decode this many sequences together, each with its own random prompt, through the server's "
                  "batched step (0: one sequence through generate's path, with TTFT and the bandwidth fraction; "
                  "--batch 1 is one sequence through the batched step)")
      ->check(at_least(0));
  cmd->add_option("--format", args->format, "table or json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  cmd->callback([args, cmd, &exit_code]() { exit_code = run_bench(*args, *cmd); });
}

}  // namespace qwenrt::cli
