// The reference token sampler. Backends implement the same function on the device; this
// one runs on the host and defines the semantics:
//   1. penalties over the row's previous tokens: repetition (logit > 0 ? logit / r : logit * r)
//      once for each distinct token of the prompt and the generated ones; then, for a
//      distinct token generated c > 0 times, logit -= presence + frequency · c (the
//      history's first params.prompt_tokens ids are the prompt);
//   2. temperature <= 0: argmax (lowest index on ties);
//   3. else logits / temperature, candidates sorted by logit descending (ties: lower index),
//      top-k, softmax, top-p (smallest prefix with cumulative >= top_p), min-p (p >= min_p ·
//      p_max), renormalise, and pick by inverse CDF with u = sample_uniform(seed, step, row).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/random_bits.h"
#include "model/config.h"

namespace qwenrt {

// Uniform in [0, 1) with 24 bits, a pure function of (seed, step, row).
inline float sample_uniform(uint64_t seed, uint64_t step, uint64_t row) {
  return unit_float(sample_bits(seed, step, row));
}

// What generation_config.json recommends, read as transformers' generate() reads it: its
// temperature when it sets do_sample, else greedy; its top_k, top_p and min_p either way
// (what it leaves out at transformers' defaults, top_k 50 among them), so that a temperature
// given later draws with them. Where generate and chat start before their own options
// apply. The seed and the presence/frequency penalties are not part of it.
SamplingParams model_default_sampling(const ModelConfig& config);

// Where the server starts: OpenAI's API samples at temperature 1 unless told otherwise, so
// generation_config.json's temperature, top_p, top_k, min_p and repetition_penalty count
// whether or not it sets do_sample (as vLLM reads that file); a base model's do_sample false,
// which transformers' generate() and the CLI take as greedy, does not make an API client's
// n choices or seeds come out alike. What the file leaves out is off (no top_k 50), and a
// value outside its range is passed over.
SamplingParams api_default_sampling(const ModelConfig& config);

// Applies the penalties of `params` to `logits` [vocab] in place.
void apply_penalties(float* logits, int vocab, const SamplingParams& params,
                     const int32_t* history, int history_len);

// Picks a token from one row of (already penalised) logits.
int32_t sample_row(const float* logits, int vocab, const SamplingParams& params, uint64_t step,
                   uint64_t row);

// The candidate distribution step 3 draws from: token ids and probabilities (summing to 1)
// in draw order. Exposed for distribution tests.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> probs;
};
Candidates sampling_candidates(const float* logits, int vocab, const SamplingParams& params);

// Log-probabilities on the host (a step's rows that report them, the CPU backend's
// score_rows): the log of a row's softmax normaliser, max + log(sum(exp(x - max))) in
// double, and the ids of its k largest logits, most likely first (the lower id on ties), in
// `out` (k at most the row's length).
double log_softmax_norm(std::span<const float> logits);
void top_logit_ids(std::span<const float> logits, int k, std::vector<int32_t>& out);

}  // namespace qwenrt
