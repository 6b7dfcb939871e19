// qwenrt's public API: load a Qwen model folder onto a device and generate or score.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace qwenrt {

class QwenModel;

// Runtime choices, kept apart from the model's own config.
struct EngineOptions {
  std::string device = "auto";     // "auto" (a usable GPU, else the CPU), "cpu", "gpu", "gpu:N" (or "cuda", "cuda:N")
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
  size_t device_total = 0;       // device memory in all (0 on the CPU)
  size_t used_before_load = 0;   // in use before the plan was allocated: runtime context, others
};

struct GenerateOptions {
  int max_new_tokens = 32;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::vector<int32_t> extra_stop_ids;
};

struct GenerateResult {
  std::vector<int32_t> ids;         // generated ids (the stop token included, as transformers)
  std::string finish_reason;        // "stop" (EOS), "length" (max_new_tokens or context), "cancelled"
  int prompt_tokens = 0;
  int reused_tokens = 0;            // prompt tokens whose KV a Session already held (not prefilled)
  double prompt_seconds = 0;        // prefill wall time
  double time_to_first_token = 0;   // prefill + first sample
  double decode_seconds = 0;        // wall time of the tokens after the first
  size_t kv_bytes_used = 0;         // KV blocks this request held at its end
};

struct BenchOptions {
  int prompt_tokens = 512;
  int gen_tokens = 128;
  int repeat = 3;    // timed runs; medians are reported
  int warmup = 1;    // untimed runs first
  uint64_t seed = 1;
};

struct BenchResult {
  int prompt_tokens = 0, gen_tokens = 0, repeat = 0;
  double prompt_seconds = 0;        // median prefill time (device timer)
  double time_to_first_token = 0;   // median prefill + first sample, to the host
  double decode_seconds = 0;        // median time of gen_tokens decode steps
  double prompt_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  double decode_bytes_per_token = 0;  // weights + mean KV read per decoded token
  double prefill_flops = 0;           // matrix + attention FLOPs of one prefill
  double bandwidth_fraction = 0;      // of DeviceInfo::peak_bandwidth (0: unknown)
  double matmul_fraction = 0;         // of DeviceInfo::peak_matmul_flops (0: unknown)
  size_t peak_used_bytes = 0;         // device memory in use at the measured peak (0 on CPU)
};

struct ScoreResult {
  std::vector<double> logprobs;  // log p(ids[i] | ids[:i]) for i = 1..n-1
  std::vector<int32_t> argmax;   // the most likely token at each of those positions
  double nll_mean = 0;
  double perplexity = 0;
  double seconds = 0;
};

class SequenceBlocks;

// A conversation whose KV cache outlives one generate() call. Each prompt given with the
// session reuses the cached positions it shares as a prefix with what the session has seen
// (the earlier turns of a chat), and only the rest is prefilled. Destroy it before its Engine.
class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // Tokens whose keys and values the cache holds.
  int cached_tokens() const { return static_cast<int>(ids_.size()); }
  // Forgets the conversation and gives its KV blocks back.
  void reset();

 private:
  friend class Engine;
  explicit Session(std::unique_ptr<SequenceBlocks> sequence);
  std::unique_ptr<SequenceBlocks> sequence_;
  std::vector<int32_t> ids_;  // the tokens whose KV sequence_ holds, in order
};

class Engine {
 public:
  Engine(const std::filesystem::path& model_dir, const EngineOptions& options);
  // Random weights of `config`'s shape made on the device: benchmarking without a checkpoint.
  Engine(const ModelConfig& synthetic_config, const EngineOptions& options, uint64_t seed);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& config() const;
  const MemoryPlan& memory_plan() const { return plan_; }
  Backend& backend() { return *backend_; }

  // on_token(id) is called as each token is generated; return false to stop early.
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const std::function<bool(int32_t)>& on_token = {});
  // The same, keeping the KV cache in `session` for the next call (prefix reuse).
  GenerateResult generate(Session& session, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const std::function<bool(int32_t)>& on_token = {});
  std::unique_ptr<Session> new_session();
  ScoreResult score(const std::vector<int32_t>& ids);
  BenchResult bench(const BenchOptions& options);

  // Device memory in use now (0 on the CPU), and the largest value seen by any call.
  size_t device_used_now();
  size_t device_used_peak() const { return peak_used_; }

 private:
  void init(const ModelConfig& config, const EngineOptions& options,
            const std::function<Weights(Backend&)>& make_weights, size_t weight_bytes);
  void check_prompt(const std::vector<int32_t>& ids, const char* what) const;
  void warm_up();
  Tensor prefill(SequenceBlocks& sequence, std::span<const int32_t> prompt);
  // Appends one token (its blocks reserved) and returns the logits that follow it.
  Tensor decode_step(SequenceBlocks& sequence, int32_t token);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<class ModelFiles> files_;
  std::unique_ptr<QwenModel> model_;
  std::unique_ptr<class BlockAllocator> blocks_;
  DeviceBuffer sampling_buffer_;  // history [max_context] + out id, in backend memory
  MemoryPlan plan_;
  size_t peak_used_ = 0;
};

// Creates the backend named by `device` ("auto", "cpu", "gpu", "gpu:1", "cuda", "cuda:1").
std::unique_ptr<Backend> make_backend(const std::string& device, DType dtype, int threads);

}  // namespace qwenrt
