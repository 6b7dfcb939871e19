// The original Qwen (QWenLMHeadModel) on the CUDA backend: the tiny released-layout
// checkpoints (tests/data/qwen1) scored and greedily continued on the GPU against the goldens
// of Qwen's own modeling code (fp32), with dynamic NTK and logn active past seq_length in
// qwen1-a. Log-probs agree to bf16/fp16 tolerance as for Qwen2/3; greedy tokens must be
// identical where the reference's top-2 margin is wider than twice the log-prob error (the
// margins come from the CPU backend, which matches the goldens within 1e-3).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../model/qwen_v1_batch.h"
#include "engine/kv_cache.h"
#include "gpu_test_util.h"
#include "model/config.h"
#include "model/qwen.h"
#include "model/safetensors.h"
#include "qwenrt/engine.h"

namespace qwenrt::test {
namespace {

namespace fs = std::filesystem;

struct V1Case {
  const char* folder;
  DType dtype;
  int max_batch_tokens;  // 7: chunked prompts, each chunk under the whole prompt's alpha
};

fs::path v1_dir(const char* folder) {
  return fs::path(QWENRT_TEST_DATA) / "qwen1" / folder;
}

// The smallest top-1 minus top-2 log-probability gap over the greedy continuation, from the
// CPU backend teacher-forced under the prompt's alpha (as the decoding ran).
double min_top2_margin(const fs::path& dir, const std::vector<int32_t>& prompt,
                       const std::vector<int32_t>& continuation) {
  ModelConfig config = load_model_config(dir);
  ModelFiles files(dir);
  std::unique_ptr<Backend> cpu = make_cpu_backend(4);
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), continuation.begin(), continuation.end());
  ForwardLimits limits;
  limits.max_batch_tokens = static_cast<int>(ids.size());
  limits.max_logit_rows = static_cast<int>(ids.size());
  limits.max_seqs = 1;
  limits.max_blocks_per_seq = (static_cast<int>(ids.size()) + 15) / 16;
  limits.num_blocks = limits.max_blocks_per_seq;
  QwenModel model(config, load_weights(config, files, *cpu), *cpu, limits);
  BlockAllocator allocator(limits.num_blocks);
  SequenceBlocks blocks(allocator, limits.block_size);
  EXPECT_TRUE(blocks.reserve(static_cast<int>(ids.size())));
  SequenceChunk chunk{&blocks, ids, ntk_alpha_index(config, static_cast<int>(prompt.size()))};
  std::vector<int32_t> rows;
  for (size_t i = prompt.size() - 1; i + 1 < ids.size(); ++i)
    rows.push_back(static_cast<int32_t>(i));
  Tensor logits = model.forward(std::span<const SequenceChunk>(&chunk, 1), rows);
  double margin = INFINITY;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<float> row(logits.as<float>() + r * config.vocab_size,
                           logits.as<float>() + (r + 1) * config.vocab_size);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    margin = std::min(margin, static_cast<double>(row[0] - row[1]));
  }
  return margin;
}

class CudaQwenV1 : public ::testing::TestWithParam<V1Case> {
 protected:
  void SetUp() override { QWENRT_REQUIRE_GPU(); }
};

std::vector<V1Case> v1_cases() {
  std::vector<V1Case> cases;
  for (const char* folder : {"qwen1-a", "qwen1-b-no-ntk"}) {
    cases.push_back({folder, DType::kBF16, 512});
    cases.push_back({folder, DType::kF16, 512});
    cases.push_back({folder, DType::kBF16, 7});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Folders, CudaQwenV1, ::testing::ValuesIn(v1_cases()),
                         [](const ::testing::TestParamInfo<V1Case>& p) {
                           std::string name = std::string(p.param.folder) + "_" +
                                              dtype_name(p.param.dtype) + "_chunk" +
                                              std::to_string(p.param.max_batch_tokens);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST_P(CudaQwenV1, ScoreAndGreedyMatchTheOriginalCode) {
  const V1Case& vc = GetParam();
  const fs::path dir = v1_dir(vc.folder);
  std::ifstream in(dir / "golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  EngineOptions options;
  options.device = "cuda";
  options.dtype = vc.dtype;
  options.max_context = 512;
  options.max_batch_tokens = vc.max_batch_tokens;
  options.max_logit_rows = 64;
  Engine engine(dir, options);
  const bool bf16 = vc.dtype == DType::kBF16;
  double worst_max_diff = 0;
  for (const auto& item : golden["score"]) {
    const auto ids = item["ids"].get<std::vector<int32_t>>();
    const auto want = item["logprobs"].get<std::vector<double>>();
    const ScoreResult score = engine.score(ids);
    ASSERT_EQ(score.logprobs.size(), want.size());
    double max_diff = 0, sum_diff = 0, nll = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(score.logprobs[i])) << "position " << i;
      const double diff = std::fabs(score.logprobs[i] - want[i]);
      max_diff = std::max(max_diff, diff);
      sum_diff += diff;
      nll -= want[i];
    }
    nll = std::max(nll / static_cast<double>(want.size()), 1.0);
    const double mean_diff = sum_diff / static_cast<double>(want.size());
    std::printf("[ %s %s chunk %d, %zu tokens ] log-prob |diff| mean %.4f max %.4f (nll %.4f)\n",
                vc.folder, dtype_name(vc.dtype), vc.max_batch_tokens, ids.size(), mean_diff,
                max_diff, nll);
    // The bounds of the Qwen2/3 GPU model test (tests/kernels/test_cuda_model.cpp).
    EXPECT_LT(mean_diff, (bf16 ? 0.015 : 0.002) * nll);
    EXPECT_LT(max_diff, (bf16 ? 0.06 : 0.008) * nll);
    worst_max_diff = std::max(worst_max_diff, max_diff);
  }
  for (const auto& item : golden["greedy"]) {
    const auto prompt = item["prompt"].get<std::vector<int32_t>>();
    const auto expected = item["greedy"].get<std::vector<int32_t>>();
    GenerateOptions gen;
    gen.max_new_tokens = static_cast<int>(expected.size());
    gen.stop_at_eos = false;
    const GenerateResult result = engine.generate(prompt, gen);
    size_t agree = 0;
    while (agree < expected.size() && agree < result.ids.size() &&
           expected[agree] == result.ids[agree])
      ++agree;
    const double margin = min_top2_margin(dir, prompt, expected);
    std::printf(
        "[ %s %s, %zu-token prompt ] greedy: %zu of %zu tokens agree (min top-2 margin %.3f)\n",
        vc.folder, dtype_name(vc.dtype), prompt.size(), agree, expected.size(), margin);
    EXPECT_GE(agree, 1u) << "the first greedy token differs";
    if (margin > 2 * worst_max_diff) {
      EXPECT_EQ(agree, expected.size());
    }
  }
}

// One GPU forward pass over two sequences with different dynamic-NTK alphas (qwen1-a: a
// 200-token sequence under alpha 7, a 48-token one under alpha 1) must give each sequence's
// last-position logits as its pass alone does, to within a quarter of what the alpha
// itself changes.
TEST(CudaQwenV1Batch, SequencesKeepTheirOwnAlpha) {
  QWENRT_REQUIRE_GPU();
  const fs::path dir = v1_dir("qwen1-a");
  std::ifstream in(dir / "golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  const auto long_ids = golden["score"][1]["ids"].get<std::vector<int32_t>>();
  const auto short_ids = golden["score"][0]["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ntk_alpha_index(load_model_config(dir), static_cast<int>(long_ids.size())), 2);
  std::unique_ptr<Backend> gpu = make_gpu_backend(DType::kBF16, 0);
  const MixedAlphaResult result = mixed_alpha_batch(*gpu, dir, long_ids, 2, short_ids);
  std::printf(
      "[ mixed alphas ] |mixed - alone| max %.4f / %.4f; the alpha changes logits by up to %.4f\n",
      result.first_diff, result.second_diff, result.alpha_effect);
  // bf16 rounding differs a little with the batch's row count (matmul algorithm choice).
  EXPECT_LT(result.first_diff, 0.25 * result.alpha_effect);
  EXPECT_LT(result.second_diff, 0.25 * result.alpha_effect);
}

}  // namespace
}  // namespace qwenrt::test
