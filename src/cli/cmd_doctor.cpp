// qwenrt doctor: what this machine and build can run, and whether a model fits — the answer
// to "will it fit and how fast can it go" before loading anything.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "model/config.h"
#include "model/qwen.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::cli {
namespace {

struct DoctorArgs {
  std::string model_dir;
  std::string dtype = "bf16";
};

std::string cpu_summary() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  std::set<std::string> flags;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name") model = value;
    if (key == "flags" && flags.empty()) {
      std::istringstream words(value);
      std::string word;
      while (words >> word) flags.insert(word);
    }
  }
  std::string features;
  for (const char* feature : {"avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16"}) {
    if (flags.count(feature)) features += std::string(features.empty() ? "" : " ") + feature;
  }
  return model + ", " + std::to_string(std::thread::hardware_concurrency()) + " threads" +
         (features.empty() ? "" : ", " + features);
}

// Bytes of one bf16/fp16 copy of the weights, from the safetensors headers.
double weight_bytes(const ModelFiles& files, size_t element_size) {
  double total = 0;
  for (const auto& name : files.names()) {
    const SafetensorsTensor* tensor = files.find(name);
    total += static_cast<double>(tensor->numel()) * static_cast<double>(element_size);
  }
  return total;
}

// The model's report; false when something that text, chat or serve need is missing (the
// tokenizer), which the report names.
bool report_model(const DoctorArgs& args, const GpuRuntimeInfo& gpus) {
  ModelConfig config = load_model_config(args.model_dir);
  ModelFiles files(args.model_dir);
  // A checkpoint generate would refuse (a tensor missing, of another shape or dtype) fits nowhere.
  validate_weights(config, files);
  // Text prompts, chat and serve need the tokenizer; `generate --ids` runs without one. A
  // folder without one is said so; one whose tokenizer does not load fails the check.
  bool tokenizer_ok = true;
  std::string tokenizer_line;
  const bool has_tokenizer = Tokenizer::present_in(args.model_dir);
  try {
    const Tokenizer tokenizer = Tokenizer::load(args.model_dir);
    tokenizer_line = std::to_string(tokenizer.vocab_size()) + " tokens";
  } catch (const std::exception& error) {
    tokenizer_ok = !has_tokenizer;
    tokenizer_line = has_tokenizer ? std::string("cannot load: ") + error.what()
                                   : "none (no " + Tokenizer::file_names() + ")";
    tokenizer_line += ": text prompts, chat and serve need one; generate --ids runs without";
  }
  const size_t element = 2;  // bf16 or fp16 on the GPU
  double weights = weight_bytes(files, element);
  double kv_per_token = static_cast<double>(QwenModel::kv_bytes_per_token(config, DType::kBF16));
  std::printf("\nmodel %s\n", args.model_dir.c_str());
  std::printf("  %s, %d layers, hidden %d, heads %d/%d, head_dim %d, vocab %d, max context %d\n",
              config.architecture_name.c_str(), config.num_layers, config.hidden_size, config.num_heads,
              config.num_kv_heads, config.head_dim, config.vocab_size, model_context_limit(config));
  std::printf("  weights %s in %s, KV cache %s per token\n", format_bytes(weights).c_str(), args.dtype.c_str(),
              format_bytes(kv_per_token).c_str());
  std::printf("  tokenizer %s\n", tokenizer_line.c_str());
  if (gpus.devices.empty()) {
    // The CPU keeps its KV cache in fp32: twice the bf16 figure above. Its weights are the
    // checkpoint's files, mapped (page cache the kernel may drop and read again).
    const double cpu_kv = static_cast<double>(QwenModel::kv_bytes_per_token(config, DType::kF32));
    const double files_bytes = static_cast<double>(files.total_bytes());
    std::printf("  no GPU: it runs on the CPU (--device cpu), which computes in fp32 from the mapped files "
                "(%s; KV cache %s per token there)\n",
                format_bytes(files_bytes).c_str(), format_bytes(cpu_kv).c_str());
    const double available = available_host_bytes();
    if (available > 0) {
      const double room = available - files_bytes;
      const int limit = model_context_limit(config);
      std::printf("  on the CPU: %s of memory available; ", format_bytes(available).c_str());
      if (room < cpu_kv * 256) {
        std::printf("the files do NOT fit beside a KV cache: every token would read them from disk again.\n");
      } else if (room / cpu_kv >= limit) {
        std::printf("the files and the full %d-token context fit.\n", limit);
      } else {
        std::printf("the files fit with room for %lld tokens of KV cache: use --max-context %lld or less.\n",
                    static_cast<long long>(room / cpu_kv), static_cast<long long>(room / cpu_kv));
      }
    }
    return tokenizer_ok;
  }
  for (const auto& device : gpus.devices) {
    // Leave room for the activation workspace and the runtime's own allocations.
    double reserve = 1.0 * (1ull << 30) + 0.02 * static_cast<double>(device.total_bytes);
    double room = static_cast<double>(device.free_bytes) - weights - reserve;
    std::printf("  on GPU %d (%s): ", device.index, device.name.c_str());
    if (room < kv_per_token * 256) {
      std::printf("does NOT fit: weights need %s, %s is free. Use a smaller model or a quantised "
                  "checkpoint, or free GPU memory.\n",
                  format_bytes(weights).c_str(), format_bytes(static_cast<double>(device.free_bytes)).c_str());
      continue;
    }
    long long context = static_cast<long long>(room / kv_per_token);
    const int limit = model_context_limit(config);
    long long usable = std::min<long long>(context, limit);
    std::printf("fits. Free memory leaves room for %lld tokens of KV cache; ", context);
    if (context >= limit) {
      std::printf("the full %d-token context fits (--max-context %d).\n", limit, limit);
    } else {
      std::printf("use --max-context %lld or less.\n", usable);
    }
    if (device.memory_bandwidth > 0) {
      double matrix_bytes = weights - static_cast<double>(config.vocab_size) * config.hidden_size * element *
                                          (config.tie_word_embeddings ? 0.0 : 1.0);
      std::printf("    decode speed limit at batch 1: about %.0f tokens/s (%s read per token at the memory's "
                  "rated %.1f TB/s; on an H200 qwenrt reaches 73-84%% of this limit for 7B-32B models, under a third "
                  "for 0.5B)\n",
                  device.memory_bandwidth / matrix_bytes, format_bytes(matrix_bytes).c_str(),
                  device.memory_bandwidth / 1e12);
    }
    if (!device.supported_by_build) {
      std::printf("    but this build has no kernels for this GPU (see above)\n");
    }
  }
  return tokenizer_ok;
}

int run_doctor(const DoctorArgs& args) {
  GpuRuntimeInfo gpus = query_gpus();
  std::printf("qwenrt %s\n", QWENRT_VERSION);
  std::printf("cpu      %s\n", cpu_summary().c_str());
  if (!gpus.built_with_gpu) {
    std::printf("gpu      %s\n", gpus.error.c_str());
  } else {
    const bool hip = gpus.platform == "HIP";
    std::printf("build    %s kernels for %s%s, matrix products through %s, built with %s %s\n",
                gpus.platform.c_str(), hip ? "" : "compute capability ", gpus.build_architectures.c_str(),
                gpus.matmul_library.c_str(), gpus.platform.c_str(), gpus.build_runtime_version.c_str());
    std::printf("driver   %s, runtime %s\n", gpus.driver_version.empty() ? "not installed" : gpus.driver_version.c_str(),
                gpus.runtime_version.c_str());
    if (!gpus.version_advice.empty()) std::printf("         WARNING: %s\n", gpus.version_advice.c_str());
    if (!gpus.error.empty()) std::printf("gpu      %s\n", gpus.error.c_str());
    for (const auto& device : gpus.devices) {
      const std::string arch = hip ? device.arch_name
                                   : "compute capability " + std::to_string(device.compute_major) + "." +
                                         std::to_string(device.compute_minor);
      std::printf("gpu %d    %s, %s, %d %s, %s free of %s%s\n", device.index, device.name.c_str(), arch.c_str(),
                  device.multiprocessors, hip ? "CUs" : "SMs",
                  format_bytes(static_cast<double>(device.free_bytes)).c_str(),
                  format_bytes(static_cast<double>(device.total_bytes)).c_str(),
                  device.supported_by_build || hip
                      ? ""
                      : "  -- NOT supported by this build: rebuild with -DCMAKE_CUDA_ARCHITECTURES=<this GPU's>");
      if (!device.advice.empty()) std::printf("         %s\n", device.advice.c_str());
    }
    if (const char* value = std::getenv("QWENRT_CHAINED_LAUNCHES")) {
      // A measurement override of the model's chained-launch setting (docs/ARCHITECTURE.md).
      std::printf("env      QWENRT_CHAINED_LAUNCHES=%s (%s)\n", value,
                  parse_chained_launches(value) ? "overrides the model's chained-launch setting"
                                                : "not off, deep or shallow: ignored");
    }
    if (hip) {
      // The guide's environment variables, as this machine has them set (docs/AMD.md).
      for (const char* name : {"HSA_OVERRIDE_GFX_VERSION", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) {
        if (const char* value = std::getenv(name)) std::printf("env      %s=%s\n", name, value);
      }
    }
  }
  if (!args.model_dir.empty() && !report_model(args, gpus)) return kExitError;
  return kExitOk;
}

}  // namespace

void add_doctor_command(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<DoctorArgs>();
  CLI::App* cmd = root.add_subcommand(
      "doctor", "Show the GPU, driver, build and CPU; with -m, whether that model fits and (on a GPU) how fast it can decode");
  cmd->add_option("-m,--model", args->model_dir, "Hugging Face model folder to check")->check(CLI::ExistingDirectory);
  cmd->callback([args, &exit_code]() { exit_code = run_doctor(*args); });
}

}  // namespace qwenrt::cli
