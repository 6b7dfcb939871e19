// The mixed-alpha batch check shared by the CPU (tests/model) and GPU (tests/kernels) tests
// of the original Qwen: one forward pass over two sequences under different dynamic-NTK
// alphas against each sequence's pass alone, and how much the alpha itself changes logits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "engine/kv_cache.h"
#include "model/config.h"
#include "model/qwen.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace qwenrt::test {

struct MixedAlphaResult {
  double first_diff = 0;    // max |logit| difference of the first sequence, batched vs alone
  double second_diff = 0;   // the same for the second
  double alpha_effect = 0;  // max |logit| change of the first sequence under alpha index 0
};

// `first` runs under `first_alpha`, `second` under alpha index 0; last-position logits.
inline MixedAlphaResult mixed_alpha_batch(Backend& backend, const std::filesystem::path& dir,
                                          const std::vector<int32_t>& first, int first_alpha,
                                          const std::vector<int32_t>& second) {
  ModelConfig config = load_model_config(dir);
  ModelFiles files(dir);
  ForwardLimits limits;
  limits.max_batch_tokens = 512;
  limits.max_logit_rows = 4;
  limits.max_seqs = 4;
  limits.max_blocks_per_seq = 32;  // 512 tokens
  limits.num_blocks = 64;
  QwenModel model(config, load_weights(config, files, backend), backend, limits);
  BlockAllocator allocator(limits.num_blocks);
  const int vocab = config.vocab_size;
  auto run = [&](const std::vector<std::pair<const std::vector<int32_t>*, int>>& seqs) {
    std::vector<std::unique_ptr<SequenceBlocks>> blocks;
    std::vector<SequenceChunk> chunks;
    std::vector<int32_t> rows;
    int offset = 0;
    for (const auto& [ids, alpha] : seqs) {
      blocks.push_back(std::make_unique<SequenceBlocks>(allocator, limits.block_size));
      EXPECT_TRUE(blocks.back()->reserve(static_cast<int>(ids->size())));
      chunks.push_back(SequenceChunk{blocks.back().get(), *ids, alpha});
      offset += static_cast<int>(ids->size());
      rows.push_back(offset - 1);
    }
    Tensor logits = model.forward(chunks, rows);
    std::vector<float> host(rows.size() * static_cast<size_t>(vocab));
    backend.copy_to_host(host.data(), logits.data, host.size() * sizeof(float));
    return host;
  };
  const auto mixed = run({{&first, first_alpha}, {&second, 0}});
  const auto first_alone = run({{&first, first_alpha}});
  const auto second_alone = run({{&second, 0}});
  const auto first_other_alpha = run({{&first, 0}});
  MixedAlphaResult result;
  for (int j = 0; j < vocab; ++j) {
    result.first_diff =
        std::max(result.first_diff, static_cast<double>(std::fabs(mixed[j] - first_alone[j])));
    result.second_diff = std::max(
        result.second_diff, static_cast<double>(std::fabs(mixed[vocab + j] - second_alone[j])));
    result.alpha_effect = std::max(
        result.alpha_effect, static_cast<double>(std::fabs(first_alone[j] - first_other_alpha[j])));
  }
  return result;
}

}  // namespace qwenrt::test
