#include "qwenrt/engine.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>

#include "core/error.h"
#include "core/stats.h"
#include "core/units.h"
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

}  // namespace

std::optional<int> parse_device(const std::string& device) {
  if (device == "auto") return std::nullopt;
  if (device == "cpu") return -1;
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
    return index;
  }
  throw Error(ErrorCategory::kInvalidArgument,
              "unknown device '" + device + "' (expected auto, cpu, gpu, gpu:N, cuda or cuda:N)");
}

std::unique_ptr<Backend> make_backend(const std::string& device, DType dtype, int threads) {
  const std::optional<int> index = parse_device(device);
  if (!index) return gpu_backend_available() ? make_gpu_backend(dtype, 0) : make_cpu_backend(threads);
  if (*index < 0) return make_cpu_backend(threads);
  return make_gpu_backend(dtype, *index);
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

namespace {

// The batched step's sampling state (Engine::init): rows, then per row its out id, history
// length, history, logit adjustments, and its place and mask when masked (32-bit words all).
size_t step_rows_bytes(int max_seqs) { return (static_cast<size_t>(max_seqs) * sizeof(SampleRow) + 255) / 256 * 256; }
size_t step_state_bytes(int max_seqs, int max_context, int vocab) {
  return step_rows_bytes(max_seqs) + static_cast<size_t>(max_seqs) *
                                         (2 + static_cast<size_t>(max_context) +
                                          3 * (kMaxBannedPerRow + kMaxLogitBiasPerRow) + 1 + token_mask_words(vocab)) *
                                         sizeof(int32_t);
}

}  // namespace

void Engine::init(const ModelConfig& config, const EngineOptions& options,
                  const std::function<Weights(Backend&)>& make_weights, size_t weight_bytes) {
  const DType dtype = backend_->activation_dtype();
  if (options.max_context < 0) {
    throw Error(ErrorCategory::kInvalidArgument, "--max-context must be positive");
  }
  if (options.max_context > kMaxContextTokens) {
    throw Error(ErrorCategory::kInvalidArgument, "--max-context " + std::to_string(options.max_context) +
                                                     " is more than the longest context qwenrt plans for (" +
                                                     std::to_string(kMaxContextTokens) + " tokens)");
  }
  ForwardLimits limits;
  limits.block_size = 16;
  int max_context = options.max_context > 0 ? options.max_context
                                            : std::min(model_context_limit(config), 32768);
  if (config.use_logn_attn && max_context > kLognMaxContext) {
    // The original Qwen's logn table ends there; past it the model is undefined.
    throw Error(ErrorCategory::kInvalidArgument,
                "--max-context " + std::to_string(max_context) + " exceeds " + std::to_string(kLognMaxContext) +
                    ", the longest context of the original Qwen's logn attention");
  }
  limits.max_blocks_per_seq = (max_context + limits.block_size - 1) / limits.block_size;
  if (options.max_seqs < 1) throw Error(ErrorCategory::kInvalidArgument, "--max-seqs must be positive");
  // One sequence never needs more than its context per pass; several together may.
  limits.max_batch_tokens = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(options.max_batch_tokens, static_cast<int64_t>(max_context) * options.max_seqs)));
  // A pass holds at least one token per sequence, so more sequences than tokens never fit.
  limits.max_seqs = std::min(options.max_seqs, limits.max_batch_tokens);
  // A decode step of max_seqs sequences needs a logits row each.
  limits.max_logit_rows = std::max(limits.max_seqs, std::min(options.max_logit_rows, limits.max_batch_tokens));
  limits.record_decode = options.record_decode;
  const size_t kv_bytes_per_token = QwenModel::kv_bytes_per_token(config, dtype);
  const size_t kv_bytes_per_block = kv_bytes_per_token * limits.block_size;
  if (options.kv_cache_gb > 0) {
    const double blocks = options.kv_cache_gb * static_cast<double>(1ull << 30) / static_cast<double>(kv_bytes_per_block);
    char given[32];  // as typed, near enough: %f would print 1e-07 as 0.000000
    std::snprintf(given, sizeof(given), "%.6g", options.kv_cache_gb);
    if (blocks >= static_cast<double>(1 << 30) + 1) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "--kv-cache-gb " + std::string(given) + " is more than the KV cache can address (2^30 blocks: " +
                      format_gib(static_cast<double>(1 << 30) * static_cast<double>(kv_bytes_per_block)) +
                      " for this model)");
    }
    limits.num_blocks = static_cast<int>(blocks);
    if (limits.num_blocks < 1) {
      throw Error(ErrorCategory::kInvalidArgument, "--kv-cache-gb " + std::string(given) +
                                                       " is smaller than one KV block (" +
                                                       std::to_string(kv_bytes_per_block) + " bytes)");
    }
  } else if (options.kv_memory_fraction > 0 && backend_->memory_info().total_bytes > 0) {
    const DeviceMemoryInfo free_memory = backend_->memory_info();
    const double budget = options.kv_memory_fraction * static_cast<double>(free_memory.free_bytes) -
                          static_cast<double>(weight_bytes + QwenModel::workspace_bytes(config, dtype, limits)) -
                          static_cast<double>(step_state_bytes(limits.max_seqs, max_context, config.vocab_size));
    limits.num_blocks = static_cast<int>(std::min(budget / static_cast<double>(kv_bytes_per_block), double(1 << 30)));
    if (limits.num_blocks < limits.max_blocks_per_seq) {
      throw Error(ErrorCategory::kOutOfMemory,
                  "after the weights only " + format_gib(std::max(budget, 0.0)) +
                      " is left for the KV cache, less than one " + std::to_string(max_context) +
                      "-token sequence needs: lower --max-context or give --kv-cache-gb");
    }
  } else if (options.kv_cache_tokens > 0) {
    // Every sequence's last block may be part-filled: round each up.
    limits.num_blocks = static_cast<int>(std::min<int64_t>(
        (options.kv_cache_tokens + limits.block_size - 1) / limits.block_size + options.max_seqs, 1 << 30));
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
  plan_.backend_workspace = backend_->workspace_bytes();
  plan_.used_before_load = memory.total_bytes - memory.free_bytes - plan_.backend_workspace;
  const size_t sampling_bytes = (static_cast<size_t>(max_context) + 2) * sizeof(int32_t);
  const size_t step_bytes = step_state_bytes(limits.max_seqs, max_context, config.vocab_size);
  plan_.workspace += sampling_bytes + step_bytes;
  size_t needed = plan_.weights + plan_.kv_pool + plan_.workspace;
  if (memory.total_bytes > 0 && needed > memory.free_bytes) {
    throw Error(ErrorCategory::kOutOfMemory,
                "the model needs " + format_gib(needed) + " on " + backend_->name() + " (weights " +
                    format_gib(plan_.weights) + ", KV cache " + format_gib(plan_.kv_pool) + " for " +
                    std::to_string(max_context) + " tokens, workspace " + format_gib(plan_.workspace) +
                    ") but only " + format_gib(memory.free_bytes) +
                    " is free: lower --max-context or --kv-cache-gb, or use a smaller model or dtype");
  }
  const auto load_start = std::chrono::steady_clock::now();
  Weights weights = make_weights(*backend_);
  model_ = std::make_unique<QwenModel>(config, std::move(weights), *backend_, limits);
  blocks_ = std::make_unique<BlockAllocator>(limits.num_blocks, limits.block_size);
  sampling_buffer_ = backend_->allocate(sampling_bytes, "sampling state");
  startup_.load_seconds = seconds_since(load_start);
  step_buffer_ = backend_->allocate(step_bytes, "batched sampling state");
  step_rows_ = static_cast<SampleRow*>(step_buffer_.data());
  step_out_ = reinterpret_cast<int32_t*>(static_cast<char*>(step_buffer_.data()) + step_rows_bytes(limits.max_seqs));
  step_history_lens_ = step_out_ + limits.max_seqs;
  step_history_ = step_history_lens_ + limits.max_seqs;
  step_adjust_ = step_history_ + static_cast<size_t>(limits.max_seqs) * max_context;
  step_mask_rows_ = step_adjust_ + static_cast<size_t>(limits.max_seqs) * 3 * (kMaxBannedPerRow + kMaxLogitBiasPerRow);
  step_masks_ = reinterpret_cast<uint32_t*>(step_mask_rows_ + limits.max_seqs);
  const auto warmup_start = std::chrono::steady_clock::now();
  if (plan_.device_total > 0) {
    warm_up();
    warm_up_batched();
  }
  startup_.warmup_seconds = seconds_since(warmup_start);
  plan_.backend_workspace = backend_->workspace_bytes();  // with what the warm-up sized
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
  // A prompt pass in each of the matrix library's row buckets (matmul_row_bucket: 2, 4, ...,
  // 128, 192, 256, 384, 512, ...) up to the batch limit, the last one at the limit itself:
  // the library picks its kernels by bucket, and each kernel loads on its first launch.
  const int max_rows = std::min(model_->limits().max_batch_tokens, plan_.max_context - 1);
  const std::vector<int32_t> zeros(static_cast<size_t>(std::max(max_rows, 0)), 0);
  for (int rows = 2; rows <= max_rows;) {
    sequence.clear();
    if (!sequence.reserve(rows + 1)) break;
    prefill(sequence, std::span<const int32_t>(zeros).first(static_cast<size_t>(rows)), 0);
    if (rows == max_rows) break;
    rows = static_cast<int>(std::min<int64_t>(matmul_row_bucket(rows + 1), max_rows));
  }
  sequence.clear();
  if (max_rows < 2 || !sequence.reserve(3)) return;
  prefill(sequence, std::span<const int32_t>(zeros).first(2), 0);
  Tensor logits = decode_step(sequence, 0, 0);
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

// The batched step's first use pays the same one-time costs at its own sizes: the matrix
// products of a max_seqs-row decode pass and the per-row sampler, whose penalty buffers grow
// here to the planned batch instead of during the first busy second of a server. A few rows
// also take the per-row extras (a structured output's mask, a ban, a bias, log-probabilities),
// so that their kernels load here rather than on a request.
void Engine::warm_up_batched() {
  const int rows = std::min(model_->limits().max_seqs, blocks_->free_blocks());
  if (rows < 2) return;
  std::vector<std::unique_ptr<SequenceBlocks>> sequences;
  std::vector<StepInput> inputs;
  static const int32_t kToken = 0;
  SampleRow sampled;
  sampled.params.temperature = 0.7f;
  sampled.params.top_k = 20;
  sampled.params.repetition_penalty = 1.1f;
  const std::vector<uint32_t> everything(static_cast<size_t>(token_mask_words(model_->config().vocab_size)), ~0u);
  static const TokenBias kBias{0, 1.0f};
  for (int i = 0; i < rows; ++i) {
    sequences.push_back(new_sequence());
    if (!sequences.back()->reserve(1)) return;
    inputs.push_back(StepInput{sequences.back().get(), std::span<const int32_t>(&kToken, 1), true,
                               i % 2 == 0 ? sampled : SampleRow{}, std::span<const int32_t>(&kToken, 1)});
    StepInput& input = inputs.back();
    if (i == 1) input.allowed = everything;
    if (i == 0) input.banned = std::span<const int32_t>(&kToken, 1);
    if (i == 0) input.logit_bias = std::span<const TokenBias>(&kBias, 1);
    if (i == 1) input.top_logprobs = 2;
  }
  std::vector<int32_t> out;
  step(inputs, out);
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
    const int trained = model_->config().max_position_embeddings;
    // Raising --max-context helps only below what the model was trained for.
    const std::string advice =
        plan_.max_context < trained   ? " (raise --max-context; the model supports " + std::to_string(trained) + ")"
        : plan_.max_context == trained ? " (the model's trained length: shorten the input, or raise --max-context "
                                         "past it, which the model may not handle well)"
                                       : " (--max-context, already past the model's trained length of " +
                                             std::to_string(trained) + ": shorten the input)";
    throw Error(ErrorCategory::kInvalidArgument, std::string(what) + " has " + std::to_string(ids.size()) +
                                                     " tokens but the context limit is " +
                                                     std::to_string(plan_.max_context) + advice);
  }
}

Tensor Engine::prefill(SequenceBlocks& sequence, std::span<const int32_t> prompt, int ntk_alpha_index) {
  const int chunk_size = model_->limits().max_batch_tokens;
  Tensor logits;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk_size) {
    size_t count = std::min(prompt.size() - begin, static_cast<size_t>(chunk_size));
    SequenceChunk chunk{&sequence, std::span<const int32_t>(prompt.data() + begin, count), ntk_alpha_index};
    int32_t last_row = static_cast<int32_t>(count - 1);
    bool is_last = begin + count == prompt.size();
    logits = model_->forward(std::span<const SequenceChunk>(&chunk, 1),
                             is_last ? std::span<const int32_t>(&last_row, 1) : std::span<const int32_t>());
    sequence.advance(static_cast<int>(count));
  }
  return logits;
}

Tensor Engine::decode_step_fed(SequenceBlocks& sequence, int ntk_alpha_index) {
  static constexpr int32_t kUnused = 0;  // the id is the one the last draw left on the device
  Tensor logits = model_->forward_fed(SequenceChunk{&sequence, std::span<const int32_t>(&kUnused, 1), ntk_alpha_index});
  sequence.advance(1);
  return logits;
}

Tensor Engine::decode_step(SequenceBlocks& sequence, int32_t token, int ntk_alpha_index) {
  const int32_t row = 0;
  SequenceChunk chunk{&sequence, std::span<const int32_t>(&token, 1), ntk_alpha_index};
  Tensor logits = model_->forward(std::span<const SequenceChunk>(&chunk, 1), std::span<const int32_t>(&row, 1));
  sequence.advance(1);
  return logits;
}

int Engine::max_seqs() const { return model_->limits().max_seqs; }
uint64_t Engine::last_layer_tail_passes() const { return model_->last_layer_tail_passes(); }
int Engine::max_batch_tokens() const { return model_->limits().max_batch_tokens; }

std::unique_ptr<SequenceBlocks> Engine::new_sequence() {
  return std::make_unique<SequenceBlocks>(*blocks_, plan_.kv_block_size);
}

void Engine::step(std::span<const StepInput> inputs, std::vector<int32_t>& sampled,
                  std::vector<StepLogprobs>* logprobs) {
  begin_step(inputs, logprobs != nullptr);
  end_step(sampled, logprobs);
}

void Engine::begin_step(std::span<const StepInput> inputs, bool want_logprobs, const std::function<void()>& before_draw) {
  QWENRT_CHECK(!step_in_flight_, "a step begun while the previous one is not finished");
  step_chunks_.clear();
  step_logit_rows_.clear();
  step_rows_host_.clear();
  step_adjust_host_.clear();
  step_mask_rows_host_.clear();
  step_masks_host_.clear();
  step_mask_spans_.clear();
  step_samples_.clear();
  step_top_logprobs_.clear();
  int32_t offset = 0;
  bool penalties = false;
  const auto mask_words = static_cast<size_t>(token_mask_words(model_->config().vocab_size));
  for (const StepInput& input : inputs) {
    QWENRT_CHECK(input.sequence != nullptr && !input.tokens.empty(), "a step input without a sequence or tokens");
    step_chunks_.push_back(SequenceChunk{input.sequence, input.tokens, input.ntk_alpha_index});
    offset += static_cast<int32_t>(input.tokens.size());
    step_samples_.push_back(input.sample ? 1 : 0);
    step_top_logprobs_.push_back(input.top_logprobs);
    if (!input.sample) continue;
    QWENRT_CHECK(input.banned.size() <= static_cast<size_t>(kMaxBannedPerRow),
                 "a step input bans " + std::to_string(input.banned.size()) + " ids (at most " +
                     std::to_string(kMaxBannedPerRow) + ")");
    QWENRT_CHECK(input.logit_bias.size() <= static_cast<size_t>(kMaxLogitBiasPerRow),
                 "a step input biases " + std::to_string(input.logit_bias.size()) + " ids (at most " +
                     std::to_string(kMaxLogitBiasPerRow) + ")");
    // (row, id, bias bits): a ban is a bias of -inf, and wins over a bias of the same id.
    const auto row_index = static_cast<int32_t>(step_rows_host_.size());
    for (const int32_t id : input.banned) {
      step_adjust_host_.insert(step_adjust_host_.end(), {row_index, id, std::bit_cast<int32_t>(-INFINITY)});
    }
    for (const TokenBias& entry : input.logit_bias) {
      if (std::find(input.banned.begin(), input.banned.end(), entry.id) != input.banned.end()) continue;
      step_adjust_host_.insert(step_adjust_host_.end(), {row_index, entry.id, std::bit_cast<int32_t>(entry.bias)});
    }
    if (!input.allowed.empty()) {
      QWENRT_CHECK(input.allowed.size() == mask_words,
                   "a step input's token mask has " + std::to_string(input.allowed.size()) + " words (a vocabulary of " +
                       std::to_string(model_->config().vocab_size) + " ids takes " + std::to_string(mask_words) + ")");
      step_mask_rows_host_.push_back(row_index);
      step_mask_spans_.push_back(input.allowed);  // read once the pass is issued (before_draw)
    }
    step_logit_rows_.push_back(offset - 1);
    SampleRow row = input.sampling;
    row.position = static_cast<uint64_t>(input.sequence->length()) + input.tokens.size();
    step_rows_host_.push_back(row);
    penalties = penalties || row.params.has_penalties();
  }
  ++steps_run_;
  const size_t n_rows = step_rows_host_.size();
  int history_stride = 0;
  // The sampling rows that report log-probabilities, and room for them, before the pass is
  // issued (growing the room waits for the device).
  const auto vocab = static_cast<int64_t>(model_->config().vocab_size);
  step_logprob_rows_host_.clear();
  int top = 0;
  for (size_t i = 0, row = 0; i < step_samples_.size() && want_logprobs; ++i) {
    if (step_samples_[i] == 0) continue;
    if (step_top_logprobs_[i] >= 0) {
      step_logprob_rows_host_.push_back(static_cast<int32_t>(row));
      top = std::max(top, static_cast<int>(std::min<int64_t>(step_top_logprobs_[i], vocab)));
    }
    ++row;
  }
  const size_t n_logprob_rows = step_logprob_rows_host_.size();
  const bool adjusted = !step_adjust_host_.empty() || !step_mask_rows_host_.empty();
  const bool gathered = n_logprob_rows > 0 && (n_logprob_rows < n_rows || adjusted);
  step_logprob_width_ = static_cast<size_t>(top) + 1;
  if (n_logprob_rows > 0) reserve_logprob_rows(n_logprob_rows, step_logprob_width_, gathered);
  step_started_ = std::chrono::steady_clock::now();
  // The draw's inputs go up before the forward pass: uploads are ordered with the ops (on
  // a GPU those up to 8 MiB do not wait for the device: no round trip for the step).
  if (n_rows > 0) {
    backend_->copy_to_device(step_rows_, step_rows_host_.data(), n_rows * sizeof(SampleRow));
    if (penalties) {
      // Penalties look at the whole context (prompt and generated): repetition at all of it,
      // as transformers does; presence and frequency at the ids past params.prompt_tokens.
      // The rows' histories go up in one copy, each row as wide as the longest of them.
      step_lens_host_.assign(n_rows, 0);
      size_t row = 0;
      for (const StepInput& input : inputs) {
        if (!input.sample) continue;
        if (step_rows_host_[row].params.has_penalties()) {
          QWENRT_CHECK(static_cast<int>(input.history.size()) <= plan_.max_context, "sampling history over the context");
          step_lens_host_[row] = static_cast<int32_t>(input.history.size());
          history_stride = std::max(history_stride, step_lens_host_[row]);
        }
        ++row;
      }
      history_stride = std::max(history_stride, 1);
      const auto stride = static_cast<size_t>(history_stride);
      // The stride grows a token a step: the buffer grows geometrically, not to the exact
      // size every step (a fresh block of megabytes a step, mapped and unmapped where large).
      if (n_rows * stride > step_history_host_.capacity()) {
        step_history_host_.reserve(std::max(n_rows * stride, 2 * step_history_host_.capacity()));
      }
      step_history_host_.assign(n_rows * stride, 0);
      row = 0;
      for (const StepInput& input : inputs) {
        if (!input.sample) continue;
        if (step_lens_host_[row] > 0) std::copy(input.history.begin(), input.history.end(), &step_history_host_[row * stride]);
        ++row;
      }
      backend_->copy_to_device(step_history_, step_history_host_.data(), step_history_host_.size() * sizeof(int32_t));
      backend_->copy_to_device(step_history_lens_, step_lens_host_.data(), n_rows * sizeof(int32_t));
    }
    if (!step_adjust_host_.empty()) {
      backend_->copy_to_device(step_adjust_, step_adjust_host_.data(), step_adjust_host_.size() * sizeof(int32_t));
    }
  }
  // Only steps that sample are timed: they end synchronised anyway (the sampled ids come
  // back), so reading the timer adds no wait.
  if (n_rows > 0) {
    if (!step_timer_) step_timer_ = backend_->make_timer();
    step_timer_->start();
  }
  Tensor logits = model_->forward(step_chunks_, step_logit_rows_);
  for (const StepInput& input : inputs) input.sequence->advance(static_cast<int>(input.tokens.size()));
  step_logits_ = logits;
  if (n_rows == 0) {
    step_in_flight_ = true;
    return;
  }
  // Log-probabilities are the model's, before any ban, bias or mask: the rows that report
  // them are gathered before those (unless they are every row and none is touched: the draw
  // leaves the logits as they are), and reduced on the device once the draw has picked.
  if (n_logprob_rows > 0) {
    backend_->copy_to_device(logprob_rows_, step_logprob_rows_host_.data(), n_logprob_rows * sizeof(int32_t));
    if (gathered) {
      backend_->gather_rows(logits, logprob_rows_,
                            Tensor{logprob_logits_, DType::kF32, static_cast<int64_t>(n_logprob_rows), vocab});
    }
  }
  // Then the biases are added and the banned ids and those a mask leaves out get a logit no
  // draw picks (the mask last: it only takes ids away, whatever their bias). The masks are
  // the caller's to fill while the device runs the pass (a grammar's walk of the
  // vocabulary), then go up behind it.
  if (before_draw) before_draw();
  if (!step_mask_rows_host_.empty()) {
    for (const std::span<const uint32_t> mask : step_mask_spans_) {
      step_masks_host_.insert(step_masks_host_.end(), mask.begin(), mask.end());
    }
    backend_->copy_to_device(step_mask_rows_, step_mask_rows_host_.data(), step_mask_rows_host_.size() * sizeof(int32_t));
    backend_->copy_to_device(step_masks_, step_masks_host_.data(), step_masks_host_.size() * sizeof(uint32_t));
  }
  if (!step_adjust_host_.empty()) {
    backend_->adjust_logits(logits, step_adjust_, static_cast<int>(step_adjust_host_.size() / 3));
  }
  if (!step_mask_rows_host_.empty()) {
    backend_->mask_logits(logits, step_mask_rows_, step_masks_, static_cast<int>(step_mask_rows_host_.size()));
  }
  backend_->begin_sample_rows(logits, step_rows_, penalties ? step_history_ : nullptr,
                              penalties ? step_history_lens_ : nullptr, history_stride, step_out_);
  // The drawn ids' log-probabilities and the top ones, behind the draw (they read its ids).
  if (n_logprob_rows > 0) {
    const Tensor source = gathered ? Tensor{logprob_logits_, DType::kF32, static_cast<int64_t>(n_logprob_rows), vocab}
                                   : logits;
    backend_->score_rows(source, step_out_, gathered ? logprob_rows_ : nullptr, top, logprob_values_, logprob_ids_);
  }
  step_timer_->stop();
  step_in_flight_ = true;
}

void Engine::reserve_logprob_rows(size_t rows, size_t width, bool logit_rows) {
  if (rows <= logprob_capacity_rows_ && width <= logprob_capacity_width_ &&
      (!logit_rows || rows <= logprob_capacity_logit_rows_)) {
    return;
  }
  // Rows for every sequence and the top 20 at once (a few KB); the gathered logits (0.6 MB a
  // row at 152k ids) grow by halves from what is asked.
  const size_t capacity_rows =
      std::max({rows, logprob_capacity_rows_, static_cast<size_t>(max_seqs())});
  const size_t capacity_width = std::max<size_t>({width, logprob_capacity_width_, 21});
  const size_t capacity_logit_rows =
      logit_rows && rows > logprob_capacity_logit_rows_
          ? std::min(capacity_rows, std::max(rows, logprob_capacity_logit_rows_ + logprob_capacity_logit_rows_ / 2))
          : logprob_capacity_logit_rows_;
  const auto vocab = static_cast<size_t>(model_->config().vocab_size);
  auto align = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t rows_bytes = align(capacity_rows * sizeof(int32_t));
  const size_t logits_bytes = align(capacity_logit_rows * vocab * sizeof(float));
  const size_t values_bytes = align(capacity_rows * capacity_width * sizeof(float));
  const size_t ids_bytes = capacity_rows * capacity_width * sizeof(int32_t);
  // The buffer may be in use by a step issued before this one: let it finish first. The old
  // one stays, with its pointers, should the new one not fit.
  backend_->synchronize();
  DeviceBuffer grown = backend_->allocate(rows_bytes + logits_bytes + values_bytes + ids_bytes, "log-probability rows");
  logprob_buffer_ = std::move(grown);
  char* base = static_cast<char*>(logprob_buffer_.data());
  logprob_rows_ = reinterpret_cast<int32_t*>(base);
  logprob_logits_ = capacity_logit_rows > 0 ? reinterpret_cast<float*>(base + rows_bytes) : nullptr;
  logprob_values_ = reinterpret_cast<float*>(base + rows_bytes + logits_bytes);
  logprob_ids_ = reinterpret_cast<int32_t*>(base + rows_bytes + logits_bytes + values_bytes);
  logprob_capacity_rows_ = capacity_rows;
  logprob_capacity_width_ = capacity_width;
  logprob_capacity_logit_rows_ = capacity_logit_rows;
}

void Engine::end_step(std::vector<int32_t>& sampled, std::vector<StepLogprobs>* logprobs) {
  QWENRT_CHECK(step_in_flight_, "a step finished that was not begun");
  step_in_flight_ = false;
  const size_t n_inputs = step_samples_.size();
  sampled.assign(n_inputs, -1);
  if (logprobs != nullptr) logprobs->assign(n_inputs, StepLogprobs{});
  const size_t n_rows = step_rows_host_.size();
  if (n_rows == 0) return;
  step_out_host_.resize(n_rows);
  backend_->finish_sample_rows(step_logits_, step_out_, step_out_host_.data());
  const size_t n_logprob_rows = step_logprob_rows_host_.size();
  const size_t width = step_logprob_width_;
  if (n_logprob_rows > 0) {
    step_logprob_values_host_.resize(n_logprob_rows * width);
    step_logprob_ids_host_.resize(n_logprob_rows * width);
    backend_->copy_to_host(step_logprob_values_host_.data(), logprob_values_, n_logprob_rows * width * sizeof(float));
    backend_->copy_to_host(step_logprob_ids_host_.data(), logprob_ids_, n_logprob_rows * width * sizeof(int32_t));
  }
  size_t row = 0, reporting = 0;
  for (size_t i = 0; i < n_inputs; ++i) {
    if (step_samples_[i] == 0) continue;
    sampled[i] = step_out_host_[row];
    if (reporting < n_logprob_rows && step_logprob_rows_host_[reporting] == static_cast<int32_t>(row)) {
      if (logprobs != nullptr) {
        const float* values = step_logprob_values_host_.data() + reporting * width;
        const int32_t* ids = step_logprob_ids_host_.data() + reporting * width;
        StepLogprobs& out = (*logprobs)[i];
        out.sampled = values[0];
        // Entry 0 is the drawn id's, then the most likely ids (none past the vocabulary).
        const auto top = static_cast<size_t>(std::max(step_top_logprobs_[i], 0));
        for (size_t q = 1; q <= top && q < width && ids[q] >= 0; ++q) out.top.push_back(TokenLogprob{ids[q], values[q]});
      }
      ++reporting;
    }
    ++row;
  }
  StepTiming& timing = last_step_timing_;
  ++timing.index;
  timing.step = steps_run_;
  timing.device_seconds = step_timer_->seconds();
  timing.started = step_started_;
  timing.ended = std::chrono::steady_clock::now();
  timing.seconds = std::chrono::duration<double>(timing.ended - step_started_).count();
}

Session::Session(std::unique_ptr<SequenceBlocks> sequence) : sequence_(std::move(sequence)) {}

Session::~Session() = default;

void Session::reset() {
  sequence_->clear();
  ids_.clear();
}

std::unique_ptr<Session> Engine::new_session() {
  return std::unique_ptr<Session>(new Session(new_sequence()));
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
  // Dynamic NTK (the original Qwen): the whole prompt fixes the alpha, and keys computed
  // under another alpha are not reused (their RoPE differs): the prompt is recomputed.
  const int alpha = ntk_alpha_index(model_->config(), static_cast<int>(prompt.size()));
  size_t reused = 0;
  const size_t shared = alpha == session.ntk_alpha_index_ ? std::min(session.ids_.size(), prompt.size() - 1) : 0;
  while (reused < shared && session.ids_[reused] == prompt[reused]) ++reused;
  reused = static_cast<size_t>(sequence.truncate(static_cast<int>(reused)));
  session.ids_.resize(reused);
  session.ntk_alpha_index_ = alpha;
  result.reused_tokens = static_cast<int>(reused);
  if (!sequence.reserve(static_cast<int>(prompt.size() - reused))) {
    throw Error(ErrorCategory::kOutOfMemory, "the KV cache cannot hold the prompt: raise --kv-cache-gb");
  }
  // Presence and frequency count only what this call generates: the prompt is the history's start.
  SamplingParams drawing = options.sampling;
  drawing.prompt_tokens = static_cast<int32_t>(prompt.size());
  const SampleRow sampling{drawing, 0, 0};
  std::vector<int32_t> sampled;
  auto start = std::chrono::steady_clock::now();
  // The prompt in chunks of the batch limit; the last chunk samples the first new token.
  std::span<const int32_t> rest = std::span<const int32_t>(prompt).subspan(reused);
  const size_t chunk_size = static_cast<size_t>(model_->limits().max_batch_tokens);
  try {
    for (size_t begin = 0; begin < rest.size(); begin += chunk_size) {
      const size_t count = std::min(rest.size() - begin, chunk_size);
      const bool last = begin + count == rest.size();
      StepInput input{&sequence, rest.subspan(begin, count), last, sampling, prompt};
      input.ntk_alpha_index = alpha;
      step(std::span<const StepInput>(&input, 1), sampled);
    }
  } catch (...) {
    session.reset();  // a part-written prompt leaves nothing worth keeping
    throw;
  }
  session.ids_ = prompt;
  result.prompt_seconds = seconds_since(start);
  result.time_to_first_token = result.prompt_seconds;
  auto decode_start = std::chrono::steady_clock::now();

  std::vector<int32_t> stop_ids = options.extra_stop_ids;
  if (options.stop_at_eos) {
    for (int id : model_->config().eos_token_ids) stop_ids.push_back(id);
  }
  result.finish_reason = "length";
  // The step after the next is issued before the next token is read back: its input is that
  // draw, left on the device (decode_step_fed), so the device does not wait on the host
  // between tokens. Penalties read the context's ids from a device copy: the known ids go up
  // once, each fed token is copied there on the device. When a token ends the generation, the
  // step it fed is undone.
  const bool penalties = options.sampling.has_penalties();
  auto* history = static_cast<int32_t*>(sampling_buffer_.data());  // [max_context], then out, length
  int32_t* history_len = history + plan_.max_context + 1;
  std::array<int32_t, 2> drawn{};
  int in_flight = -1;  // ticket of the draw of the token after `token`, fed by `token`
  size_t in_flight_slot = 0;  // where in `drawn` it lands
  const auto room_for_one = [&] { return sequence.length() + 1 <= plan_.max_context && sequence.reserve(1); };
  // The draw after the step just issued (keyed by the position it fills, as step() keys it);
  // its history is the cache's ids, the first sequence.length() of `history`.
  const auto begin_draw = [&](const Tensor& logits, size_t slot) {
    if (penalties) {
      const int32_t length = sequence.length();
      backend_->copy_to_device(history_len, &length, sizeof(length));
    }
    return backend_->begin_sample(logits, drawing, static_cast<uint64_t>(sequence.length()),
                                  penalties ? history : nullptr, penalties ? history_len : nullptr,
                                  plan_.max_context, model_->fed_token(), &drawn[slot]);
  };
  // When the generation ends on `token`, the step it fed is not wanted: its draw is dropped
  // (whatever its logits), its cache position given back.
  const auto undo_in_flight = [&] {
    if (in_flight < 0) return;
    const int ticket = in_flight;
    in_flight = -1;
    backend_->drop_sample(ticket);
    session.ids_.resize(static_cast<size_t>(sequence.truncate(sequence.length() - 1)));
  };
  int32_t token = sampled[0];
  // The original Qwen's stop words (generation_config.json stop_words_ids), as its generate()
  // applies them: once the context (prompt and generated ids) ends with one, the end-of-text
  // id is forced as the next token, which ends the generation. A prompt that ends with one
  // gets that id first.
  const std::vector<std::vector<int>>& stop_words = model_->config().stop_words_ids;
  const bool watch_stop_words = options.stop_at_eos && !stop_words.empty();
  const auto context_ends_with_stop_word = [&] {
    const size_t length = prompt.size() + result.ids.size();
    const auto at = [&](size_t i) { return i < prompt.size() ? prompt[i] : result.ids[i - prompt.size()]; };
    return std::any_of(stop_words.begin(), stop_words.end(), [&](const std::vector<int>& word) {
      if (word.size() > length) return false;
      for (size_t k = 0; k < word.size(); ++k) {
        if (at(length - word.size() + k) != word[k]) return false;
      }
      return true;
    });
  };
  if (watch_stop_words && context_ends_with_stop_word()) token = model_->config().eos_token_ids.front();
  std::exception_ptr callback_error;  // raised by on_token: the session stays as fed
  try {
    for (int step_index = 0; step_index < options.max_new_tokens; ++step_index) {
      result.ids.push_back(token);
      bool keep_going = true;
      if (on_token) {
        try {
          keep_going = on_token(token);
        } catch (...) {
          callback_error = std::current_exception();
        }
      }
      const bool stop = std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
      if (callback_error || stop || !keep_going) {
        result.finish_reason = stop ? "stop" : "cancelled";
        undo_in_flight();
        break;
      }
      if (step_index + 1 == options.max_new_tokens) break;
      if (watch_stop_words && context_ends_with_stop_word()) {
        // The end-of-text id is the next token whatever the step in flight draws: that step is
        // dropped, and the next turn takes the id as a drawn one (and stops on it: with stop
        // words, the EOS ids are stop ids).
        undo_in_flight();
        token = model_->config().eos_token_ids.front();
        continue;
      }
      if (in_flight < 0) {
        if (!room_for_one()) {
          result.finish_reason = "length";
          break;
        }
        // The history the next draw sees includes this token; ids_ mirrors the cache after it.
        session.ids_.push_back(token);
        if (penalties) backend_->copy_to_device(history, session.ids_.data(), session.ids_.size() * sizeof(int32_t));
        in_flight = begin_draw(decode_step(sequence, token, alpha), in_flight_slot);
      }
      // The next token's draw is in flight: issue the step it feeds before reading it.
      const bool ahead = step_index + 2 < options.max_new_tokens && room_for_one();
      int next = -1;
      if (ahead) {
        if (penalties) backend_->copy_on_device(history + sequence.length(), model_->fed_token(), sizeof(int32_t));
        Tensor logits = decode_step_fed(sequence, alpha);
        next = begin_draw(logits, in_flight_slot ^ 1);
      }
      backend_->finish_sample(in_flight);
      token = drawn[in_flight_slot];
      in_flight = next;
      in_flight_slot ^= 1;
      if (ahead) session.ids_.push_back(token);  // its step is issued: the cache holds it
    }
  } catch (...) {
    session.reset();
    throw;
  }
  if (callback_error) std::rethrow_exception(callback_error);
  backend_->synchronize();
  if (!result.ids.empty()) result.decode_seconds = seconds_since(decode_start);
  result.kv_bytes_used = sequence.block_table().size() * plan_.kv_block_size * plan_.kv_bytes_per_token;
  device_used_now();
  return result;
}

ScoreResult Engine::score(const std::vector<int32_t>& ids, int top_logprobs) {
  check_prompt(ids, "the text to score");
  if (ids.size() < 2) throw Error(ErrorCategory::kInvalidArgument, "scoring needs at least two token ids");
  ScoreResult result;
  SequenceBlocks sequence(*blocks_, plan_.kv_block_size);
  if (!sequence.reserve(static_cast<int>(ids.size()))) {
    throw Error(ErrorCategory::kOutOfMemory, "the KV cache cannot hold the sequence: raise --kv-cache-gb");
  }
  auto start = std::chrono::steady_clock::now();
  // Passes as long as a prompt's chunks; the logits of each pass's rows in slices as many
  // as the logits buffer holds, each reduced where it is (Backend::score_rows): a softmax,
  // argmax and top k a row, only those few numbers coming back.
  const int chunk_size = model_->limits().max_batch_tokens;
  const int slice_size = model_->limits().max_logit_rows;
  const int vocab = model_->config().vocab_size;
  const int k = std::clamp(top_logprobs, 0, vocab - 1);
  const auto width = static_cast<size_t>(k) + 1;
  DeviceBuffer targets = backend_->allocate(static_cast<size_t>(slice_size) * sizeof(int32_t), "score targets");
  DeviceBuffer row_logprobs = backend_->allocate(slice_size * width * sizeof(float), "score log-probabilities");
  DeviceBuffer row_ids = backend_->allocate(slice_size * width * sizeof(int32_t), "score ids");
  std::vector<float> host_logprobs(slice_size * width);
  std::vector<int32_t> host_ids(slice_size * width);
  // Position i predicts ids[i + 1]; the last position predicts nothing. A teacher-forced
  // pass takes its dynamic-NTK alpha from the whole sequence, as the original's forward.
  const size_t predicting = ids.size() - 1;
  result.argmax.resize(predicting);
  result.logprobs.resize(predicting);
  if (top_logprobs > 0) result.top.resize(predicting);
  const int alpha = ntk_alpha_index(model_->config(), static_cast<int>(ids.size()));
  for (size_t begin = 0; begin < predicting; begin += chunk_size) {
    const size_t count = std::min(predicting - begin, static_cast<size_t>(chunk_size));
    SequenceChunk chunk{&sequence, std::span<const int32_t>(ids.data() + begin, count), alpha};
    const Tensor hidden = model_->forward_hidden(std::span<const SequenceChunk>(&chunk, 1));
    sequence.advance(static_cast<int>(count));
    for (size_t first = 0; first < count; first += slice_size) {
      const size_t rows = std::min(count - first, static_cast<size_t>(slice_size));
      const Tensor logits = model_->logits_of(hidden.row_slice(static_cast<int64_t>(first), static_cast<int64_t>(rows)));
      const size_t from = begin + first;  // the slice's first position
      backend_->copy_to_device(targets.data(), ids.data() + from + 1, rows * sizeof(int32_t));
      backend_->score_rows(logits, static_cast<const int32_t*>(targets.data()), nullptr, k,
                           static_cast<float*>(row_logprobs.data()), static_cast<int32_t*>(row_ids.data()));
      backend_->copy_to_host(host_logprobs.data(), row_logprobs.data(), rows * width * sizeof(float));
      backend_->copy_to_host(host_ids.data(), row_ids.data(), rows * width * sizeof(int32_t));
      for (size_t r = 0; r < rows; ++r) {
        const size_t at = from + r;
        const float* lp = host_logprobs.data() + r * width;
        const int32_t* id = host_ids.data() + r * width;
        if (!std::isfinite(lp[0])) {
          throw Error(ErrorCategory::kInvalidModel,
                      non_finite_logits_message("position " + std::to_string(at), backend_->activation_dtype()));
        }
        result.argmax[at] = id[0];
        result.logprobs[at] = lp[0];
        for (int q = 1; q <= k && top_logprobs > 0; ++q) result.top[at].push_back(TokenLogprob{id[q], lp[q]});
      }
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

void check_bench_context(int64_t prompt, int64_t gen, int64_t max_context) {
  if (prompt + gen <= max_context) return;
  throw Error(ErrorCategory::kInvalidArgument, "--prompt + --gen (" + std::to_string(prompt + gen) +
                                                   ") exceeds the context limit " + std::to_string(max_context) +
                                                   " (raise --max-context)");
}

BenchResult Engine::bench(const BenchOptions& options) {
  const ModelConfig& config = model_->config();
  if (options.prompt_tokens < 1 || options.gen_tokens < 1 || options.repeat < 1 || options.warmup < 0) {
    throw Error(ErrorCategory::kInvalidArgument, "--prompt, --gen and --repeat must be positive");
  }
  check_bench_context(options.prompt_tokens, options.gen_tokens, plan_.max_context);
  uint64_t state = splitmix64(options.seed);
  std::vector<int32_t> prompt(options.prompt_tokens);
  for (auto& id : prompt) {
    state = splitmix64(state);
    id = static_cast<int32_t>(state % static_cast<uint64_t>(config.vocab_size));
  }
  auto* out_device = static_cast<int32_t*>(sampling_buffer_.data()) + plan_.max_context;
  const SamplingParams& sampling = options.sampling;
  if (sampling.has_penalties()) {
    throw Error(ErrorCategory::kInvalidArgument, "bench measures sampling without repetition penalties");
  }
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
    const int alpha = ntk_alpha_index(config, options.prompt_tokens);
    Tensor logits = prefill(sequence, prompt, alpha);
    timer->stop();
    int32_t token = 0;
    backend_->sample(logits, sampling, 0, nullptr, nullptr, 0, out_device, &token);
    double ttft = seconds_since(wall_start);
    double prompt_time = timer->seconds();
    timer->start();
    // As generate() does: each step's token is the draw before it, fed on the device, and
    // the host issues step n + 1 before it reads step n's id.
    std::array<int32_t, 2> drawn{};
    logits = decode_step(sequence, token, alpha);
    int in_flight = backend_->begin_sample(logits, sampling, 1, nullptr, nullptr, 0, model_->fed_token(), &drawn[0]);
    for (int step = 1; step < options.gen_tokens; ++step) {
      logits = decode_step_fed(sequence, alpha);
      const int next = backend_->begin_sample(logits, sampling, static_cast<uint64_t>(step + 1), nullptr, nullptr, 0,
                                              model_->fed_token(), &drawn[static_cast<size_t>(step) % 2]);
      backend_->finish_sample(in_flight);
      in_flight = next;
    }
    backend_->finish_sample(in_flight);
    timer->stop();
    double decode_time = timer->seconds();
    device_used_now();
    if (options.on_run) {
      options.on_run(BenchRunDone::of_run(run, options.warmup, options.repeat, options.prompt_tokens / prompt_time,
                                          options.gen_tokens / decode_time));
    }
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
  result.prefill_chunk = model_->limits().max_batch_tokens;
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
  const double decode_bytes_per_s = result.decode_bytes_per_token * result.decode_tokens_per_s;
  if (info.peak_bandwidth > 0) result.bandwidth_fraction = decode_bytes_per_s / info.peak_bandwidth;
  if (info.rated_bandwidth > 0) result.rated_bandwidth_fraction = decode_bytes_per_s / info.rated_bandwidth;
  if (info.peak_matmul_flops > 0) {
    result.matmul_fraction = result.prefill_flops / result.prompt_seconds / info.peak_matmul_flops;
  }
  result.peak_used_bytes = peak_used_;
  return result;
}

}  // namespace qwenrt
