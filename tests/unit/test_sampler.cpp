// The sampler against distributions computed here: greedy is argmax with lowest-index ties,
// draws are reproducible from (seed, step, row), and the empirical frequencies of many draws
// match the exact probabilities of temperature / top-k / top-p / min-p / penalties
// (chi-square test at a fixed seed, so the verdict is deterministic).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/sampling_ranges.h"

namespace qwenrt {
namespace {

// Eight logits with a tie (1 and 2) and a spread wide enough for every filter to bite.
const std::vector<float> kLogits = {2.0f, 1.5f, 1.5f, 0.3f, -0.5f, 1.0f, -2.0f, 0.0f};

// Exact probabilities per QWEN sampler semantics: logits / T, keep the top k (ties: lower
// index), softmax, keep the shortest prefix with mass >= top_p, keep p >= min_p · p_max,
// renormalise. Written independently of the sampler.
std::vector<double> expected_probs(const std::vector<float>& logits, double temperature, int top_k,
                                   double top_p, double min_p) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  int keep = (top_k > 0 && top_k < vocab) ? top_k : vocab;
  std::vector<double> p(keep);
  double total = 0;
  for (int i = 0; i < keep; ++i) total += (p[i] = std::exp(logits[order[i]] / temperature));
  for (double& x : p) x /= total;
  if (top_p < 1.0) {
    double mass = 0;
    for (int i = 0; i < keep; ++i) {
      mass += p[i];
      if (mass >= top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (min_p > 0) {
    int cut = 0;
    while (cut < keep && p[cut] >= min_p * p[0]) ++cut;
    keep = cut;
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += p[i];
  std::vector<double> result(vocab, 0.0);
  for (int i = 0; i < keep; ++i) result[order[i]] = p[i] / kept;
  return result;
}

// Upper 0.1% point of chi-square with `df` degrees of freedom (Wilson–Hilferty).
double chi_square_critical(int df) {
  const double z = 3.0902;  // standard normal 0.999 quantile
  double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Draws `draws` tokens at steps 0..draws-1 and checks their frequencies against `probs`:
// tokens of probability 0 must never appear; the rest pass a chi-square test.
template <typename Draw>
void expect_distribution(const std::vector<double>& probs, int draws, Draw draw) {
  std::vector<int> counts(probs.size(), 0);
  for (int step = 0; step < draws; ++step) {
    int32_t token = draw(static_cast<uint64_t>(step));
    ASSERT_GE(token, 0);
    ASSERT_LT(token, static_cast<int32_t>(probs.size()));
    ++counts[token];
  }
  double statistic = 0;
  int categories = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is excluded but was drawn";
      continue;
    }
    double expected = probs[i] * draws;
    statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++categories;
  }
  if (categories > 1) {
    EXPECT_LT(statistic, chi_square_critical(categories - 1)) << "chi-square over " << categories;
  }
}

constexpr int kDraws = 20000;

void expect_params_distribution(const SamplingParams& params) {
  auto probs =
      expected_probs(kLogits, params.temperature, params.top_k, params.top_p, params.min_p);
  // The candidate list the sampler exposes must carry exactly these probabilities.
  Candidates candidates = sampling_candidates(kLogits.data(), 8, params);
  double total = 0;
  for (size_t i = 0; i < candidates.ids.size(); ++i) {
    EXPECT_NEAR(candidates.probs[i], probs[candidates.ids[i]], 1e-6)
        << "token " << candidates.ids[i];
    total += candidates.probs[i];
  }
  EXPECT_NEAR(total, 1.0, 1e-9);
  size_t nonzero = std::count_if(probs.begin(), probs.end(), [](double p) { return p > 0; });
  EXPECT_EQ(candidates.ids.size(), nonzero);
  expect_distribution(
      probs, kDraws, [&](uint64_t step) { return sample_row(kLogits.data(), 8, params, step, 0); });
}

SamplingParams sampling(float temperature, int top_k = 0, float top_p = 1.f, float min_p = 0.f) {
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.min_p = min_p;
  params.seed = 20240601;
  return params;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIndexTies) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  SamplingParams params;  // temperature 0
  for (uint64_t step = 0; step < 5; ++step)
    EXPECT_EQ(sample_row(logits.data(), 5, params, step, 0), 1);
  params.temperature = -1.f;
  params.top_k = 2;
  EXPECT_EQ(sample_row(logits.data(), 5, params, 0, 0), 1);
  std::vector<float> all_equal(6, -7.f);
  EXPECT_EQ(sample_row(all_equal.data(), 6, SamplingParams{}, 0, 0), 0);
  std::vector<float> last = {-3.f, -2.f, -1.f};
  EXPECT_EQ(sample_row(last.data(), 3, SamplingParams{}, 0, 0), 2);
}

TEST(Sampler, UniformIsInUnitIntervalAndDeterministic) {
  for (uint64_t step = 0; step < 1000; ++step) {
    float u = sample_uniform(7, step, 3);
    EXPECT_GE(u, 0.f);
    EXPECT_LT(u, 1.f);
    EXPECT_EQ(u, sample_uniform(7, step, 3));
  }
}

TEST(Sampler, SeedReproducibility) {
  SamplingParams params = sampling(1.0f);
  std::vector<int32_t> first, again, other_seed;
  for (uint64_t step = 0; step < 200; ++step) {
    first.push_back(sample_row(kLogits.data(), 8, params, step, 0));
    again.push_back(sample_row(kLogits.data(), 8, params, step, 0));
  }
  params.seed += 1;
  for (uint64_t step = 0; step < 200; ++step) {
    other_seed.push_back(sample_row(kLogits.data(), 8, params, step, 0));
  }
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other_seed);
  // Successive steps are not stuck on one token.
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 3u);
}

// sample_rows: each row its own parameters and its own (seed, position, stream) key, so a
// row's draw does not depend on which other rows share the batch or where it sits.
TEST(Sampler, BackendPerRowParametersAndKeys) {
  auto backend = make_cpu_backend(1);
  std::vector<float> logits;
  for (int r = 0; r < 3; ++r) logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  Tensor view{logits.data(), DType::kF32, 3, 8};
  SampleRow rows[3];
  rows[0].params = sampling(1.0f);
  rows[0].params.seed = 7;
  rows[1].params = SamplingParams{};  // greedy
  rows[2].params = sampling(0.7f);
  rows[2].params.top_k = 3;
  rows[2].params.seed = 7;
  rows[2].stream = 1;
  std::vector<int32_t> row0, row2;
  for (uint64_t position = 0; position < 100; ++position) {
    for (auto& row : rows) row.position = position;
    int32_t out[3] = {-1, -1, -1};
    backend->sample_rows(view, rows, nullptr, nullptr, 0, out);
    EXPECT_EQ(out[0], sample_row(kLogits.data(), 8, rows[0].params, position, 0));
    EXPECT_EQ(out[1], sample_row(kLogits.data(), 8, rows[1].params, position, 0));
    EXPECT_EQ(out[2], sample_row(kLogits.data(), 8, rows[2].params, position, 1));
    // The same row alone gives the same token.
    int32_t alone = -1;
    backend->sample_rows(Tensor{logits.data(), DType::kF32, 1, 8}, &rows[2], nullptr, nullptr, 0, &alone);
    EXPECT_EQ(alone, out[2]);
    row0.push_back(out[0]);
    row2.push_back(out[2]);
  }
  EXPECT_GT(std::set<int32_t>(row0.begin(), row0.end()).size(), 3u);
  EXPECT_LE(std::set<int32_t>(row2.begin(), row2.end()).size(), 3u);  // top_k 3
}

TEST(Sampler, BackendRowsDrawIndependently) {
  auto backend = make_cpu_backend(1);
  std::vector<float> logits;
  for (int r = 0; r < 4; ++r) logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  Tensor view{logits.data(), DType::kF32, 4, 8};
  SamplingParams params = sampling(1.0f);
  std::vector<std::vector<int32_t>> per_row(4);
  for (uint64_t step = 0; step < 100; ++step) {
    int32_t out[4] = {-1, -1, -1, -1};
    backend->sample(view, params, step, nullptr, nullptr, 0, out);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(out[r], sample_row(kLogits.data(), 8, params, step, r));
      per_row[r].push_back(out[r]);
    }
  }
  EXPECT_NE(per_row[0], per_row[1]);  // identical rows of a batch must not draw identically
}

TEST(Sampler, TemperatureOne) {
  expect_params_distribution(sampling(1.0f));
}
TEST(Sampler, TemperatureLow) {
  expect_params_distribution(sampling(0.5f));
}
TEST(Sampler, TemperatureHigh) {
  expect_params_distribution(sampling(2.5f));
}
TEST(Sampler, TopK) {
  expect_params_distribution(sampling(1.0f, 3));
}
TEST(Sampler, TopKCutsATie) {
  // k = 2 keeps token 0 and the lower-index of the tied tokens 1 and 2.
  auto probs = expected_probs(kLogits, 1.0, 2, 1.0, 0.0);
  EXPECT_GT(probs[1], 0);
  EXPECT_EQ(probs[2], 0);
  expect_params_distribution(sampling(1.0f, 2));
}
TEST(Sampler, TopP) {
  expect_params_distribution(sampling(1.0f, 0, 0.7f));
}
TEST(Sampler, TopPWithTemperatureAndTopK) {
  expect_params_distribution(sampling(0.8f, 5, 0.9f));
}
TEST(Sampler, MinP) {
  expect_params_distribution(sampling(1.0f, 0, 1.f, 0.3f));
}
TEST(Sampler, AllFilters) {
  expect_params_distribution(sampling(1.3f, 6, 0.95f, 0.1f));
}

TEST(Sampler, TopPKeepsAtLeastOneToken) {
  SamplingParams params = sampling(1.0f, 0, 0.01f);
  auto probs = expected_probs(kLogits, 1.0, 0, 0.01, 0.0);
  EXPECT_EQ(probs[0], 1.0);
  for (uint64_t step = 0; step < 100; ++step)
    EXPECT_EQ(sample_row(kLogits.data(), 8, params, step, 0), 0);
}

// Penalties computed independently: repetition divides the positive logits and multiplies
// the negative ones of every distinct token in the history; a distinct token generated c > 0
// times after the first `prompt` ids loses presence once and frequency c times (OpenAI's
// definition, which vLLM follows: the prompt's tokens count for repetition only).
std::vector<float> penalised(const std::vector<float>& logits, const std::vector<int32_t>& history, int prompt,
                             float repetition, float presence, float frequency) {
  std::set<int32_t> seen;
  std::map<int32_t, int> generated;
  for (size_t i = 0; i < history.size(); ++i) {
    const int32_t token = history[i];
    if (token < 0 || token >= static_cast<int32_t>(logits.size())) continue;
    seen.insert(token);
    if (static_cast<int>(i) >= prompt) ++generated[token];
  }
  std::vector<float> out = logits;
  for (int32_t token : seen) {
    double value = out[token];
    value = value > 0 ? value / repetition : value * repetition;
    if (generated.count(token) != 0) value -= presence + frequency * generated[token];
    out[token] = static_cast<float>(value);
  }
  return out;
}

struct PenaltyCase {
  float repetition, presence, frequency;
  int prompt;
};

TEST(Sampler, Penalties) {
  // Token 0 (positive) three times, 4 (negative) twice, 7 (zero) once; ids outside the
  // vocabulary (padding, corrupt history) are ignored.
  const std::vector<int32_t> history = {0, 4, 0, 7, 4, 0, 99, -1};
  auto backend = make_cpu_backend(1);
  // With a prompt of 4 (0, 4, 0, 7), 7 is in the prompt only: repetition, no presence.
  for (const auto& c : {PenaltyCase{1.3f, 0.f, 0.f, 0}, PenaltyCase{1.f, 0.8f, 0.f, 0},
                        PenaltyCase{1.f, 0.f, 0.5f, 0}, PenaltyCase{1.2f, 0.4f, 0.3f, 0},
                        PenaltyCase{1.2f, 0.4f, 0.3f, 4}, PenaltyCase{1.f, 0.8f, 0.5f, 4},
                        PenaltyCase{1.f, 0.8f, 0.5f, 8}}) {
    SCOPED_TRACE("repetition " + std::to_string(c.repetition) + " presence " + std::to_string(c.presence) +
                 " frequency " + std::to_string(c.frequency) + " prompt " + std::to_string(c.prompt));
    SamplingParams params = sampling(1.0f);
    params.repetition_penalty = c.repetition;
    params.presence_penalty = c.presence;
    params.frequency_penalty = c.frequency;
    params.prompt_tokens = c.prompt;
    auto expected = penalised(kLogits, history, c.prompt, c.repetition, c.presence, c.frequency);
    std::vector<float> actual = kLogits;
    apply_penalties(actual.data(), 8, params, history.data(), static_cast<int>(history.size()));
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(actual[i], expected[i], 1e-6) << "token " << i;
    // Tokens never seen keep their logits exactly.
    for (int i : {1, 2, 3, 5, 6}) EXPECT_EQ(actual[i], kLogits[i]);

    // Through the backend's sample op, which applies the penalties from the history itself.
    auto probs = expected_probs(expected, 1.0, 0, 1.0, 0.0);
    Tensor view{const_cast<float*>(kLogits.data()), DType::kF32, 1, 8};
    const int32_t history_len = static_cast<int32_t>(history.size());
    expect_distribution(probs, kDraws, [&](uint64_t step) {
      int32_t token = -1;
      backend->sample(view, params, step, history.data(), &history_len,
                      static_cast<int>(history.size()), &token);
      return token;
    });
  }
}

TEST(Sampler, PenaltiesChangeGreedyChoice) {
  // Token 0 leads by 0.5; repeated three times with frequency 0.5 it drops below token 1.
  SamplingParams params;
  params.frequency_penalty = 0.5f;
  std::vector<int32_t> history = {0, 0, 0};
  std::vector<float> row = kLogits;
  apply_penalties(row.data(), 8, params, history.data(), 3);
  EXPECT_EQ(sample_row(row.data(), 8, params, 0, 0), 1);
}

TEST(Sampler, PresenceAndFrequencyCountGeneratedTokensOnly) {
  // Token 0 fills the prompt three times: with a prompt of 3 it keeps its logit; generated
  // once after it, it loses presence 0.25 + frequency 0.5 × 1 (2.0 → 1.25, below token 1).
  SamplingParams params;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  params.prompt_tokens = 3;
  std::vector<int32_t> history = {0, 0, 0};
  std::vector<float> row = kLogits;
  apply_penalties(row.data(), 8, params, history.data(), 3);
  EXPECT_EQ(row, kLogits);
  history.push_back(0);
  apply_penalties(row.data(), 8, params, history.data(), 4);
  EXPECT_FLOAT_EQ(row[0], kLogits[0] - 0.75f);
  for (int i = 1; i < 8; ++i) EXPECT_EQ(row[i], kLogits[i]);
}

TEST(Sampler, NoPenaltyWithoutHistory) {
  SamplingParams params;
  params.repetition_penalty = 2.f;
  std::vector<float> row = kLogits;
  apply_penalties(row.data(), 8, params, nullptr, 0);
  EXPECT_EQ(row, kLogits);
}

TEST(Sampler, BackendRejectsNonFiniteLogits) {
  auto backend = make_cpu_backend(1);
  std::vector<float> logits = kLogits;
  logits[3] = NAN;
  Tensor view{logits.data(), DType::kF32, 1, 8};
  int32_t token = -1;
  EXPECT_THROW(backend->sample(view, SamplingParams{}, 0, nullptr, nullptr, 0, &token), Error);
}


// The sampler's ranges, written once (engine/sampling_ranges.h) for the command line,
// generation_config.json, the server and the scheduler.
TEST(SamplingRanges, EdgesAndTexts) {
  namespace range = sampling_range;
  EXPECT_TRUE(range::kTopP.contains(1));
  EXPECT_FALSE(range::kTopP.contains(0));
  EXPECT_FALSE(range::kTopP.contains(1.0000001));
  EXPECT_TRUE(range::kMinP.contains(0));
  EXPECT_TRUE(range::kTemperature.contains(0));
  EXPECT_FALSE(range::kTemperature.contains(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(range::kTemperature.contains(std::nan("")));
  EXPECT_FALSE(range::kRepetitionPenalty.contains(0));
  EXPECT_TRUE(range::kPresencePenalty.contains(-1e4));
  EXPECT_FALSE(range::kPresencePenalty.contains(-1e30));  // times a count, past a float
  EXPECT_FALSE(range::kPresencePenalty.contains(-std::numeric_limits<double>::infinity()));
  // A banned logit (-1e30) over a temperature past 1e27 is a real logit again: none is taken.
  EXPECT_TRUE(range::kTemperature.contains(1000));
  EXPECT_FALSE(range::kTemperature.contains(1e29));
  EXPECT_FALSE(range::kRepetitionPenalty.contains(1e-38));  // a logit over it is past a float
  EXPECT_FALSE(range::kApiPresencePenalty.contains(2.5));
  EXPECT_TRUE(range::kApiPresencePenalty.contains(-2));
  EXPECT_FALSE(range::kApiRepetitionPenalty.contains(0));
  EXPECT_EQ(range::kTopP.text(), "in (0, 1]");
  EXPECT_EQ(range::kMinP.text(), "in [0, 1]");
  EXPECT_EQ(range::kTemperature.text(), "in [0, 1000]");
  EXPECT_EQ(range::kTopK.text(), "at least 0");
  EXPECT_EQ(range::kRepetitionPenalty.text(), "in [0.0001, 10000]");
  EXPECT_EQ((ValueRange{0, range::kNoEnd, true}.text()), "more than 0");
  EXPECT_EQ((ValueRange{-range::kNoEnd, range::kNoEnd, false}.text()), "a finite number");
  EXPECT_EQ(range::kApiPresencePenalty.text(), "in [-2, 2]");
}

TEST(SamplingRanges, FirstValueOutOfRangeIsNamed) {
  SamplingParams params;
  EXPECT_FALSE(sampling_out_of_range(params).has_value());
  params.temperature = 0.7f;
  params.top_k = 20;
  params.top_p = 0.8f;
  params.presence_penalty = -5;  // the engine takes any finite penalty; the server narrows it
  EXPECT_FALSE(sampling_out_of_range(params).has_value());
  params.min_p = 1.5f;
  EXPECT_EQ(sampling_out_of_range(params).value_or(""), "'min_p' must be in [0, 1] (got 1.5)");
  params.top_k = -1;
  EXPECT_EQ(sampling_out_of_range(params).value_or(""), "'top_k' must be at least 0 (got -1)");
  params = {};
  params.frequency_penalty = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sampling_out_of_range(params).value_or(""), "'frequency_penalty' must be in [-10000, 10000] (got inf)");
}

// generate and chat read generation_config.json as transformers does (do_sample false:
// greedy); the server as OpenAI's API and vLLM do (temperature 1 unless the file or the
// request gives one, do_sample or not).
TEST(Sampler, TheServersDefaultsSampleWhereTheCommandLinesAreGreedy) {
  ModelConfig config;
  EXPECT_EQ(model_default_sampling(config).temperature, 0.f);
  EXPECT_EQ(api_default_sampling(config).temperature, 1.f);
  config.default_temperature = 0.7f;
  config.default_top_k = 20;
  config.default_top_p = 1.5f;  // out of range: passed over
  const SamplingParams base = api_default_sampling(config);
  EXPECT_EQ(model_default_sampling(config).temperature, 0.f);
  EXPECT_EQ(base.temperature, 0.7f);
  EXPECT_EQ(base.top_k, 20);
  EXPECT_EQ(base.top_p, 1.f);
  config.default_do_sample = true;
  config.default_top_p = 0.8f;
  const SamplingParams sampled = api_default_sampling(config);
  EXPECT_EQ(sampled.temperature, model_default_sampling(config).temperature);
  EXPECT_EQ(sampled.top_p, 0.8f);
  EXPECT_EQ(sampled.top_k, 20);
  // A top_k the file leaves out: transformers' 50 for generate and chat; off for the server,
  // as vLLM (which takes only the values the file gives).
  config.default_top_k.reset();
  EXPECT_EQ(model_default_sampling(config).top_k, 50);
  EXPECT_EQ(api_default_sampling(config).top_k, 0);
  // The repetition penalty is transformers' logits processor: greedy decoding has it too.
  ModelConfig greedy;
  greedy.default_repetition_penalty = 1.3f;
  EXPECT_EQ(model_default_sampling(greedy).temperature, 0.f);
  EXPECT_EQ(model_default_sampling(greedy).repetition_penalty, 1.3f);
}

// A greedy file (do_sample false) still gives the values a drawing takes, as transformers'
// generate(do_sample=True) on such a file: its top_k, top_p and min_p, else top_k 50; one
// outside its range (not checked at load for a greedy file) is passed over.
TEST(Sampler, AGreedyFilesTopKAndTopPAreWhatATemperatureDrawsWith) {
  ModelConfig base_model;  // Qwen2.5-7B's file: do_sample false, nothing else
  SamplingParams params = model_default_sampling(base_model);
  EXPECT_EQ(params.temperature, 0.f);
  EXPECT_EQ(params.top_k, 50);
  EXPECT_EQ(params.top_p, 1.f);
  EXPECT_EQ(params.min_p, 0.f);
  ModelConfig config;
  config.default_top_k = 20;
  config.default_top_p = 0.8f;
  config.default_min_p = 0.05f;
  params = model_default_sampling(config);
  EXPECT_EQ(params.temperature, 0.f);
  EXPECT_EQ(params.top_k, 20);
  EXPECT_EQ(params.top_p, 0.8f);
  EXPECT_EQ(params.min_p, 0.05f);
  config.default_top_p = 7.f;   // out of (0, 1]
  config.default_min_p = 2.f;   // out of [0, 1]
  config.default_top_k = -3;    // below 0
  params = model_default_sampling(config);
  EXPECT_EQ(params.top_p, 1.f);
  EXPECT_EQ(params.min_p, 0.f);
  EXPECT_EQ(params.top_k, 50);
}

// transformers' top-p of 0 keeps the most likely token alone (its warper keeps at least one),
// greedy file or not; the server passes it over, as a value outside the API's ranges.
TEST(Sampler, AFilesTopPOfZeroKeepsTheMostLikelyToken) {
  for (const bool do_sample : {true, false}) {
    ModelConfig config;
    config.default_do_sample = do_sample;
    config.default_top_p = 0.f;
    config.default_top_k = 20;
    const SamplingParams params = model_default_sampling(config);
    EXPECT_EQ(params.top_k, 1) << do_sample;
    EXPECT_EQ(params.top_p, 1.f) << do_sample;
    const SamplingParams api = api_default_sampling(config);
    EXPECT_EQ(api.top_p, 1.f) << do_sample;
    EXPECT_EQ(api.top_k, 20) << do_sample;
  }
}

}  // namespace
}  // namespace qwenrt
