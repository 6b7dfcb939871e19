#include "qwenrt/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "engine/kv_cache.h"
#include "model/qwen.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "engine/sampler.h"

namespace qwenrt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& device, DType dtype, int threads) {
  if (device == "auto") return make_backend(cuda_backend_available() ? "cuda" : "cpu", dtype, threads);
  if (device == "cpu") return make_cpu_backend(threads);
  // "gpu" names the GPU backend on NVIDIA and AMD alike; "cuda" is its first name, kept.
  const std::string kind = device.substr(0, device.find(':'));
  if (kind == "gpu" || kind == "cuda") {
    int index = 0;
    if (device.size() > kind.size()) {
      size_t used = 0;
      try {
        index = std::stoi(device.substr(kind.size() + 1), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != device.size() - kind.size() - 1 || index < 0) {
        throw Error(ErrorCategory::kInvalidArgument, "bad device '" + device + "' (expected " + kind + ":N)");
      }
    }
    return make_cuda_backend(dtype, index);
  }
  throw Error(ErrorCategory::kInvalidArgument,
              "unknown device '" + device + "' (expected auto, cpu, gpu, gpu:N, cuda or cuda:N)");
}

Engine::Engine(const std::filesystem::path& model_dir, const EngineOptions& options) {
  ModelConfig config = load_model_config(model_dir);
  files_ = std::make_unique<ModelFiles>(model_dir);
  validate_weights(config, *files_);
  plan_.mapped_weights = files_->total_bytes();
  backend_ = make_backend(options.device, options.dtype, options.threads);
  init(config, options,
       [&](Backend& backend) { return load_weights(config, *files_, backend, options.load_progress); },
       planned_weight_bytes(config, *backend_));
}

Engine::Engine(const ModelConfig& synthetic_config, const EngineOptions& options, uint64_t seed) {
  backend_ = make_backend(options.device, options.dtype, options.threads);
  init(synthetic_config, options,
       [&](Backend& backend) { return make_synthetic_weights(synthetic_config, backend, seed); },
       planned_weight_bytes(synthetic_config, *backend_, /*matrices_in_place=*/false));
}

void Engine::init(const ModelConfig& config, const EngineOptions& options,
                  const std::function<Weights(Backend&)>& make_weights, size_t weight_bytes) {
  const DType dtype = backend_->activation_dtype();
  if (options.max_context < 0) {
    throw Error(ErrorCategory::kInvalidArgument, "--max-context must be positive");
  }
  ForwardLimits limits;
  limits.block_size = 16;
  int max_context = options.max_context > 0 ? options.max_context
                                            : std::min(config.max_position_embeddings, 32768);
  limits.max_blocks_per_seq = (max_context + limits.block_size - 1) / limits.block_size;
  limits.max_batch_tokens = std::max(1, std::min(options.max_batch_tokens, max_context));
  limits.max_logit_rows = std::max(1, std::min(options.max_logit_rows, limits.max_batch_tokens));
  limits.max_seqs = 8;
  const size_t kv_bytes_per_token = QwenModel::kv_bytes_per_token(config, dtype);
  const size_t kv_bytes_per_block = kv_bytes_per_token * limits.block_size;
  if (options.kv_cache_gb > 0) {
    limits.num_blocks = static_cast<int>(options.kv_cache_gb * (1ull << 30) / kv_bytes_per_block);
    if (limits.num_blocks < 1) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "--kv-cache-gb " + std::to_string(options.kv_cache_gb) +
                      " is smaller than one KV block (" + std::to_string(kv_bytes_per_block) + " bytes)");
    }
  } else {
    limits.num_blocks = limits.max_blocks_per_seq;
  }

  plan_.max_context = max_context;
  plan_.kv_block_size = limits.block_size;
  plan_.kv_blocks = limits.num_blocks;
  plan_.kv_bytes_per_token = kv_bytes_per_token;
  plan_.weights = weight_bytes;
  plan_.kv_pool = QwenModel::kv_pool_bytes(config, dtype, limits);
  plan_.workspace = QwenModel::workspace_bytes(config, dtype, limits);
  DeviceMemoryInfo memory = backend_->memory_info();
  plan_.device_total = memory.total_bytes;
  plan_.used_before_load = memory.total_bytes - memory.free_bytes;
  const size_t sampling_bytes = (static_cast<size_t>(max_context) + 2) * sizeof(int32_t);
  size_t needed = plan_.weights + plan_.kv_pool + plan_.workspace + sampling_bytes;
  if (memory.total_bytes > 0 && needed > memory.free_bytes) {
    throw Error(ErrorCategory::kOutOfMemory,
                "the model needs " + gib(needed) + " on " + backend_->name() + " (weights " +
                    gib(plan_.weights) + ", KV cache " + gib(plan_.kv_pool) + " for " +
                    std::to_string(max_context) + " tokens, workspace " + gib(plan_.workspace) +
                    ") but only " + gib(memory.free_bytes) +
                    " is free: lower --max-context or --kv-cache-gb, or use a smaller model or dtype");
  }
  Weights weights = make_weights(*backend_);
  model_ = std::make_unique<QwenModel>(config, std::move(weights), *backend_, limits);
  blocks_ = std::make_unique<BlockAllocator>(limits.num_blocks);
  sampling_buffer_ = backend_->allocate(sampling_bytes, "sampling state");
  if (plan_.device_total > 0) warm_up();
  device_used_now();
}

// The first passes on a GPU pay one-time costs: loading each kernel on its first launch,
// and the matrix library's algorithm choice for each row-count bucket (together about
// 0.13 s on an H200 with an 8B model, and ~10 ms more for each new prompt length). Paying
// them here, while loading, keeps them out of the first request's time to first token. It
// runs prompts of every bucket up to the batch limit, one decode step and both sampler paths
// (the penalised one allocates its small per-row buffer now rather than while generating).
void Engine::warm_up() {
  SequenceBlocks sequence(*blocks_, plan_.kv_block_size);
  // Prompt passes of 2, 4, 8, ... rows up to the batch limit: the matrix library picks its
  // kernels by row count, and each kernel loads on its first launch.
  const int max_rows = std::min(model_->limits().max_batch_tokens, plan_.max_context - 1);
  const std::vector<int32_t> zeros(static_cast<size_t>(std::max(max_rows, 0)), 0);
  for (int rows = 2; rows <= max_rows; rows *= 2) {
    sequence.clear();
    if (!sequence.reserve(rows + 1)) break;
    prefill(sequence, std::span<const int32_t>(zeros).first(static_cast<size_t>(rows)));
  }
  sequence.clear();
  if (max_rows < 2 || !sequence.reserve(3)) return;
  prefill(sequence, std::span<const int32_t>(zeros).first(2));
  Tensor logits = decode_step(sequence, 0);
  auto* history = static_cast<int32_t*>(sampling_buffer_.data());
  int32_t* out = history + plan_.max_context;
  int32_t* history_len = out + 1;
  const int32_t one[2] = {0, 1};  // history {0}, length 1
  backend_->copy_to_device(history, &one[0], sizeof(int32_t));
  backend_->copy_to_device(history_len, &one[1], sizeof(int32_t));
  backend_->sample(logits, SamplingParams{}, 0, nullptr, nullptr, plan_.max_context, out);
  SamplingParams sampled;
  sampled.temperature = 0.7f;
  sampled.top_k = 20;
  sampled.top_p = 0.9f;
  sampled.repetition_penalty = 1.1f;
  backend_->sample(logits, sampled, 0, history, history_len, plan_.max_context, out);
  backend_->synchronize();
}

size_t Engine::device_used_now() {
  DeviceMemoryInfo memory = backend_->memory_info();
  size_t used = memory.total_bytes - memory.free_bytes;
  peak_used_ = std::max(peak_used_, used);
  return used;
}

Engine::~Engine() = default;

const ModelConfig& Engine::config() const { return model_->config(); }

void Engine::check_prompt(const std::vector<int32_t>& ids, const char* what) const {
  if (ids.empty()) throw Error(ErrorCategory::kInvalidArgument, std::string(what) + " needs at least one token id");
  const int vocab = model_->config().vocab_size;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      throw Error(ErrorCategory::kInvalidArgument, "token id " + std::to_string(id) +
                                                       " is outside the vocabulary [0, " +
                                                       std::to_string(vocab) + ")");
    }
  }
  if (static_cast<int>(ids.size()) > plan_.max_context) {
    throw Error(ErrorCategory::kInvalidArgument,
                std::string(what) + " has " + std::to_string(ids.size()) +
                    " tokens but the context limit is " + std::to_string(plan_.max_context) +
                    " (raise --max-context; the model supports " +
                    std::to_string(model_->config().max_position_embeddings) + ")");
  }
}

Tensor Engine::prefill(SequenceBlocks& sequence, std::span<const int32_t> prompt) {
  const int chunk_size = model_->limits().max_batch_tokens;
  Tensor logits;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk_size) {
    size_t count = std::min(prompt.size() - begin, static_cast<size_t>(chunk_size));
    SequenceChunk chunk{&sequence, std::span<const int32_t>(prompt.data() + begin, count)};
    int32_t last_row = static_cast<int32_t>(count - 1);
    bool is_last = begin + count == prompt.size();
    logits = model_->forward(std::span<const SequenceChunk>(&chunk, 1),
                             is_last ? std::span<const int32_t>(&last_row, 1) : std::span<const int32_t>());
    sequence.advance(static_cast<int>(count));
  }
  return logits;
}

Tensor Engine::decode_step(SequenceBlocks& sequence, int32_t token) {
  const int32_t row = 0;
  SequenceChunk chunk{&sequence, std::span<const int32_t>(&token, 1)};
  Tensor logits = model_->forward(std::span<const SequenceChunk>(&chunk, 1), std::span<const int32_t>(&row, 1));
  sequence.advance(1);
  return logits;
}

Session::Session(std::unique_ptr<SequenceBlocks> sequence) : sequence_(std::move(sequence)) {}

Session::~Session() = default;

void Session::reset() {
  sequence_->clear();
  ids_.clear();
}

std::unique_ptr<Session> Engine::new_session() {
  return std::unique_ptr<Session>(new Session(std::make_unique<SequenceBlocks>(*blocks_, plan_.kv_block_size)));
}

GenerateResult Engine::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                const std::function<bool(int32_t)>& on_token) {
  std::unique_ptr<Session> session = new_session();
  return generate(*session, prompt, options, on_token);
}

GenerateResult Engine::generate(Session& session, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options, const std::function<bool(int32_t)>& on_token) {
  check_prompt(prompt, "the prompt");
  if (options.max_new_tokens < 0) {
    throw Error(ErrorCategory::kInvalidArgument, "the number of new tokens must not be negative");
  }
  GenerateResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  SequenceBlocks& sequence = *session.sequence_;
  // Keys and values depend only on the tokens before them, so the cached positions that
  // match the new prompt's prefix stay valid. At least the last prompt token is run again:
  // its logits choose the first new token.
  size_t reused = 0;
  const size_t shared = std::min(session.ids_.size(), prompt.size() - 1);
  while (reused < shared && session.ids_[reused] == prompt[reused]) ++reused;
  sequence.truncate(static_cast<int>(reused));
  session.ids_.resize(reused);
  result.reused_tokens = static_cast<int>(reused);
  if (!sequence.reserve(static_cast<int>(prompt.size() - reused))) {
    throw Error(ErrorCategory::kOutOfMemory, "the KV cache cannot hold the prompt: raise --kv-cache-gb");
  }
  auto* history_device = static_cast<int32_t*>(sampling_buffer_.data());
  int32_t* out_device = history_device + plan_.max_context;
  int32_t* history_len_device = out_device + 1;  // sample() reads the length in backend memory
  const bool penalties = options.sampling.has_penalties();
  // Penalties look at the whole context (prompt and generated), as transformers does: the
  // session's ids, which the device history mirrors.
  if (penalties) backend_->copy_to_device(history_device, prompt.data(), prompt.size() * sizeof(int32_t));

  auto start = std::chrono::steady_clock::now();
  Tensor logits;
  try {
    logits = prefill(sequence, std::span<const int32_t>(prompt).subspan(reused));
  } catch (...) {
    session.reset();  // a part-written prompt leaves nothing worth keeping
    throw;
  }
  session.ids_ = prompt;
  backend_->synchronize();
  result.prompt_seconds = seconds_since(start);

  std::vector<int32_t> stop_ids = options.extra_stop_ids;
  if (options.stop_at_eos) {
    for (int id : model_->config().eos_token_ids) stop_ids.push_back(id);
  }
  result.finish_reason = "length";
  auto decode_start = start;
  for (int step = 0; step < options.max_new_tokens; ++step) {
    int32_t history_len = static_cast<int32_t>(session.ids_.size());
    if (penalties) backend_->copy_to_device(history_len_device, &history_len, sizeof(int32_t));
    backend_->sample(logits, options.sampling, static_cast<uint64_t>(step),
                     penalties ? history_device : nullptr, penalties ? history_len_device : nullptr,
                     plan_.max_context, out_device);
    int32_t token = 0;
    backend_->copy_to_host(&token, out_device, sizeof(int32_t));
    if (step == 0) {
      result.time_to_first_token = seconds_since(start);
      decode_start = std::chrono::steady_clock::now();
    }
    result.ids.push_back(token);
    bool keep_going = on_token ? on_token(token) : true;
    if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
      result.finish_reason = "stop";
      break;
    }
    if (!keep_going) {
      result.finish_reason = "cancelled";
      break;
    }
    if (step + 1 == options.max_new_tokens) break;
    if (sequence.length() + 1 > plan_.max_context || !sequence.reserve(1)) {
      result.finish_reason = "length";
      break;
    }
    if (penalties) {
      backend_->copy_to_device(history_device + session.ids_.size(), &token, sizeof(int32_t));
    }
    logits = decode_step(sequence, token);
    session.ids_.push_back(token);
  }
  backend_->synchronize();
  if (!result.ids.empty()) result.decode_seconds = seconds_since(decode_start);
  result.kv_bytes_used = sequence.block_table().size() * plan_.kv_block_size * plan_.kv_bytes_per_token;
  device_used_now();
  return result;
}

ScoreResult Engine::score(const std::vector<int32_t>& ids) {
  check_prompt(ids, "the text to score");
  if (ids.size() < 2) throw Error(ErrorCategory::kInvalidArgument, "scoring needs at least two token ids");
  ScoreResult result;
  SequenceBlocks sequence(*blocks_, plan_.kv_block_size);
  if (!sequence.reserve(static_cast<int>(ids.size()))) {
    throw Error(ErrorCategory::kOutOfMemory, "the KV cache cannot hold the sequence: raise --kv-cache-gb");
  }
  auto start = std::chrono::steady_clock::now();
  const int chunk_size = model_->limits().max_logit_rows;
  const int vocab = model_->config().vocab_size;
  std::vector<int32_t> rows(chunk_size);
  for (int i = 0; i < chunk_size; ++i) rows[i] = i;
  std::vector<float> host_logits(static_cast<size_t>(chunk_size) * vocab);
  // Position i predicts ids[i + 1]; the last position predicts nothing.
  const size_t predicting = ids.size() - 1;
  for (size_t begin = 0; begin < predicting; begin += chunk_size) {
    size_t count = std::min(predicting - begin, static_cast<size_t>(chunk_size));
    SequenceChunk chunk{&sequence, std::span<const int32_t>(ids.data() + begin, count)};
    Tensor logits = model_->forward(std::span<const SequenceChunk>(&chunk, 1),
                                    std::span<const int32_t>(rows.data(), count));
    sequence.advance(static_cast<int>(count));
    backend_->copy_to_host(host_logits.data(), logits.data, count * vocab * sizeof(float));
    for (size_t r = 0; r < count; ++r) {
      const float* row = host_logits.data() + r * vocab;
      int32_t best = 0;
      for (int j = 1; j < vocab; ++j) {
        if (row[j] > row[best]) best = j;
      }
      result.argmax.push_back(best);
      double max_logit = row[best];
      double sum = 0;
      for (int j = 0; j < vocab; ++j) sum += std::exp(row[j] - max_logit);
      if (!std::isfinite(sum) || !std::isfinite(max_logit)) {
        throw Error(ErrorCategory::kInternal, "non-finite logits at position " + std::to_string(begin + r));
      }
      int32_t target = ids[begin + r + 1];
      result.logprobs.push_back(row[target] - max_logit - std::log(sum));
    }
  }
  result.seconds = seconds_since(start);
  double total = 0;
  for (double lp : result.logprobs) total -= lp;
  result.nll_mean = total / static_cast<double>(result.logprobs.size());
  result.perplexity = std::exp(result.nll_mean);
  return result;
}

}  // namespace qwenrt

namespace qwenrt {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

BenchResult Engine::bench(const BenchOptions& options) {
  const ModelConfig& config = model_->config();
  if (options.prompt_tokens < 1 || options.gen_tokens < 1 || options.repeat < 1 || options.warmup < 0) {
    throw Error(ErrorCategory::kInvalidArgument, "--prompt, --gen and --repeat must be positive");
  }
  if (options.prompt_tokens + options.gen_tokens > plan_.max_context) {
    throw Error(ErrorCategory::kInvalidArgument,
                "--prompt + --gen (" + std::to_string(options.prompt_tokens + options.gen_tokens) +
                    ") exceeds the context limit " + std::to_string(plan_.max_context) + " (raise --max-context)");
  }
  uint64_t state = splitmix64(options.seed);
  std::vector<int32_t> prompt(options.prompt_tokens);
  for (auto& id : prompt) {
    state = splitmix64(state);
    id = static_cast<int32_t>(state % static_cast<uint64_t>(config.vocab_size));
  }
  auto* out_device = static_cast<int32_t*>(sampling_buffer_.data()) + plan_.max_context;
  SamplingParams greedy;
  std::unique_ptr<DeviceTimer> timer = backend_->make_timer();
  std::vector<double> prompt_times, ttfts, decode_times;
  for (int run = 0; run < options.warmup + options.repeat; ++run) {
    SequenceBlocks sequence(*blocks_, plan_.kv_block_size);
    if (!sequence.reserve(options.prompt_tokens + options.gen_tokens)) {
      throw Error(ErrorCategory::kOutOfMemory, "the KV cache cannot hold --prompt + --gen tokens: raise --kv-cache-gb");
    }
    backend_->synchronize();
    auto wall_start = std::chrono::steady_clock::now();
    timer->start();
    Tensor logits = prefill(sequence, prompt);
    timer->stop();
    backend_->sample(logits, greedy, 0, nullptr, nullptr, 0, out_device);
    int32_t token = 0;
    backend_->copy_to_host(&token, out_device, sizeof(int32_t));
    double ttft = seconds_since(wall_start);
    double prompt_time = timer->seconds();
    timer->start();
    for (int step = 0; step < options.gen_tokens; ++step) {
      logits = decode_step(sequence, token);
      backend_->sample(logits, greedy, static_cast<uint64_t>(step + 1), nullptr, nullptr, 0, out_device);
      backend_->copy_to_host(&token, out_device, sizeof(int32_t));
    }
    timer->stop();
    double decode_time = timer->seconds();
    device_used_now();
    if (run >= options.warmup) {
      prompt_times.push_back(prompt_time);
      ttfts.push_back(ttft);
      decode_times.push_back(decode_time);
    }
  }
  BenchResult result;
  result.prompt_tokens = options.prompt_tokens;
  result.gen_tokens = options.gen_tokens;
  result.repeat = options.repeat;
  result.prompt_seconds = median(prompt_times);
  result.time_to_first_token = median(ttfts);
  result.decode_seconds = median(decode_times);
  result.prompt_tokens_per_s = options.prompt_tokens / result.prompt_seconds;
  result.decode_tokens_per_s = options.gen_tokens / result.decode_seconds;

  // Bytes a decode step must read: every matrix once (the embedding only one row unless it
  // doubles as lm_head) plus the K/V of the context, averaged over the generated tokens.
  const double elem = static_cast<double>(dtype_size(model_->weights().q_proj_dtype()));
  const double h = config.hidden_size, q = config.q_dim(), kv = config.kv_dim(), inter = config.intermediate_size;
  const double layer_matrix_params = h * q + 2 * h * kv + q * h + 3 * h * inter;
  const double matrix_params = config.num_layers * layer_matrix_params + static_cast<double>(config.vocab_size) * h;
  const double mean_context = options.prompt_tokens + 0.5 * (options.gen_tokens + 1);
  result.decode_bytes_per_token = matrix_params * elem + mean_context * static_cast<double>(plan_.kv_bytes_per_token);
  const double p = options.prompt_tokens;
  const double attention_flops = config.num_layers * 4.0 * config.q_dim() * (p * (p + 1) / 2);
  result.prefill_flops = 2.0 * config.num_layers * layer_matrix_params * p + 2.0 * config.vocab_size * h + attention_flops;
  DeviceInfo info = backend_->device_info();
  if (info.peak_bandwidth > 0) {
    result.bandwidth_fraction = result.decode_bytes_per_token * result.decode_tokens_per_s / info.peak_bandwidth;
  }
  if (info.peak_matmul_flops > 0) {
    result.matmul_fraction = result.prefill_flops / result.prompt_seconds / info.peak_matmul_flops;
  }
  result.peak_used_bytes = peak_used_;
  return result;
}

}  // namespace qwenrt
