// qwenrt's public API: load a Qwen model folder onto a device and generate or score.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace qwenrt {

class QwenModel;

// Runtime choices, kept apart from the model's own config.
struct EngineOptions {
  std::string device = "cpu";      // "cpu" or "cuda" / "cuda:N"
  DType dtype = DType::kBF16;      // GPU weights/activations; the CPU computes in fp32
  int threads = 0;                 // CPU threads; 0 = all cores
  int max_context = 0;             // tokens per sequence; 0 = min(model max, 32768)
  double kv_cache_gb = 0;          // KV pool size; 0 = enough for one max_context sequence
  int max_batch_tokens = 512;      // tokens per forward pass (prompt chunk size)
  int max_logit_rows = 128;        // rows of logits per pass (score chunk size)
  // Called while weights load: (bytes done, bytes total).
  std::function<void(uint64_t, uint64_t)> load_progress;
};

// Where the memory goes, in bytes.
struct MemoryPlan {
  size_t weights = 0;        // allocated for weights (0 for in-place mapped CPU matrices)
  size_t mapped_weights = 0; // checkpoint bytes mapped from disk
  size_t kv_pool = 0;
  size_t workspace = 0;
  int kv_blocks = 0;
  int kv_block_size = 0;
  size_t kv_bytes_per_token = 0;
  int max_context = 0;
};

struct GenerateOptions {
  int max_new_tokens = 32;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::vector<int32_t> extra_stop_ids;
};

struct GenerateResult {
  std::vector<int32_t> ids;         // generated ids (the stop token included, as transformers)
  std::string finish_reason;        // "stop" (EOS), "length" (max_new_tokens or context)
  int prompt_tokens = 0;
  double prompt_seconds = 0;        // prefill wall time
  double time_to_first_token = 0;   // prefill + first sample
  double decode_seconds = 0;        // wall time of the tokens after the first
};

struct ScoreResult {
  std::vector<double> logprobs;  // log p(ids[i] | ids[:i]) for i = 1..n-1
  double nll_mean = 0;
  double perplexity = 0;
  double seconds = 0;
};

class Engine {
 public:
  Engine(const std::filesystem::path& model_dir, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& config() const;
  const MemoryPlan& memory_plan() const { return plan_; }
  Backend& backend() { return *backend_; }

  // on_token(id) is called as each token is generated; return false to stop early.
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const std::function<bool(int32_t)>& on_token = {});
  ScoreResult score(const std::vector<int32_t>& ids);

 private:
  void check_prompt(const std::vector<int32_t>& ids, const char* what) const;

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<class ModelFiles> files_;
  std::unique_ptr<QwenModel> model_;
  std::unique_ptr<class BlockAllocator> blocks_;
  DeviceBuffer sampling_buffer_;  // history [max_context] + out id, in backend memory
  MemoryPlan plan_;
};

// Creates the backend named by `device` ("cpu", "cuda", "cuda:1").
std::unique_ptr<Backend> make_backend(const std::string& device, DType dtype, int threads);

}  // namespace qwenrt
