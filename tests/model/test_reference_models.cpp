// Model-level tests: tiny checkpoints written by transformers (scripts/gen_model_fixtures.py)
// must reproduce transformers' fp32 log-probabilities and greedy tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "qwenrt/engine.h"

namespace qwenrt {
namespace {

namespace fs = std::filesystem;

constexpr double kLogprobTolerance = 1e-3;  // absolute, as the acceptance criterion

nlohmann::json load_reference(const fs::path& dir) {
  std::ifstream in(dir / "reference.json");
  return nlohmann::json::parse(in);
}

class ReferenceModel : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return fs::path(QWENRT_TEST_DATA) / "models" / GetParam(); }
  EngineOptions options() const {
    EngineOptions opts;
    opts.device = "cpu";
    opts.threads = 2;
    opts.max_context = 256;
    return opts;
  }
};

TEST_P(ReferenceModel, ScoreMatchesTransformers) {
  auto reference = load_reference(dir());
  Engine engine(dir(), options());
  std::vector<int32_t> ids = reference["score_ids"].get<std::vector<int32_t>>();
  std::vector<double> expected = reference["logprobs"].get<std::vector<double>>();
  ScoreResult result = engine.score(ids);
  ASSERT_EQ(result.logprobs.size(), expected.size());
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, std::abs(result.logprobs[i] - expected[i]));
    EXPECT_NEAR(result.logprobs[i], expected[i], kLogprobTolerance) << "position " << i + 1;
  }
  EXPECT_NEAR(result.nll_mean, reference["nll_mean"].get<double>(), kLogprobTolerance);
  RecordProperty("max_abs_logprob_diff", std::to_string(worst));
  // With alternatives: the k most likely at each position, most likely first; the scored
  // token's own log-prob among them wherever it is one of the k.
  const ScoreResult top = engine.score(ids, 5);
  ASSERT_EQ(top.top.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(top.top[i].size(), 5u);
    EXPECT_EQ(top.top[i][0].id, top.argmax[i]) << i;
    EXPECT_NEAR(top.logprobs[i], result.logprobs[i], 1e-9) << i;
    double mass = 0;
    for (size_t k = 0; k < 5; ++k) {
      if (k > 0) {
        EXPECT_LE(top.top[i][k].logprob, top.top[i][k - 1].logprob) << i;
      }
      mass += std::exp(top.top[i][k].logprob);
      if (top.top[i][k].id == ids[i + 1]) {
        EXPECT_NEAR(top.top[i][k].logprob, top.logprobs[i], 1e-5) << i;
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
    const bool listed = std::any_of(top.top[i].begin(), top.top[i].end(),
                                    [&](const TokenLogprob& t) { return t.id == ids[i + 1]; });
    if (!listed) {
      EXPECT_GE(top.top[i][4].logprob, top.logprobs[i] - 1e-6) << i;  // a less likely token, not listed
    }
  }
}

TEST_P(ReferenceModel, GreedyMatchesTransformers) {
  auto reference = load_reference(dir());
  Engine engine(dir(), options());
  for (const auto& item : reference["greedy"]) {
    GenerateOptions generate;
    generate.max_new_tokens = item["max_new_tokens"].get<int>();
    auto prompt = item["prompt"].get<std::vector<int32_t>>();
    GenerateResult result = engine.generate(prompt, generate);
    EXPECT_EQ(result.ids, item["generated"].get<std::vector<int32_t>>())
        << "prompt of " << prompt.size() << " tokens";
  }
}

// The paged cache must give the same numbers whether a prompt arrives in one forward pass or
// in several chunks (prefill chunking) with the decode path after it.
TEST_P(ReferenceModel, ChunkedPrefillMatchesSinglePass) {
  auto reference = load_reference(dir());
  std::vector<int32_t> ids = reference["score_ids"].get<std::vector<int32_t>>();
  ids.resize(60);
  EngineOptions small = options();
  small.max_batch_tokens = 7;  // odd chunk size, crossing 16-token blocks mid-chunk
  small.max_logit_rows = 7;
  Engine chunked(dir(), small);
  Engine whole(dir(), options());
  ScoreResult a = chunked.score(ids);
  ScoreResult b = whole.score(ids);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4);
}

// Scoring takes passes as long as a prompt's chunks and their logits in slices of
// max_logit_rows rows: passes that end mid-slice, slices that end mid-pass and a last short
// slice give the numbers and top ids of one slice a pass.
TEST_P(ReferenceModel, ScoreSlicesMatchOneSliceAPass) {
  auto reference = load_reference(dir());
  std::vector<int32_t> ids = reference["score_ids"].get<std::vector<int32_t>>();
  ids.resize(std::min<size_t>(ids.size(), 60));
  EngineOptions sliced = options();
  sliced.max_batch_tokens = 24;
  sliced.max_logit_rows = 5;
  sliced.max_seqs = 1;
  EngineOptions one_slice = options();
  one_slice.max_batch_tokens = 24;
  one_slice.max_logit_rows = 24;
  Engine a_engine(dir(), sliced);
  Engine b_engine(dir(), one_slice);
  const ScoreResult a = a_engine.score(ids, 3);
  const ScoreResult b = b_engine.score(ids, 3);
  ASSERT_EQ(a.logprobs.size(), ids.size() - 1);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  EXPECT_EQ(a.argmax, b.argmax);
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-5) << "position " << i;
    ASSERT_EQ(a.top[i].size(), 3u);
    for (size_t q = 0; q < 3; ++q) EXPECT_EQ(a.top[i][q].id, b.top[i][q].id) << "position " << i;
  }
  EXPECT_NEAR(a.nll_mean, b.nll_mean, 1e-5);
}

// A Session keeps the KV cache between calls: a prompt that extends or partly repeats an
// earlier one prefills only what is new, and gives the same tokens as a run from scratch.
TEST_P(ReferenceModel, SessionReusesCachedPrefix) {
  auto reference = load_reference(dir());
  Engine engine(dir(), options());
  std::unique_ptr<Session> session = engine.new_session();
  const auto& item = reference["greedy"][0];
  auto prompt = item["prompt"].get<std::vector<int32_t>>();
  auto expected = item["generated"].get<std::vector<int32_t>>();
  ASSERT_GE(prompt.size(), 4u);
  GenerateOptions one;
  one.max_new_tokens = 1;
  const size_t head = prompt.size() / 2;
  GenerateResult first = engine.generate(*session, {prompt.begin(), prompt.begin() + head}, one);
  EXPECT_EQ(first.reused_tokens, 0);
  EXPECT_EQ(session->cached_tokens(), static_cast<int>(head));  // the sampled token was never run

  // The whole prompt: its first half comes from the cache; transformers' greedy tokens.
  GenerateOptions generate;
  generate.max_new_tokens = static_cast<int>(expected.size());
  GenerateResult second = engine.generate(*session, prompt, generate);
  EXPECT_EQ(second.reused_tokens, static_cast<int>(head));
  EXPECT_EQ(second.ids, expected);

  // A follow-up turn: the prompt, the answer and more text.
  std::vector<int32_t> follow = prompt;
  follow.insert(follow.end(), second.ids.begin(), second.ids.end());
  follow.insert(follow.end(), prompt.begin(), prompt.begin() + 3);
  GenerateResult third = engine.generate(*session, follow, generate);
  EXPECT_EQ(third.reused_tokens, static_cast<int>(prompt.size() + second.ids.size() - 1));
  EXPECT_EQ(third.ids, engine.generate(follow, generate).ids);

  // A prompt that leaves the cached path part-way (an edited turn) keeps only the shared part.
  std::vector<int32_t> edited(follow.begin(), follow.begin() + head + 1);
  edited.back() = (edited.back() + 1) % engine.config().vocab_size;
  edited.insert(edited.end(), prompt.begin(), prompt.end());
  GenerateResult fourth = engine.generate(*session, edited, generate);
  EXPECT_EQ(fourth.reused_tokens, static_cast<int>(head));
  EXPECT_EQ(fourth.ids, engine.generate(edited, generate).ids);

  // The same prompt again runs its last token only.
  GenerateResult again = engine.generate(*session, edited, generate);
  EXPECT_EQ(again.reused_tokens, static_cast<int>(edited.size() - 1));
  EXPECT_EQ(again.ids, fourth.ids);

  session->reset();
  EXPECT_EQ(session->cached_tokens(), 0);
  EXPECT_EQ(engine.generate(*session, prompt, generate).reused_tokens, 0);
}

// Generation issues the step a token feeds before that token is read back, so a token that
// ends it (a stop id, a cancel) has a step behind it that must be undone: the session then
// holds the prompt and the tokens fed before the last one, and a follow-up turn reuses all
// of them and gives a fresh run's tokens.
TEST_P(ReferenceModel, StopAndCancelLeaveTheSessionAsFed) {
  auto reference = load_reference(dir());
  Engine engine(dir(), options());
  const auto& item = reference["greedy"][0];
  auto prompt = item["prompt"].get<std::vector<int32_t>>();
  GenerateOptions generate;
  generate.max_new_tokens = 12;
  generate.stop_at_eos = false;
  const std::vector<int32_t> free_run = engine.generate(prompt, generate).ids;
  ASSERT_EQ(free_run.size(), 12u);

  // A stop id: the first token after the first that has not come before (so that a step
  // fed ahead of it exists and must be undone).
  size_t stop_at = 1;
  while (stop_at < free_run.size() &&
         std::find(free_run.begin(), free_run.begin() + static_cast<long>(stop_at), free_run[stop_at]) !=
             free_run.begin() + static_cast<long>(stop_at)) {
    ++stop_at;
  }
  ASSERT_LT(stop_at, free_run.size()) << "the free run repeats one token";
  GenerateOptions stopping = generate;
  stopping.extra_stop_ids = {free_run[stop_at]};
  std::unique_ptr<Session> session = engine.new_session();
  GenerateResult stopped = engine.generate(*session, prompt, stopping);
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + static_cast<long>(stop_at) + 1));
  EXPECT_EQ(session->cached_tokens(), static_cast<int>(prompt.size() + stop_at));

  std::vector<int32_t> follow = prompt;
  follow.insert(follow.end(), stopped.ids.begin(), stopped.ids.end());
  follow.insert(follow.end(), prompt.begin(), prompt.begin() + 3);
  GenerateResult next = engine.generate(*session, follow, generate);
  EXPECT_EQ(next.reused_tokens, static_cast<int>(prompt.size() + stop_at));
  EXPECT_EQ(next.ids, engine.generate(follow, generate).ids);

  // A cancel after the second token.
  session->reset();
  int seen = 0;
  GenerateResult cancelled = engine.generate(*session, prompt, generate, [&](int32_t) { return ++seen < 2; });
  EXPECT_EQ(cancelled.finish_reason, "cancelled");
  EXPECT_EQ(cancelled.ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + 2));
  EXPECT_EQ(session->cached_tokens(), static_cast<int>(prompt.size() + 1));
  follow.assign(prompt.begin(), prompt.end());
  follow.insert(follow.end(), cancelled.ids.begin(), cancelled.ids.end());
  next = engine.generate(*session, follow, generate);
  EXPECT_EQ(next.reused_tokens, static_cast<int>(prompt.size() + 1));
  EXPECT_EQ(next.ids, engine.generate(follow, generate).ids);

  // A callback that throws: the error comes out, the session holds what was fed before the
  // token it was given.
  session->reset();
  seen = 0;
  EXPECT_THROW(engine.generate(*session, prompt, generate,
                               [&](int32_t) -> bool {
                                 if (++seen == 3) throw std::runtime_error("the reader went away");
                                 return true;
                               }),
               std::runtime_error);
  EXPECT_EQ(session->cached_tokens(), static_cast<int>(prompt.size() + 2));
  follow.assign(prompt.begin(), prompt.end());
  follow.insert(follow.end(), free_run.begin(), free_run.begin() + 3);
  next = engine.generate(*session, follow, generate);
  EXPECT_EQ(next.reused_tokens, static_cast<int>(prompt.size() + 2));
  EXPECT_EQ(next.ids, engine.generate(follow, generate).ids);

  // The context limit: generation ends where the cache is full, with every token delivered.
  EngineOptions tight = options();
  tight.max_context = static_cast<int>(prompt.size()) + 5;
  Engine small(dir(), tight);
  GenerateResult full = small.generate(prompt, generate);
  EXPECT_EQ(full.finish_reason, "length");
  EXPECT_EQ(full.ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + 6));
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(QWENRT_TEST_DATA) / "models")) {
    if (fs::exists(entry.path() / "reference.json")) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceModel, ::testing::ValuesIn(fixture_names()),
                         [](const auto& test_info) { return test_info.param; });

TEST(ReferenceModels, AllFixturesPresent) {
  // Guards against an empty parameter list silently passing.
  EXPECT_GE(fixture_names().size(), 5u);
}

}  // namespace
}  // namespace qwenrt
