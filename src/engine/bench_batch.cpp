// `bench --batch N`: N sequences, each with its own random prompt, prefilled (in chunks of
// the batch-token limit, several prompts per pass), then decoded together one batched step
// per token. Decode throughput counts decode time only, as llama-batched-bench's S_TG does;
// prefill is reported separately.
#include <algorithm>
#include <chrono>
#include <memory>

#include "core/error.h"
#include "core/random_bits.h"
#include "core/stats.h"
#include "engine/kv_cache.h"
#include "qwenrt/engine.h"

namespace qwenrt {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

BatchBenchResult Engine::bench_batch(const BatchBenchOptions& options) {
  if (options.batch < 1 || options.prompt_tokens < 1 || options.gen_tokens < 1 || options.repeat < 1 ||
      options.warmup < 0) {
    throw Error(ErrorCategory::kInvalidArgument, "--batch, --prompt, --gen and --repeat must be positive");
  }
  if (options.batch > max_seqs()) {
    throw Error(ErrorCategory::kInvalidArgument, "--batch " + std::to_string(options.batch) +
                                                     " is over --max-seqs " + std::to_string(max_seqs()));
  }
  check_bench_context(options.prompt_tokens, options.gen_tokens, plan_.max_context);
  const int per_sequence = options.prompt_tokens + options.gen_tokens;
  const int blocks_each = (per_sequence + plan_.kv_block_size - 1) / plan_.kv_block_size;
  if (static_cast<int64_t>(blocks_each) * options.batch > blocks_->num_blocks()) {
    throw Error(ErrorCategory::kOutOfMemory,
                "the KV cache has " + std::to_string(blocks_->num_blocks()) + " blocks but " +
                    std::to_string(options.batch) + " sequences of " + std::to_string(per_sequence) +
                    " tokens need " + std::to_string(static_cast<int64_t>(blocks_each) * options.batch) +
                    ": raise --kv-cache-gb");
  }
  const int vocab = config().vocab_size;
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(options.batch));
  uint64_t state = splitmix64(options.seed);
  for (auto& prompt : prompts) {
    prompt.resize(static_cast<size_t>(options.prompt_tokens));
    for (auto& id : prompt) {
      state = splitmix64(state);
      id = static_cast<int32_t>(state % static_cast<uint64_t>(vocab));
    }
  }
  // Each sequence draws from its own stream; penalties see its prompt and what it generated.
  std::vector<SampleRow> rows(static_cast<size_t>(options.batch));
  for (int i = 0; i < options.batch; ++i) {
    rows[static_cast<size_t>(i)].params = options.sampling;
    rows[static_cast<size_t>(i)].params.prompt_tokens = options.prompt_tokens;
    rows[static_cast<size_t>(i)].stream = static_cast<uint64_t>(i);
  }
  const bool penalised = options.sampling.has_penalties();
  const int token_budget = max_batch_tokens();
  std::vector<double> prefill_times, decode_times, step_times, step_device_times;
  BatchBenchResult result;
  std::vector<int32_t> sampled;
  std::vector<StepInput> inputs;
  for (int run = 0; run < options.warmup + options.repeat; ++run) {
    std::vector<std::unique_ptr<SequenceBlocks>> sequences;
    for (int i = 0; i < options.batch; ++i) {
      sequences.push_back(new_sequence());
      QWENRT_CHECK(sequences.back()->reserve(per_sequence), "KV blocks counted above");
    }
    std::vector<int32_t> last(static_cast<size_t>(options.batch), 0);
    std::vector<std::vector<int32_t>> history;
    if (penalised) history = prompts;
    backend_->synchronize();
    const auto prefill_start = std::chrono::steady_clock::now();
    // Prefill: pack prompt chunks of several sequences into each pass up to the limits.
    std::vector<int> done(static_cast<size_t>(options.batch), 0);
    int next = 0;
    while (next < options.batch) {
      inputs.clear();
      int budget = token_budget;
      for (int i = next; i < options.batch && budget > 0 && static_cast<int>(inputs.size()) < max_seqs(); ++i) {
        const int count = std::min(budget, options.prompt_tokens - done[i]);
        const bool finishes = done[i] + count == options.prompt_tokens;
        inputs.push_back(StepInput{sequences[i].get(),
                                   std::span<const int32_t>(prompts[i]).subspan(static_cast<size_t>(done[i]),
                                                                                 static_cast<size_t>(count)),
                                   finishes, rows[static_cast<size_t>(i)],
                                   penalised ? std::span<const int32_t>(history[i]).first(static_cast<size_t>(done[i] + count))
                                             : std::span<const int32_t>()});
        budget -= count;
      }
      step(inputs, sampled);
      for (size_t k = 0; k < inputs.size(); ++k) {
        const int i = next + static_cast<int>(k);
        done[i] += static_cast<int>(inputs[k].tokens.size());
        if (sampled[k] >= 0) last[i] = sampled[k];
      }
      while (next < options.batch && done[next] == options.prompt_tokens) ++next;
    }
    const auto decode_start = std::chrono::steady_clock::now();
    std::vector<double> run_steps, run_device_steps;
    for (int t = 0; t < options.gen_tokens; ++t) {
      const auto step_start = std::chrono::steady_clock::now();
      inputs.clear();
      for (int i = 0; i < options.batch; ++i) {
        if (penalised) history[i].push_back(last[i]);
        inputs.push_back(StepInput{sequences[i].get(), std::span<const int32_t>(&last[i], 1), true,
                                   rows[static_cast<size_t>(i)],
                                   penalised ? std::span<const int32_t>(history[i]) : std::span<const int32_t>()});
      }
      step(inputs, sampled);  // reads the sampled ids back: each step ends synchronised
      std::copy(sampled.begin(), sampled.end(), last.begin());
      run_steps.push_back(seconds_between(step_start, std::chrono::steady_clock::now()));
      run_device_steps.push_back(last_step_timing().device_seconds);
    }
    const auto decode_end = std::chrono::steady_clock::now();
    device_used_now();
    if (options.on_run) {
      options.on_run(BenchRunDone::of_run(
          run, options.warmup, options.repeat,
          static_cast<double>(options.batch) * options.prompt_tokens / seconds_between(prefill_start, decode_start),
          static_cast<double>(options.batch) * options.gen_tokens / seconds_between(decode_start, decode_end)));
    }
    if (run >= options.warmup) {
      prefill_times.push_back(seconds_between(prefill_start, decode_start));
      decode_times.push_back(seconds_between(decode_start, decode_end));
      step_times.insert(step_times.end(), run_steps.begin(), run_steps.end());
      step_device_times.insert(step_device_times.end(), run_device_steps.begin(), run_device_steps.end());
      result.kv_blocks_in_use = blocks_->held_blocks();
    }
  }
  result.batch = options.batch;
  result.prompt_tokens = options.prompt_tokens;
  result.gen_tokens = options.gen_tokens;
  result.repeat = options.repeat;
  result.prefill_seconds = percentile(prefill_times, 0.5);
  result.decode_seconds = percentile(decode_times, 0.5);
  result.prefill_tokens_per_s = static_cast<double>(options.batch) * options.prompt_tokens / result.prefill_seconds;
  result.decode_tokens_per_s = static_cast<double>(options.batch) * options.gen_tokens / result.decode_seconds;
  result.step_ms_median = 1e3 * percentile(step_times, 0.5);
  result.step_ms_p90 = 1e3 * percentile(step_times, 0.9);
  result.step_ms_max = 1e3 * *std::max_element(step_times.begin(), step_times.end());
  result.step_device_ms_median = 1e3 * percentile(step_device_times, 0.5);
  result.kv_blocks_total = blocks_->num_blocks();
  result.kv_bytes_in_use = static_cast<size_t>(result.kv_blocks_in_use) * plan_.kv_block_size * plan_.kv_bytes_per_token;
  result.peak_used_bytes = peak_used_;
  return result;
}

}  // namespace qwenrt
