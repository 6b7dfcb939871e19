// Model-level tests: tiny checkpoints written by transformers (scripts/gen_model_fixtures.py)
// must reproduce transformers' fp32 log-probabilities and greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
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
