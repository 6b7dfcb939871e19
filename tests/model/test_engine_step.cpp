// Engine::step's per-row token mask (StepInput::allowed, what a grammar's structured output
// gives each draw) on the CPU backend and a fixture model: a mask that allows one id forces
// it, greedy or sampled; one that allows two ids draws one of them (greedy: the likelier);
// the rows without a mask in the same step draw what they draw alone; the log-probabilities
// stay the model's; a mask of the wrong size is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/error.h"
#include "engine/kv_cache.h"
#include "qwenrt/engine.h"

namespace qwenrt {
namespace {

namespace fs = std::filesystem;

EngineOptions engine_options() {
  EngineOptions options;
  options.device = "cpu";
  options.threads = 2;
  options.max_context = 64;
  options.max_seqs = 8;
  options.max_batch_tokens = 128;
  options.kv_cache_tokens = 512;
  return options;
}

// One row of a step: its prompt, sampling and mask (empty: none).
struct Row {
  std::vector<int32_t> prompt;
  SampleRow sampling;
  std::vector<uint32_t> allowed;
  int top_logprobs = -1;
  bool sample = true;
};

class EngineStepMask : public ::testing::Test {
 protected:
  EngineStepMask() : engine_(fs::path(QWENRT_TEST_DATA) / "models" / "qwen3_qknorm", engine_options()) {}

  int vocab() const { return engine_.config().vocab_size; }
  std::vector<uint32_t> mask_of(std::initializer_list<int32_t> ids) const {
    std::vector<uint32_t> mask(static_cast<size_t>(token_mask_words(vocab())), 0);
    for (const int32_t id : ids) mask[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
    return mask;
  }

  // One step of fresh sequences, each prefilling its prompt; the sampled ids (-1 for a row
  // that does not sample) and the log-probabilities.
  std::vector<int32_t> step(const std::vector<Row>& rows, std::vector<StepLogprobs>* logprobs = nullptr) {
    std::vector<std::unique_ptr<SequenceBlocks>> sequences;
    std::vector<StepInput> inputs;
    for (const Row& row : rows) {
      sequences.push_back(engine_.new_sequence());
      EXPECT_TRUE(sequences.back()->reserve(static_cast<int>(row.prompt.size())));
      StepInput input;
      input.sequence = sequences.back().get();
      input.tokens = row.prompt;
      input.sample = row.sample;
      input.sampling = row.sampling;
      input.history = row.prompt;
      input.top_logprobs = row.top_logprobs;
      input.allowed = row.allowed;
      inputs.push_back(input);
    }
    std::vector<int32_t> sampled;
    engine_.step(inputs, sampled, logprobs);
    return sampled;
  }

  static SampleRow sampled_row(uint64_t seed) {
    SampleRow row;
    row.params.temperature = 1.f;
    row.params.seed = seed;
    return row;
  }

  Engine engine_;
  const std::vector<int32_t> prompt_ = {3, 141, 59, 26, 5, 35, 89, 79, 32, 38};
  const std::vector<int32_t> other_ = {271, 82, 81, 28, 18, 28, 45, 90};
};

TEST_F(EngineStepMask, OneAllowedIdIsDrawnGreedyAndSampled) {
  const int32_t free_greedy = step({{prompt_, {}, {}}})[0];
  const int32_t free_other = step({{other_, {}, {}}})[0];
  for (const int32_t forced : {(free_greedy + 17) % vocab(), 0, vocab() - 1}) {
    ASSERT_NE(forced, free_greedy);
    EXPECT_EQ(step({{prompt_, {}, mask_of({forced})}})[0], forced) << "greedy";
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      EXPECT_EQ(step({{prompt_, sampled_row(seed), mask_of({forced})}})[0], forced) << "sampled, seed " << seed;
    }
    // Batched with unmasked rows and a row that only prefills (its mask is not read): the
    // masks go to their own rows.
    const std::vector<int32_t> batched = step({{other_, {}, {}},
                                               {prompt_, {}, mask_of({forced})},
                                               {other_, {}, mask_of({forced}), -1, false},
                                               {prompt_, sampled_row(3), mask_of({forced})},
                                               {other_, {}, {}}});
    EXPECT_EQ(batched, (std::vector<int32_t>{free_other, forced, -1, forced, free_other}));
  }
}

TEST_F(EngineStepMask, TwoAllowedIdsDrawOneOfThem) {
  std::vector<StepLogprobs> logprobs;
  const int32_t free_greedy = step({{prompt_, {}, {}, vocab()}}, &logprobs)[0];
  const std::vector<TokenLogprob>& all = logprobs[0].top;
  ASSERT_EQ(all.size(), static_cast<size_t>(vocab()));
  ASSERT_EQ(all[0].id, free_greedy);
  // The ids ranked 2nd and 3rd: likely enough that a sampled draw sees both; greedy takes
  // the 2nd.
  const int32_t a = all[1].id, b = all[2].id;
  EXPECT_EQ(step({{prompt_, {}, mask_of({b, a})}})[0], a);
  int drew_a = 0, drew_b = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const int32_t id = step({{prompt_, sampled_row(seed), mask_of({a, b})}})[0];
    EXPECT_TRUE(id == a || id == b) << "seed " << seed << " drew " << id;
    drew_a += id == a;
    drew_b += id == b;
  }
  EXPECT_GT(drew_a, 0);
  EXPECT_GT(drew_b, 0);
}

TEST_F(EngineStepMask, LogprobsStayTheModels) {
  std::vector<StepLogprobs> free, masked;
  const int32_t free_greedy = step({{prompt_, {}, {}, 5}, {other_, {}, {}, 3}}, &free)[0];
  const int32_t forced = (free_greedy + 17) % vocab();
  std::vector<StepLogprobs> full;  // the same two rows (the same logits), every id reported
  step({{prompt_, {}, {}, vocab()}, {other_, {}, {}, 3}}, &full);
  // A mask on the first row only, and on both: the reported distributions are the model's.
  for (const bool both : {false, true}) {
    const std::vector<int32_t> sampled =
        step({{prompt_, {}, mask_of({forced}), 5}, {other_, {}, both ? mask_of({forced}) : std::vector<uint32_t>{}, 3}},
             &masked);
    ASSERT_EQ(sampled[0], forced);
    ASSERT_EQ(masked.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(masked[i].top.size(), free[i].top.size());
      for (size_t k = 0; k < free[i].top.size(); ++k) {
        EXPECT_EQ(masked[i].top[k].id, free[i].top[k].id);
        EXPECT_EQ(masked[i].top[k].logprob, free[i].top[k].logprob);
      }
    }
    // The sampled id's log-probability is the model's for that id.
    const auto it = std::find_if(full[0].top.begin(), full[0].top.end(), [&](const TokenLogprob& t) { return t.id == forced; });
    ASSERT_NE(it, full[0].top.end());
    EXPECT_EQ(masked[0].sampled, it->logprob);
  }
}

// Rows that report log-probabilities beside rows that do not (and one that only prefills):
// each reporting row gets what it gets when every row reports, the others nothing.
TEST_F(EngineStepMask, LogprobsOfSomeRowsAreThoseTheyGetAlongsideOthers) {
  std::vector<StepLogprobs> every, some;
  const std::vector<int32_t> all_report =
      step({{other_, {}, {}, 4}, {prompt_, sampled_row(5), {}, 4}, {other_, sampled_row(9), {}, 2}}, &every);
  const std::vector<int32_t> two_report = step({{other_, {}, {}, -1},
                                                {prompt_, sampled_row(5), {}, 4},
                                                {prompt_, {}, {}, 3, false},
                                                {other_, sampled_row(9), {}, 2}},
                                               &some);
  ASSERT_EQ(two_report, (std::vector<int32_t>{all_report[0], all_report[1], -1, all_report[2]}));
  ASSERT_EQ(some.size(), 4u);
  EXPECT_TRUE(some[0].top.empty());
  EXPECT_TRUE(some[2].top.empty());
  for (const auto& [got, want] : {std::pair{&some[1], &every[1]}, std::pair{&some[3], &every[2]}}) {
    EXPECT_EQ(got->sampled, want->sampled);
    ASSERT_EQ(got->top.size(), want->top.size());
    for (size_t k = 0; k < want->top.size(); ++k) {
      EXPECT_EQ(got->top[k].id, want->top[k].id);
      EXPECT_EQ(got->top[k].logprob, want->top[k].logprob);
    }
  }
  EXPECT_EQ(every[1].top.size(), 4u);
  EXPECT_EQ(every[2].top.size(), 2u);
}

TEST_F(EngineStepMask, AMaskOfTheWrongSizeIsRefused) {
  std::vector<uint32_t> mask = mask_of({1});
  mask.push_back(~0u);
  EXPECT_THROW(step({{prompt_, {}, mask}}), Error);
  mask.resize(mask.size() - 2);
  EXPECT_THROW(step({{prompt_, {}, mask}}), Error);
  // The engine takes the next step as usual.
  EXPECT_EQ(step({{prompt_, {}, mask_of({7})}})[0], 7);
}

}  // namespace
}  // namespace qwenrt
