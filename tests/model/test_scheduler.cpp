// The scheduler's continuous batching against the single-sequence path: requests run
// together (joining between steps, prefilled in chunks, preempted when the KV pool runs
// out, sharing cached prefixes) must produce exactly the tokens each gives when run alone
// through Engine::generate, on the CPU backend, greedy and seeded sampling alike; and every
// block a sequence held is back at the end. (The single-sequence path itself is checked
// against transformers in test_reference_models.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/random_bits.h"
#include "engine/kv_cache.h"
#include "engine/scheduler.h"
#include "qwenrt/engine.h"

namespace qwenrt {
namespace {

namespace fs = std::filesystem;

fs::path model_dir(const std::string& name = "qwen3_qknorm") { return fs::path(QWENRT_TEST_DATA) / "models" / name; }

EngineOptions engine_options(int max_seqs = 8, int max_batch_tokens = 512, int64_t kv_tokens = 4096) {
  EngineOptions options;
  options.device = "cpu";
  options.threads = 2;
  options.max_context = 256;
  options.max_seqs = max_seqs;
  options.max_batch_tokens = max_batch_tokens;
  options.kv_cache_tokens = kv_tokens;
  return options;
}

std::vector<int32_t> random_ids(uint64_t seed, int n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t state = splitmix64(seed);
  for (auto& id : ids) {
    state = splitmix64(state);
    id = static_cast<int32_t>(state % static_cast<uint64_t>(vocab));
  }
  return ids;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::string finish;
  bool operator==(const Outcome&) const = default;
};

// Each request alone through the single-sequence generate path.
std::vector<Outcome> run_alone(const std::vector<SequenceRequest>& requests) {
  Engine engine(model_dir(), engine_options(1));
  std::vector<Outcome> outcomes;
  for (const auto& request : requests) {
    GenerateOptions options;
    options.max_new_tokens = request.max_new_tokens;
    options.sampling = request.sampling;
    GenerateResult result = engine.generate(request.prompt, options);
    outcomes.push_back(Outcome{result.ids, result.finish_reason});
  }
  return outcomes;
}

// All requests through one scheduler; `join_every` > 0 submits one request per that many
// steps instead of all at once. `pipelined` drives it as the server does: each step is
// launched, the previous step's events are read while it runs (and a joining request is
// submitted then), then it is completed.
// `cached_out`: each request's prompt tokens that came from the prefix cache, as its first
// token's event tells (exactly one event a sequence tells it).
std::vector<Outcome> run_batched(Engine& engine, const std::vector<SequenceRequest>& requests, bool prefix_cache,
                                 int join_every = 0, SchedulerStats* stats_out = nullptr, bool pipelined = false,
                                 std::vector<int>* cached_out = nullptr) {
  Scheduler scheduler(engine, prefix_cache);
  std::map<uint64_t, size_t> index;
  std::vector<Outcome> outcomes(requests.size());
  std::vector<int> cached(requests.size(), -1);
  size_t next = 0;
  auto submit_one = [&] {
    index[scheduler.submit(requests[next])] = next;
    ++next;
  };
  if (join_every == 0) {
    while (next < requests.size()) submit_one();
  }
  auto record = [&](const std::vector<SequenceEvent>& events) {
    for (const SequenceEvent& event : events) {
      Outcome& outcome = outcomes[index.at(event.id)];
      if (event.token >= 0) outcome.tokens.push_back(event.token);
      // Told with the first token and only then.
      EXPECT_EQ(event.cached_prompt_tokens >= 0, event.token >= 0 && outcome.tokens.size() == 1);
      if (event.cached_prompt_tokens >= 0) cached[index.at(event.id)] = event.cached_prompt_tokens;
      if (event.finish != FinishReason::kNone) outcome.finish = finish_reason_name(event.finish);
    }
  };
  std::vector<SequenceEvent> pending;
  for (int step = 0; step < 10000; ++step) {
    const bool join = join_every > 0 && next < requests.size() && step % join_every == 0;
    if (!pipelined) {
      if (join) submit_one();
      if (next == requests.size() && scheduler.idle()) break;
      record(scheduler.step());
      continue;
    }
    if (next == requests.size() && scheduler.idle() && pending.empty()) break;
    if (!scheduler.idle()) scheduler.launch();
    if (join) submit_one();
    record(pending);
    scheduler.complete();
    scheduler.take_events(pending);
  }
  EXPECT_TRUE(pending.empty());
  EXPECT_TRUE(scheduler.idle());
  SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.kv_blocks_held, 0) << "blocks still held by finished sequences";
  EXPECT_EQ(engine.block_allocator().held_blocks(), 0);
  if (stats_out != nullptr) *stats_out = stats;
  if (cached_out != nullptr) *cached_out = cached;
  return outcomes;
}

std::vector<SequenceRequest> mixed_requests(int count, bool sampled, int vocab) {
  std::vector<SequenceRequest> requests;
  for (int i = 0; i < count; ++i) {
    SequenceRequest request;
    request.prompt = random_ids(100 + static_cast<uint64_t>(i), 5 + 7 * i % 40, vocab);
    request.max_new_tokens = 4 + 5 * i % 23;
    if (sampled) {
      request.sampling.temperature = 0.7f + 0.1f * static_cast<float>(i % 3);
      request.sampling.top_k = i % 2 == 0 ? 20 : 0;
      request.sampling.top_p = i % 3 == 0 ? 0.9f : 1.f;
      request.sampling.seed = 1000 + static_cast<uint64_t>(i);
      if (i % 4 == 1) request.sampling.repetition_penalty = 1.3f;
      if (i % 4 == 2) request.sampling.presence_penalty = 0.5f;
    }
    requests.push_back(request);
  }
  return requests;
}

class SchedulerTest : public ::testing::Test {
 protected:
  int vocab() {
    static const int value = Engine(model_dir(), engine_options(1)).config().vocab_size;
    return value;
  }
};

TEST_F(SchedulerTest, GreedyBatchedEqualsOneAtATime) {
  auto requests = mixed_requests(8, false, vocab());
  auto alone = run_alone(requests);
  Engine engine(model_dir(), engine_options());
  EXPECT_EQ(run_batched(engine, requests, false), alone);
  // Joining between steps gives the same.
  EXPECT_EQ(run_batched(engine, requests, false, 3), alone);
}

TEST_F(SchedulerTest, SeededSamplingBatchedEqualsOneAtATime) {
  auto requests = mixed_requests(8, true, vocab());
  auto alone = run_alone(requests);
  Engine engine(model_dir(), engine_options());
  EXPECT_EQ(run_batched(engine, requests, false), alone);
  EXPECT_EQ(run_batched(engine, requests, false, 2), alone);
  // A different seed changes the draws (the test would pass vacuously otherwise).
  auto reseeded = requests;
  for (auto& request : reseeded) request.sampling.seed += 7;
  EXPECT_NE(run_batched(engine, reseeded, false), alone);
}

TEST_F(SchedulerTest, PipelinedStepsGiveTheSameTokens) {
  // As the server drives it: greedy and seeded sampling, requests joining while a step
  // runs, chunked prefill, and preemption in a pool too small for all of them.
  for (const bool sampled : {false, true}) {
    auto requests = mixed_requests(8, sampled, vocab());
    auto alone = run_alone(requests);
    Engine engine(model_dir(), engine_options());
    EXPECT_EQ(run_batched(engine, requests, false, 0, nullptr, true), alone);
    EXPECT_EQ(run_batched(engine, requests, true, 2, nullptr, true), alone);
    Engine chunked(model_dir(), engine_options(4, 16));
    EXPECT_EQ(run_batched(chunked, requests, false, 1, nullptr, true), alone);
    Engine small(model_dir(), engine_options(8, 512, 96));
    SchedulerStats stats;
    EXPECT_EQ(run_batched(small, requests, false, 0, &stats, true), alone);
    EXPECT_GT(stats.preemptions, 0);
  }
}

// A prompt's last layer runs past its K/V write for the last token of each chunk alone
// (QwenModel's last-layer tail), while Engine::score takes every token through every
// layer: the log-probabilities of the tokens a batch generates must equal the score of the
// same text. Batched, with chunks of 16 tokens that end mid-prompt beside the others'
// decode rows, and with a batch of whole prompts (each sequence's last token a logit row).
TEST_F(SchedulerTest, GeneratedLogprobsEqualTheScoreOfTheirText) {
  auto requests = mixed_requests(6, false, vocab());
  for (auto& request : requests) {
    request.max_new_tokens = 3;
    request.top_logprobs = 0;
  }
  Engine scorer(model_dir(), engine_options(1));
  for (const int batch_tokens : {16, 512}) {
    Engine engine(model_dir(), engine_options(4, batch_tokens));
    Scheduler scheduler(engine, false);
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < requests.size(); ++i) index[scheduler.submit(requests[i])] = i;
    std::vector<std::vector<int32_t>> tokens(requests.size());
    std::vector<std::vector<float>> logprobs(requests.size());
    const uint64_t tails_before = engine.last_layer_tail_passes();
    for (int step = 0; step < 1000 && !scheduler.idle(); ++step) {
      for (const SequenceEvent& event : scheduler.step()) {
        if (event.token < 0) continue;
        tokens[index.at(event.id)].push_back(event.token);
        logprobs[index.at(event.id)].push_back(event.logprobs.sampled);
      }
    }
    // The prompt passes took the tail (decode-only passes need not: every row is a logit row).
    EXPECT_GT(engine.last_layer_tail_passes(), tails_before) << batch_tokens << " tokens a pass";
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(tokens[i].size(), 3u) << "request " << i;
      std::vector<int32_t> text = requests[i].prompt;
      text.insert(text.end(), tokens[i].begin(), tokens[i].end());
      const ScoreResult score = scorer.score(text);
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_NEAR(logprobs[i][k], score.logprobs[requests[i].prompt.size() - 1 + k], 1e-4)
            << "request " << i << ", token " << k << ", " << batch_tokens << " tokens a pass";
      }
    }
  }
}

TEST_F(SchedulerTest, ChunkedPrefillMixedWithDecodes) {
  auto requests = mixed_requests(6, true, vocab());
  for (auto& request : requests) request.prompt = random_ids(request.sampling.seed, 37, vocab());
  auto alone = run_alone(requests);
  // 16 tokens per pass: every prompt takes three passes, shared with the others' decodes.
  Engine engine(model_dir(), engine_options(4, 16));
  SchedulerStats stats;
  EXPECT_EQ(run_batched(engine, requests, false, 1, &stats), alone);
  EXPECT_EQ(stats.computed_prompt_tokens, 6 * 37);
}

TEST_F(SchedulerTest, PreemptionWhenTheKvPoolRunsOutRecomputesTheSameTokens) {
  auto requests = mixed_requests(6, true, vocab());
  for (auto& request : requests) {
    request.prompt = random_ids(request.sampling.seed, 30, vocab());
    request.max_new_tokens = 30;
  }
  auto alone = run_alone(requests);
  for (bool prefix_cache : {false, true}) {
    // 8 blocks of 16 tokens: two sequences of 60 tokens need all of them.
    Engine engine(model_dir(), engine_options(6, 512, 8 * 16 - 6 * 16));
    ASSERT_EQ(engine.block_allocator().num_blocks(), 8);
    SchedulerStats stats;
    EXPECT_EQ(run_batched(engine, requests, prefix_cache, 0, &stats), alone) << "prefix cache " << prefix_cache;
    EXPECT_GT(stats.preemptions, 0);
  }
}

TEST_F(SchedulerTest, PrefixSharingComputesTheSharedPromptOnce) {
  const std::vector<int32_t> system = random_ids(7, 48, vocab());  // three full blocks
  std::vector<SequenceRequest> requests = mixed_requests(6, true, vocab());
  for (auto& request : requests) {
    std::vector<int32_t> prompt = system;
    auto tail = random_ids(request.sampling.seed, 5, vocab());
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    request.prompt = prompt;
  }
  auto alone = run_alone(requests);
  Engine engine(model_dir(), engine_options());
  SchedulerStats stats;
  std::vector<int> cached;
  // One request per step: the first publishes the shared blocks, the later ones find them.
  EXPECT_EQ(run_batched(engine, requests, true, 4, &stats, false, &cached), alone);
  EXPECT_EQ(cached, (std::vector<int>{0, 48, 48, 48, 48, 48}));
  EXPECT_EQ(stats.prefix_hits, 5 * 3);
  EXPECT_EQ(stats.computed_prompt_tokens, stats.prompt_tokens - 5 * 48);
  EXPECT_GT(stats.kv_blocks_cached, 0);  // kept for later requests, held by nobody
  // A second round hits the cache from the first request on.
  SchedulerStats again;
  EXPECT_EQ(run_batched(engine, requests, true, 0, &again, false, &cached), alone);
  EXPECT_EQ(cached, std::vector<int>(6, 48));
  EXPECT_EQ(again.prefix_hits - stats.prefix_hits, 6 * 3);  // the counts are the pool's, cumulative
}

TEST_F(SchedulerTest, CancelEndsTheSequenceAtTheNextStepAndFreesItsBlocks) {
  Engine engine(model_dir(), engine_options());
  Scheduler scheduler(engine);
  SequenceRequest request;
  request.prompt = random_ids(3, 20, vocab());
  request.max_new_tokens = 100;
  const uint64_t cancelled = scheduler.submit(request);
  const uint64_t kept = scheduler.submit(request);
  for (int i = 0; i < 3; ++i) scheduler.step();
  EXPECT_GT(engine.block_allocator().held_blocks(), 0);
  scheduler.cancel(cancelled);
  const std::vector<SequenceEvent> events = scheduler.step();
  bool saw_cancel = false;
  for (const auto& event : events) {
    if (event.id == cancelled) {
      EXPECT_EQ(event.finish, FinishReason::kCancelled);
      EXPECT_EQ(event.token, -1);
      saw_cancel = true;
    }
  }
  EXPECT_TRUE(saw_cancel);
  EXPECT_EQ(scheduler.stats().running, 1);
  scheduler.cancel(kept);
  scheduler.cancel(12345);  // unknown: ignored
  scheduler.step();
  EXPECT_TRUE(scheduler.idle());
  EXPECT_EQ(engine.block_allocator().held_blocks(), 0);
}

// A cancel that comes while a step runs (the server found a stop string in the token before
// it) takes the token that step drew for the sequence: not reported, not counted.
TEST_F(SchedulerTest, ACancelDuringAStepTakesItsToken) {
  Engine engine(model_dir(), engine_options());
  Scheduler scheduler(engine);
  SequenceRequest request;
  request.prompt = random_ids(3, 20, vocab());
  request.max_new_tokens = 100;
  const uint64_t cancelled = scheduler.submit(request);
  const uint64_t kept = scheduler.submit(request);
  for (int i = 0; i < 3; ++i) scheduler.step();
  const int64_t before = scheduler.stats().generated_tokens;
  std::vector<SequenceEvent> events;
  scheduler.take_events(events);  // those of the steps before
  scheduler.launch();
  scheduler.cancel(cancelled);
  scheduler.complete();
  int kept_tokens = 0;
  scheduler.take_events(events);
  for (const SequenceEvent& event : events) {
    EXPECT_FALSE(event.id == cancelled && event.token >= 0) << "a token after the cancel";
    kept_tokens += event.id == kept && event.token >= 0;
  }
  EXPECT_EQ(kept_tokens, 1);
  EXPECT_EQ(scheduler.stats().generated_tokens - before, 1);
  bool saw_cancel = false;
  for (const SequenceEvent& event : scheduler.step()) {
    saw_cancel = saw_cancel || (event.id == cancelled && event.finish == FinishReason::kCancelled && event.token == -1);
  }
  EXPECT_TRUE(saw_cancel);
  scheduler.cancel(kept);
  scheduler.step();
  EXPECT_TRUE(scheduler.idle());
  EXPECT_EQ(engine.block_allocator().held_blocks(), 0);
}

// The first event of one request run alone through a scheduler.
SequenceEvent first_event(Engine& engine, const SequenceRequest& request) {
  Scheduler scheduler(engine);
  scheduler.submit(request);
  SequenceEvent first;
  bool seen = false;
  while (!scheduler.idle()) {
    for (const SequenceEvent& event : scheduler.step()) {
      if (!seen && event.token >= 0) {
        first = event;
        seen = true;
      }
    }
  }
  EXPECT_TRUE(seen);
  return first;
}

// A random prompt whose answer reports each token's two most likely alternatives.
SequenceRequest with_two_alternatives(uint64_t seed, int prompt_tokens, int max_new_tokens, int vocab) {
  SequenceRequest request;
  request.prompt = random_ids(seed, prompt_tokens, vocab);
  request.max_new_tokens = max_new_tokens;
  request.top_logprobs = 2;
  return request;
}

// min_tokens as vLLM has it: before that many tokens the ids that would end the sequence
// are not drawn at all (greedy takes the runner-up), while the reported log-probabilities
// stay the model's.
TEST_F(SchedulerTest, MinTokensHoldsOffStopIdsUntilReached) {
  Engine engine(model_dir(), engine_options());
  const SequenceRequest base = with_two_alternatives(7, 12, 6, vocab());
  const Outcome free_run = run_batched(engine, {base}, false)[0];
  ASSERT_EQ(free_run.tokens.size(), 6u);
  const int32_t first = free_run.tokens[0];
  const SequenceEvent free_first = first_event(engine, base);
  ASSERT_EQ(free_first.logprobs.top.size(), 2u);
  ASSERT_EQ(free_first.logprobs.top[0].id, first);
  const int32_t runner_up = free_first.logprobs.top[1].id;

  SequenceRequest stopped = base;
  stopped.stop_ids = {first};
  const Outcome stop_now = run_batched(engine, {stopped}, false)[0];
  EXPECT_EQ(stop_now.tokens, std::vector<int32_t>{first});
  EXPECT_EQ(stop_now.finish, "stop");

  SequenceRequest held = stopped;
  held.min_tokens = 3;
  const Outcome held_run = run_batched(engine, {held}, false)[0];
  ASSERT_GE(held_run.tokens.size(), 3u);
  EXPECT_EQ(held_run.tokens[0], runner_up);
  for (int i = 0; i < 3; ++i) EXPECT_NE(held_run.tokens[static_cast<size_t>(i)], first) << "token " << i;
  const SequenceEvent held_first = first_event(engine, held);
  EXPECT_EQ(held_first.token, runner_up);
  ASSERT_EQ(held_first.logprobs.top.size(), 2u);
  EXPECT_EQ(held_first.logprobs.top[0].id, first) << "log-probabilities are the model's, before the hold";
  EXPECT_FLOAT_EQ(held_first.logprobs.top[0].logprob, free_first.logprobs.top[0].logprob);
  EXPECT_FLOAT_EQ(held_first.logprobs.sampled, free_first.logprobs.top[1].logprob);

  // ignore_eos holds nothing of the model's own end ids back; more ids than a row can ban are refused.
  Scheduler scheduler(engine);
  SequenceRequest many = base;
  many.min_tokens = 1;
  for (int32_t id = 0; id < kMaxBannedPerRow + 1; ++id) many.stop_ids.push_back(id);
  try {
    scheduler.submit(many);
    ADD_FAILURE() << "more held ids than a row can ban were accepted";
  } catch (const Error& error) {
    // The refusal names the request field at fault, for the server's answer (its `param`).
    EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
    EXPECT_EQ(error.param(), "min_tokens");
    EXPECT_EQ(std::string(error.what()), "min_tokens would hold off " + std::to_string(kMaxBannedPerRow + 1) +
                                             " end-of-sequence and stop ids; at most " +
                                             std::to_string(kMaxBannedPerRow) + " are supported");
  }
  EXPECT_TRUE(scheduler.idle());
}

// A constraint that allows one id at a time (its script), then nothing: the text is
// complete, and the model has no end id to draw (dropped_last), or it was cut (cut).
class ScriptedConstraint final : public TokenConstraint {
 public:
  ScriptedConstraint(std::vector<int32_t> script, bool cut) : script_(std::move(script)), cut_(cut) {}
  bool next_mask(std::span<uint32_t> mask) override {
    std::fill(mask.begin(), mask.end(), 0u);
    if (at_ < script_.size()) mask[static_cast<size_t>(script_[at_]) / 32] |= 1u << (script_[at_] % 32);
    return true;
  }
  void accept(int32_t) override { ++at_; }
  bool ended() const override { return at_ > script_.size(); }
  bool cut() const override { return ended() && cut_; }
  bool dropped_last() const override { return ended() && !cut_; }

 private:
  std::vector<int32_t> script_;
  bool cut_;
  size_t at_ = 0;
};

TEST_F(SchedulerTest, AConstraintThatEndsWithoutAnEndIdStopsWhereTheTextEnded) {
  Engine engine(model_dir(), engine_options());
  for (const bool cut : {false, true}) {
    SequenceRequest request;
    request.prompt = random_ids(3, 9, vocab());
    request.max_new_tokens = 20;
    request.constraint = std::make_shared<ScriptedConstraint>(std::vector<int32_t>{5, 6, 7}, cut);
    SchedulerStats stats;
    const Outcome outcome = run_batched(engine, {request}, false, 0, &stats)[0];
    EXPECT_EQ(outcome.tokens, (std::vector<int32_t>{5, 6, 7})) << "the draw after the end is no part of the text";
    EXPECT_EQ(outcome.finish, cut ? "length" : "stop");
    EXPECT_EQ(stats.generated_tokens, 3) << "the counter counts what the answer holds";
  }
}

// logit_bias as OpenAI defines it: the bias is added to the token's logit before the draw.
// Log-probability differences are logit differences, so a bias just above the gap between
// the two most likely tokens makes greedy take the runner-up, one just below does not; the
// reported log-probabilities stay the model's; a held (banned) id stays held.
TEST_F(SchedulerTest, LogitBiasIsAddedToTheLogits) {
  Engine engine(model_dir(), engine_options());
  const SequenceRequest base = with_two_alternatives(11, 9, 1, vocab());
  const SequenceEvent free_first = first_event(engine, base);
  ASSERT_EQ(free_first.logprobs.top.size(), 2u);
  const int32_t first = free_first.logprobs.top[0].id, runner_up = free_first.logprobs.top[1].id;
  const float gap = free_first.logprobs.top[0].logprob - free_first.logprobs.top[1].logprob;
  ASSERT_GT(gap, 0.02f);
  const auto first_with = [&](std::vector<TokenBias> bias) {
    SequenceRequest request = base;
    request.logit_bias = std::move(bias);
    return first_event(engine, request);
  };
  const SequenceEvent over = first_with({{runner_up, gap + 0.01f}});
  EXPECT_EQ(over.token, runner_up);
  EXPECT_FLOAT_EQ(over.logprobs.top[0].logprob, free_first.logprobs.top[0].logprob) << "log-probabilities are the model's";
  EXPECT_FLOAT_EQ(over.logprobs.sampled, free_first.logprobs.top[1].logprob);
  EXPECT_EQ(first_with({{runner_up, gap - 0.01f}}).token, first);
  EXPECT_EQ(first_with({{first, -(gap + 0.01f)}}).token, runner_up);
  EXPECT_EQ(first_with({{first, -gap + 0.01f}, {runner_up, 0.f}}).token, first);

  // +100 all but forces a token at every step, sampled or greedy, alone or batched with others.
  const int32_t forced = (first + 17) % vocab();
  std::vector<SequenceRequest> requests = mixed_requests(4, true, vocab());
  requests[1].logit_bias = {{forced, 100.f}};
  requests[2].logit_bias = {{forced, 100.f}, {first, -100.f}};
  requests[2].sampling = SamplingParams{};  // greedy
  const std::vector<Outcome> batched = run_batched(engine, requests, false);
  for (const size_t i : {1, 2}) {
    ASSERT_FALSE(batched[i].tokens.empty());
    for (const int32_t token : batched[i].tokens) EXPECT_EQ(token, forced) << "request " << i;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(run_batched(engine, {requests[i]}, false)[0], batched[i]) << "request " << i << ": alone vs batched";
  }

  // A held id stays held whatever its bias; an id biased twice, outside the vocabulary or by
  // a non-finite value is refused, as are more entries than a draw takes.
  SequenceRequest held = base;
  held.stop_ids = {first};
  held.min_tokens = 1;
  held.logit_bias = {{first, 100.f}};
  EXPECT_NE(first_event(engine, held).token, first);
  Scheduler scheduler(engine);
  for (const std::vector<TokenBias>& bad : std::vector<std::vector<TokenBias>>{
           {{first, 1.f}, {first, 2.f}}, {{vocab(), 1.f}}, {{-1, 1.f}}, {{first, INFINITY}}, {{first, NAN}}}) {
    SequenceRequest request = base;
    request.logit_bias = bad;
    EXPECT_THROW(scheduler.submit(request), Error);
  }
  SequenceRequest many = base;
  for (int32_t id = 0; id <= kMaxLogitBiasPerRow; ++id) many.logit_bias.push_back({id, 1.f});
  EXPECT_THROW(scheduler.submit(many), Error);
  many.logit_bias.pop_back();
  EXPECT_NO_THROW(scheduler.submit(many));
}

TEST_F(SchedulerTest, RefusesBadRequests) {
  Engine engine(model_dir(), engine_options());
  Scheduler scheduler(engine);
  SequenceRequest empty;
  EXPECT_THROW(scheduler.submit(empty), Error);
  SequenceRequest outside;
  outside.prompt = {1, vocab()};
  EXPECT_THROW(scheduler.submit(outside), Error);
  SequenceRequest at_context;
  at_context.prompt = random_ids(1, 256, vocab());
  EXPECT_THROW(scheduler.submit(at_context), Error);
  SequenceRequest no_tokens;
  no_tokens.prompt = {1, 2};
  no_tokens.max_new_tokens = 0;
  EXPECT_THROW(scheduler.submit(no_tokens), Error);
  SequenceRequest bad_temperature;
  bad_temperature.prompt = {1, 2};
  bad_temperature.sampling.temperature = -1;
  EXPECT_THROW(scheduler.submit(bad_temperature), Error);
  EXPECT_TRUE(scheduler.idle());
  SequenceRequest good;
  good.prompt = {1, 2, 3};
  good.max_new_tokens = 2;
  scheduler.submit(good);
  int tokens = 0;
  while (!scheduler.idle()) {
    for (const auto& event : scheduler.step()) tokens += event.token >= 0;
  }
  EXPECT_EQ(tokens, 2);
}

// Every step that samples is timed: its wall time in Engine::step, and its work on the
// device (here the CPU) within it; a prefill chunk that samples nothing is counted as a
// step but not timed.
TEST_F(SchedulerTest, StepsThatSampleAreTimed) {
  Engine engine(model_dir(), engine_options(4, 16));
  EXPECT_EQ(engine.last_step_timing().index, 0u);
  SequenceRequest request;
  request.prompt = random_ids(7, 40, vocab());  // three chunks of 16: two sample nothing
  request.max_new_tokens = 3;
  Scheduler scheduler(engine, false);
  scheduler.submit(request);
  std::vector<uint64_t> indices, steps;
  while (!scheduler.idle()) {
    scheduler.step();
    const StepTiming& timing = engine.last_step_timing();
    if (timing.index == 0) continue;
    if (indices.empty() || indices.back() != timing.index) {
      indices.push_back(timing.index);
      steps.push_back(timing.step);
      EXPECT_GT(timing.device_seconds, 0.0);
      EXPECT_LE(timing.device_seconds, timing.seconds);
      EXPECT_GE(std::chrono::duration<double>(timing.ended - timing.started).count(), timing.seconds - 1e-9);
    }
  }
  EXPECT_EQ(indices, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(steps, (std::vector<uint64_t>{3, 4, 5}));  // the prompt's last chunk samples the first token
}

}  // namespace
}  // namespace qwenrt
