#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "engine/sampling_ranges.h"

namespace qwenrt {

SamplingParams model_default_sampling(const ModelConfig& config) {
  namespace range = sampling_range;
  SamplingParams params;
  // transformers keeps every value of the file whether or not it sets do_sample: do_sample
  // only chooses drawing over argmax. So a greedy file's top_k, top_p and min_p (or the
  // GenerationConfig defaults, top_k 50) are what a --temperature given on the command line
  // draws with. A greedy file's values are not checked at load (nothing uses them unless
  // --temperature is given): one outside its range is passed over.
  const auto usable = [&](const auto& value, const ValueRange& valid) {
    return value.has_value() && (config.default_do_sample || valid.contains(static_cast<double>(*value)));
  };
  if (config.default_do_sample) params.temperature = config.default_temperature.value_or(1.f);
  params.top_p = usable(config.default_top_p, range::kFileTopP) ? *config.default_top_p : 1.f;
  params.top_k = usable(config.default_top_k, range::kTopK) ? *config.default_top_k : 50;  // GenerationConfig's default
  if (params.top_p == 0.f) {
    // transformers' top-p of 0 keeps only the most likely token, whatever top_k kept: the
    // sampler's top-p takes (0, 1], its top_k 1 is the same draw.
    params.top_p = 1.f;
    params.top_k = 1;
  }
  params.min_p = usable(config.default_min_p, range::kMinP) ? *config.default_min_p : 0.f;
  // A logits processor, not a way of drawing: transformers applies it to greedy decoding too.
  params.repetition_penalty = config.default_repetition_penalty.value_or(1.f);
  return params;
}

SamplingParams api_default_sampling(const ModelConfig& config) {
  namespace range = sampling_range;
  const auto given = [](const auto& value, const ValueRange& valid) {
    return value.has_value() && valid.contains(static_cast<double>(*value));
  };
  SamplingParams params;
  params.temperature = given(config.default_temperature, range::kTemperature) ? *config.default_temperature : 1.f;
  // A file's top_p of 0 (transformers: the most likely token alone) is passed over here like
  // a value outside the API's ranges: taken as top_k 1, a request's own top_p could not undo it.
  if (given(config.default_top_p, range::kTopP)) params.top_p = *config.default_top_p;
  if (given(config.default_top_k, range::kTopK)) params.top_k = *config.default_top_k;
  if (given(config.default_min_p, range::kMinP)) params.min_p = *config.default_min_p;
  if (given(config.default_repetition_penalty, range::kApiRepetitionPenalty)) {
    params.repetition_penalty = *config.default_repetition_penalty;
  }
  return params;
}

void apply_penalties(float* logits, int vocab, const SamplingParams& params,
                     const int32_t* history, int history_len) {
  if (!params.has_penalties() || history == nullptr || history_len <= 0) return;
  // Each distinct id: how often it was generated (after the prompt); seen in the prompt only: 0.
  std::unordered_map<int32_t, int> generated;
  for (int i = 0; i < history_len; ++i) {
    if (history[i] >= 0 && history[i] < vocab) generated[history[i]] += i >= params.prompt_tokens ? 1 : 0;
  }
  for (const auto& [token, count] : generated) {
    float& logit = logits[token];
    if (params.repetition_penalty != 1.f) {
      logit = logit > 0 ? logit / params.repetition_penalty : logit * params.repetition_penalty;
    }
    if (count > 0) logit -= params.presence_penalty + params.frequency_penalty * static_cast<float>(count);
  }
}

static int32_t argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

Candidates sampling_candidates(const float* logits, int vocab, const SamplingParams& params) {
  Candidates out;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int keep = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    keep = params.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  order.resize(keep);
  const double inv_temperature = 1.0 / params.temperature;
  const double top = logits[order[0]] * inv_temperature;
  std::vector<double> probs(keep);
  double sum = 0;
  for (int i = 0; i < keep; ++i) {
    probs[i] = std::exp(logits[order[i]] * inv_temperature - top);
    sum += probs[i];
  }
  for (double& p : probs) p /= sum;
  if (params.top_p < 1.f) {
    double cumulative = 0;
    int cut = keep;
    for (int i = 0; i < keep; ++i) {
      cumulative += probs[i];
      if (cumulative >= params.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  if (params.min_p > 0.f) {
    double threshold = params.min_p * probs[0];
    int cut = 1;
    while (cut < keep && probs[cut] >= threshold) ++cut;
    keep = cut;
  }
  double kept_sum = 0;
  for (int i = 0; i < keep; ++i) kept_sum += probs[i];
  out.ids.assign(order.begin(), order.begin() + keep);
  out.probs.resize(keep);
  for (int i = 0; i < keep; ++i) out.probs[i] = probs[i] / kept_sum;
  return out;
}

int32_t sample_row(const float* logits, int vocab, const SamplingParams& params, uint64_t step,
                   uint64_t row) {
  if (params.temperature <= 0.f) return argmax(logits, vocab);
  Candidates candidates = sampling_candidates(logits, vocab, params);
  double u = sample_uniform(params.seed, step, row);
  double cumulative = 0;
  for (size_t i = 0; i < candidates.ids.size(); ++i) {
    cumulative += candidates.probs[i];
    if (cumulative > u) return candidates.ids[i];
  }
  return candidates.ids.back();
}

double log_softmax_norm(std::span<const float> logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float value : logits) sum += std::exp(value - top);
  return top + std::log(sum);
}

void top_logit_ids(std::span<const float> logits, int k, std::vector<int32_t>& out) {
  // The k largest, in a heap whose front is the least likely kept.
  const auto more_likely = [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  };
  const auto kept = static_cast<size_t>(std::max(k, 0));
  out.clear();
  if (kept == 0) return;
  for (int32_t j = 0; j < static_cast<int32_t>(logits.size()); ++j) {
    if (out.size() == kept && !more_likely(j, out.front())) continue;
    out.push_back(j);
    std::push_heap(out.begin(), out.end(), more_likely);
    if (out.size() > kept) {
      std::pop_heap(out.begin(), out.end(), more_likely);
      out.pop_back();
    }
  }
  std::sort_heap(out.begin(), out.end(), more_likely);
}

}  // namespace qwenrt
