// qwenrt's public API: load a Qwen model folder onto a device and generate or score.
#pragma once

#include <chrono>
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
// The longest context a sequence may be given: far past any Qwen's, and short of sizes whose
// block counts and byte counts would overflow.
constexpr int kMaxContextTokens = 1 << 24;

struct EngineOptions {
  std::string device = "auto";     // "auto" (a usable GPU, else the CPU), "cpu", "gpu", "gpu:N" (or "cuda", "cuda:N")
  DType dtype = DType::kBF16;      // GPU weights/activations; the CPU computes in fp32
  int threads = 0;                 // CPU threads; 0 = all cores
  int max_context = 0;             // tokens per sequence; 0 = min(model max, 32768); at most kMaxContextTokens
  double kv_cache_gb = 0;          // KV pool size; 0 = kv_cache_tokens
  int64_t kv_cache_tokens = 0;     // KV pool size in tokens when kv_cache_gb is 0; 0 = one max_context sequence
  // On a GPU, when neither size is given: the KV pool takes this fraction of the free device
  // memory less weights and workspace (as vLLM's gpu_memory_utilization); 0 = off.
  double kv_memory_fraction = 0;
  int max_batch_tokens = 512;      // tokens per forward pass (prompt chunk size)
  int max_logit_rows = 128;        // rows of logits per pass (a scored pass takes its logits in slices of this many)
  bool record_decode = true;       // GPU: replay each decode step as one recorded graph
  int max_seqs = 8;                // sequences per forward pass (the batched step's width)
  // Called while weights load: (bytes done, bytes total).
  std::function<void(uint64_t, uint64_t)> load_progress;
};

// Where the memory goes, in bytes.
struct MemoryPlan {
  size_t weights = 0;        // allocated for weights (0 for in-place mapped CPU matrices)
  size_t mapped_weights = 0; // checkpoint bytes mapped from disk
  size_t kv_pool = 0;
  size_t workspace = 0;
  size_t backend_workspace = 0;  // the backend's fixed buffers: matrix library, attention partials, sampling
  int kv_blocks = 0;
  int kv_block_size = 0;
  size_t kv_bytes_per_token = 0;
  int max_context = 0;
  size_t device_total = 0;       // device memory in all (0 on the CPU)
  size_t used_before_load = 0;   // in use before the plan, backend buffers excluded: runtime context, others
};

// Where the time to a loaded, ready engine went.
struct StartupTimes {
  double load_seconds = 0;    // weights to the device, KV pool and workspace allocated
  double warmup_seconds = 0;  // first kernel loads, matrix-library choices, recorded decode steps
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

// One finished run of a benchmark, for progress: the warm-up runs come first (`warmup`
// true), then the timed ones; `index` counts each kind from 1.
struct BenchRunDone {
  bool warmup = false;
  int index = 0, of = 0;
  double prompt_tokens_per_s = 0, decode_tokens_per_s = 0;

  // Run `run` (from 0, warm-up runs first) of `warmup` + `repeat`.
  static BenchRunDone of_run(int run, int warmup, int repeat, double prompt_tokens_per_s,
                             double decode_tokens_per_s) {
    const bool warming = run < warmup;
    return {warming, warming ? run + 1 : run - warmup + 1, warming ? warmup : repeat, prompt_tokens_per_s,
            decode_tokens_per_s};
  }
};

struct BenchOptions {
  int prompt_tokens = 512;
  int gen_tokens = 128;
  int repeat = 3;    // timed runs; medians are reported
  int warmup = 1;    // untimed runs first
  uint64_t seed = 1;
  SamplingParams sampling;  // greedy unless a temperature is set
  std::function<void(const BenchRunDone&)> on_run;  // after each run (optional)
};

struct BenchResult {
  int prompt_tokens = 0, gen_tokens = 0, repeat = 0;
  int prefill_chunk = 0;            // prompt tokens per forward pass
  double prompt_seconds = 0;        // median prefill time (device timer)
  double time_to_first_token = 0;   // median prefill + first sample, to the host
  double decode_seconds = 0;        // median time of gen_tokens decode steps
  double prompt_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  double decode_bytes_per_token = 0;  // weights + mean KV read per decoded token
  double prefill_flops = 0;           // matrix + attention FLOPs of one prefill
  double bandwidth_fraction = 0;      // of DeviceInfo::peak_bandwidth (0: unknown)
  double matmul_fraction = 0;         // of DeviceInfo::peak_matmul_flops (0: unknown)
  double rated_bandwidth_fraction = 0;  // decode, of DeviceInfo::rated_bandwidth (0: unknown)
  size_t peak_used_bytes = 0;         // device memory in use at the measured peak (0 on CPU)
};

struct BatchBenchOptions {
  int batch = 8;          // sequences decoded together
  int prompt_tokens = 128;
  int gen_tokens = 128;
  int repeat = 3;
  int warmup = 1;
  uint64_t seed = 1;        // the random prompts
  SamplingParams sampling;  // every sequence's (its own random stream); greedy by default
  std::function<void(const BenchRunDone&)> on_run;  // after each run (optional)
};

struct BatchBenchResult {
  int batch = 0, prompt_tokens = 0, gen_tokens = 0, repeat = 0;
  double prefill_seconds = 0;         // median time to prefill every prompt (and sample once)
  double decode_seconds = 0;          // median time of the gen_tokens batched decode steps
  double prefill_tokens_per_s = 0;    // batch × prompt_tokens / prefill_seconds
  double decode_tokens_per_s = 0;     // batch × gen_tokens / decode_seconds (S_TG)
  double step_ms_median = 0, step_ms_p90 = 0, step_ms_max = 0;  // decode steps, wall clock
  double step_device_ms_median = 0;   // their work on the device (StepTiming::device_seconds)
  size_t kv_bytes_in_use = 0;         // KV blocks held at the end of decoding
  int kv_blocks_in_use = 0, kv_blocks_total = 0;
  size_t peak_used_bytes = 0;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

struct ScoreResult {
  std::vector<double> logprobs;  // log p(ids[i] | ids[:i]) for i = 1..n-1
  std::vector<int32_t> argmax;   // the most likely token at each of those positions
  // With score(ids, k > 0): the k most likely tokens at each of those positions, most likely
  // first (ties: the lower id first).
  std::vector<std::vector<TokenLogprob>> top;
  double nll_mean = 0;
  double perplexity = 0;
  double seconds = 0;
};

class SequenceBlocks;
class BlockAllocator;
struct SequenceChunk;

// One sequence's part of Engine::step: `tokens` are appended to `sequence` (its blocks
// reserved for them) and, when `sample` is set, the token after them is drawn with
// `sampling` (its position is filled in by step: the sequence's length after the step).
struct StepInput {
  SequenceBlocks* sequence = nullptr;
  std::span<const int32_t> tokens;
  bool sample = false;
  SampleRow sampling;
  // The context the penalties see: every token before the one sampled. Only read when the
  // sampling parameters have a penalty.
  std::span<const int32_t> history;
  // >= 0: also report the sampled token's log-probability and this many most likely
  // alternatives (from the model's distribution before sampling parameters apply).
  int top_logprobs = -1;
  // The sequence's dynamic-NTK alpha (the original Qwen; 0 otherwise): ntk_alpha_index of
  // its whole prompt, the same on every step of the sequence (model/config.h).
  int ntk_alpha_index = 0;
  // Token ids this row may not sample (at most kMaxBannedPerRow): the scheduler's
  // min_tokens holds off end-of-sequence and stop ids. The log-probabilities stay the model's.
  std::span<const int32_t> banned;
  // Added to this row's logits before the draw (a request's logit_bias; at most
  // kMaxLogitBiasPerRow; a banned id stays banned). Each id at most once: the device adds
  // the entries in parallel, so two of one id would race (Scheduler::submit refuses them
  // once, rather than every step here). The log-probabilities stay the model's.
  std::span<const TokenBias> logit_bias;
  // The ids this row may draw (a grammar's structured output): empty, no constraint; else
  // exactly token_mask_words(config().vocab_size) words, bit id % 32 of word id / 32 set when
  // id may be drawn. Applied after logit_bias and the bans, so it only takes ids away. The
  // log-probabilities stay the model's (as for bans and biases).
  std::span<const uint32_t> allowed;
};
inline constexpr int kMaxBannedPerRow = 16;

// What Engine::step reports for an input that asked for log-probabilities.
struct StepLogprobs {
  float sampled = 0;             // log p(sampled token)
  std::vector<TokenLogprob> top;  // most likely first
};

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
  int ntk_alpha_index_ = 0;   // the dynamic-NTK alpha that KV was computed under
};

// The times of a step that sampled: its wall time in Engine::step and the span of its work
// on the device, from the first op to the sampled ids (device events on GPUs); what the
// wall time has beyond the span is host work the device waited for. `index` counts the
// timed steps, `step` every step run so far (so a caller can tell whether two timed steps
// were consecutive).
struct StepTiming {
  uint64_t index = 0;
  uint64_t step = 0;
  double seconds = 0;
  double device_seconds = 0;
  std::chrono::steady_clock::time_point started, ended;
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
  // Tokens the whole KV pool holds: the most one sequence can ever have.
  int64_t kv_pool_tokens() const { return static_cast<int64_t>(plan_.kv_blocks) * plan_.kv_block_size; }
  const StartupTimes& startup_times() const { return startup_; }
  Backend& backend() { return *backend_; }

  // on_token(id) is called as each token is generated; return false to stop early.
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const std::function<bool(int32_t)>& on_token = {});
  // The same, keeping the KV cache in `session` for the next call (prefix reuse).
  GenerateResult generate(Session& session, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const std::function<bool(int32_t)>& on_token = {});
  std::unique_ptr<Session> new_session();
  ScoreResult score(const std::vector<int32_t>& ids, int top_logprobs = 0);
  BenchResult bench(const BenchOptions& options);
  // N sequences with their own random prompts, prefilled, then decoded together.
  BatchBenchResult bench_batch(const BatchBenchOptions& options);

  // ---- the batched step (what the scheduler and bench_batch drive) ----
  // One forward pass over every input (at most max_seqs() of them, max_batch_tokens() new
  // tokens in all); advances each sequence and writes, per input, the sampled token or -1.
  // Sequences may join and leave between calls; each carries its own sampling state.
  // `logprobs`, when given, gets one entry per input (filled for those that asked).
  void step(std::span<const StepInput> inputs, std::vector<int32_t>& sampled,
            std::vector<StepLogprobs>* logprobs = nullptr);
  // The same step in two halves, so that the host can work while the device runs it:
  // begin_step stages and issues the forward pass and the draw (it returns before the
  // device is done; `inputs` may go once it returns), end_step waits for the sampled ids.
  // Between the two nothing else may use the engine. `want_logprobs`: end_step will be
  // given a `logprobs` vector. `before_draw`, when given, runs once the forward pass is
  // issued and before the masks (StepInput::allowed) are read: the host fills them while
  // the device runs the pass (the spans must already have their size).
  void begin_step(std::span<const StepInput> inputs, bool want_logprobs = false,
                  const std::function<void()>& before_draw = nullptr);
  void end_step(std::vector<int32_t>& sampled, std::vector<StepLogprobs>* logprobs = nullptr);
  // The last step that sampled (StepTiming::index 0: none yet).
  const StepTiming& last_step_timing() const { return last_step_timing_; }
  std::unique_ptr<SequenceBlocks> new_sequence();
  BlockAllocator& block_allocator() { return *blocks_; }
  int max_seqs() const;
  int max_batch_tokens() const;
  int max_context() const { return plan_.max_context; }
  // Passes whose last layer ran past its K/V write for the logit rows alone (a prompt
  // chunk's other tokens skip its attention output, MLP and final norm): for tests.
  uint64_t last_layer_tail_passes() const;
  // Throws kInvalidArgument when `ids` is empty, has an id outside the vocabulary or does
  // not fit the context.
  void check_prompt(const std::vector<int32_t>& ids, const char* what) const;

  // Device memory in use now (0 on the CPU), and the largest value seen by any call.
  size_t device_used_now();
  size_t device_used_peak() const { return peak_used_; }

 private:
  void init(const ModelConfig& config, const EngineOptions& options,
            const std::function<Weights(Backend&)>& make_weights, size_t weight_bytes);
  void warm_up();
  void warm_up_batched();
  // Room in logprob_buffer_ for `rows` rows of log-probabilities `width` wide, and for their
  // logits when `logit_rows` (grown, never shrunk; allocated before the old room goes).
  void reserve_logprob_rows(size_t rows, size_t width, bool logit_rows);
  // `ntk_alpha_index`: the sequence's dynamic-NTK alpha (model/config.h), from its whole prompt.
  Tensor prefill(SequenceBlocks& sequence, std::span<const int32_t> prompt, int ntk_alpha_index);
  // Appends one token (its blocks reserved) and returns the logits that follow it.
  Tensor decode_step(SequenceBlocks& sequence, int32_t token, int ntk_alpha_index);
  // The same step with the token a draw left at the model's fed_token() (not read back yet).
  Tensor decode_step_fed(SequenceBlocks& sequence, int ntk_alpha_index);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<class ModelFiles> files_;
  std::unique_ptr<QwenModel> model_;
  std::unique_ptr<class BlockAllocator> blocks_;
  DeviceBuffer sampling_buffer_;  // history [max_context] + out id, in backend memory
  // The batched step's sampling state in backend memory: rows [max_seqs] SampleRow, out ids
  // [max_seqs], history lengths [max_seqs], histories [max_seqs, max_context], logit
  // adjustments (row, id, bias bits) [max_seqs · (kMaxBannedPerRow + kMaxLogitBiasPerRow), 3],
  // masked rows [max_seqs] and their masks [max_seqs, token_mask_words(vocab)].
  DeviceBuffer step_buffer_;
  SampleRow* step_rows_ = nullptr;
  int32_t* step_out_ = nullptr;
  int32_t* step_history_lens_ = nullptr;
  int32_t* step_history_ = nullptr;
  int32_t* step_adjust_ = nullptr;  // the logit adjustments above
  int32_t* step_mask_rows_ = nullptr;  // the masked rows' sampling rows
  uint32_t* step_masks_ = nullptr;     // their masks (StepInput::allowed)
  // Host staging reused by every step (no allocation once grown).
  std::vector<SequenceChunk> step_chunks_;
  std::vector<int32_t> step_logit_rows_, step_out_host_, step_lens_host_, step_history_host_, step_adjust_host_;
  std::vector<int32_t> step_mask_rows_host_;
  std::vector<uint32_t> step_masks_host_;
  std::vector<std::span<const uint32_t>> step_mask_spans_;  // read after begin_step's before_draw
  std::vector<SampleRow> step_rows_host_;
  // The log-probabilities of drawn tokens, reduced on the device (Backend::score_rows) from
  // the model's logits (before bans, biases and masks): the reporting rows' sampling rows
  // [rows] (int32), their logits when gathered [logit rows, vocab] (fp32), then
  // log-probabilities and ids [rows, width]. Allocated at the first step that asks for them.
  DeviceBuffer logprob_buffer_;
  size_t logprob_capacity_rows_ = 0, logprob_capacity_width_ = 0, logprob_capacity_logit_rows_ = 0;
  int32_t* logprob_rows_ = nullptr;
  float* logprob_logits_ = nullptr;
  float* logprob_values_ = nullptr;
  int32_t* logprob_ids_ = nullptr;
  // The step between begin_step and end_step: per input whether it samples and its
  // top_logprobs; the logits; the sampling rows that report log-probabilities, how wide
  // their results are (top_logprobs + 1), and the results once back.
  std::vector<uint8_t> step_samples_;
  std::vector<int> step_top_logprobs_;
  Tensor step_logits_;
  std::vector<int32_t> step_logprob_rows_host_, step_logprob_ids_host_;
  std::vector<float> step_logprob_values_host_;
  size_t step_logprob_width_ = 0;
  bool step_in_flight_ = false;
  std::chrono::steady_clock::time_point step_started_;
  std::unique_ptr<DeviceTimer> step_timer_;
  StepTiming last_step_timing_;
  uint64_t steps_run_ = 0;
  MemoryPlan plan_;
  StartupTimes startup_;
  size_t peak_used_ = 0;
};

// Creates the backend named by `device` ("auto", "cpu", "gpu", "gpu:1", "cuda", "cuda:1").
std::unique_ptr<Backend> make_backend(const std::string& device, DType dtype, int threads);
// The GPU index a device name asks for: -1 for the CPU, nullopt for auto. Throws
// kInvalidArgument naming the forms accepted for anything else (the commands check --device
// with it before loading anything).
std::optional<int> parse_device(const std::string& device);
// Throws kInvalidArgument when a benchmark's sequences (`prompt` + `gen` tokens each) do not
// fit a context of `max_context` tokens: the engine's benchmarks check it, and bench before
// the weights load, in the same words.
void check_bench_context(int64_t prompt, int64_t gen, int64_t max_context);

}  // namespace qwenrt
