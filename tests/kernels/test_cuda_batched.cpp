// The batched step on the GPU: the device sampler with per-row parameters and random keys
// (sample_rows) against the CPU rule, and the scheduler on a fixture model, batched against
// one at a time. The batch changes the bf16 logits slightly (other matrix shapes), so the
// scheduler test asserts that everything completes and returns its blocks, and reports how
// many greedy tokens agree before the first divergence.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/random_bits.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "gpu_test_util.h"
#include "qwenrt/engine.h"

namespace qwenrt::test {
namespace {

class CudaBatchedSampling : public GpuFixture<> {
 protected:
  std::mt19937 rng_{7};
};

TEST_F(CudaBatchedSampling, PerRowParametersAndKeysMatchTheCpuRule) {
  const int vocab = 5000;
  std::vector<SampleRow> rows(6);
  rows[1].params.temperature = 0.7f;
  rows[1].params.top_k = 20;
  rows[2].params.temperature = 1.0f;
  rows[2].params.top_k = 50;
  rows[2].params.repetition_penalty = 1.3f;
  rows[2].params.presence_penalty = 0.5f;
  rows[2].params.prompt_tokens = 12;  // presence counts the last 20 of the history only
  rows[3].params.temperature = 0.9f;
  rows[3].params.top_p = 0.9f;  // the full-vocabulary path: float sums
  rows[4].params.temperature = 1.2f;
  rows[4].params.top_k = 8;
  rows[4].params.frequency_penalty = 0.3f;
  rows[4].params.prompt_tokens = 20;
  rows[5] = rows[1];  // the same parameters, another stream: must draw independently
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].params.seed = 1000 + r % 2;
    rows[r].stream = r;
  }
  const int rows_n = static_cast<int>(rows.size());
  auto logits = random_values(rng_, static_cast<size_t>(rows_n) * vocab, 2.f, DType::kF32);
  auto d = DeviceTensor::from(gpu(), DType::kF32, rows_n, vocab, logits);
  const int stride = 32;
  std::vector<int32_t> history(static_cast<size_t>(rows_n) * stride);
  std::vector<int32_t> lens(rows_n, 0);
  std::uniform_int_distribution<int> token(0, 40);
  for (int r = 0; r < rows_n; ++r) {
    lens[r] = r % 3 == 2 || r == 4 ? stride : 0;
    for (int i = 0; i < stride; ++i) history[r * stride + i] = token(rng_);
  }
  auto d_history = upload_ints(gpu(), history);
  auto d_lens = upload_ints(gpu(), lens);
  auto ids = upload_ints(gpu(), std::vector<int32_t>(rows_n, -1));
  DeviceBuffer d_rows = gpu().allocate(rows.size() * sizeof(SampleRow), "test sample rows");
  std::vector<int32_t> got(rows_n);
  int exact_same = 0, exact_total = 0, float_same = 0, float_total = 0;
  for (uint64_t position = 3; position < 103; ++position) {
    for (auto& row : rows) row.position = position * 7 + row.stream;
    gpu().copy_to_device(d_rows.data(), rows.data(), rows.size() * sizeof(SampleRow));
    gpu().sample_rows(d.t, static_cast<const SampleRow*>(d_rows.data()), static_cast<const int32_t*>(d_history.data()),
                      static_cast<const int32_t*>(d_lens.data()), stride, static_cast<int32_t*>(ids.data()));
    gpu().copy_to_host(got.data(), ids.data(), got.size() * sizeof(int32_t));
    for (int r = 0; r < rows_n; ++r) {
      std::vector<float> row(logits.begin() + static_cast<int64_t>(r) * vocab,
                             logits.begin() + static_cast<int64_t>(r + 1) * vocab);
      apply_penalties(row.data(), vocab, rows[r].params, history.data() + r * stride, lens[r]);
      const int want = sample_row(row.data(), vocab, rows[r].params, rows[r].position, rows[r].stream);
      const bool exact = rows[r].params.temperature <= 0 || (rows[r].params.top_k > 0 && rows[r].params.top_k <= 1024);
      (exact ? exact_same : float_same) += got[r] == want;
      ++(exact ? exact_total : float_total);
    }
  }
  EXPECT_EQ(exact_same, exact_total) << "the exact paths draw what the CPU rule draws";
  EXPECT_GE(float_same, float_total - std::max(1, float_total / 100));
}

// adjust_logits (min_tokens' hold on end ids, a request's logit_bias): the banned logits
// become kBannedLogit, the biased ones get their bias added (the same float sum as on the
// host), the others stay, entries outside the tensor are skipped, and no draw picks a banned
// id: greedy takes the best of the rest, as the CPU rule does on the same adjusted row.
TEST_F(CudaBatchedSampling, BannedTokensAreNeverDrawn) {
  const int vocab = 3000;
  std::vector<SampleRow> rows(4);
  rows[1].params.temperature = 0.8f;
  rows[1].params.top_k = 5;
  rows[2].params.temperature = 1.5f;  // full vocabulary
  rows[3].params.temperature = 1.0f;
  rows[3].params.top_k = 4;
  rows[3].params.repetition_penalty = 1.2f;
  const int rows_n = static_cast<int>(rows.size());
  auto logits = random_values(rng_, static_cast<size_t>(rows_n) * vocab, 2.f, DType::kF32);
  std::vector<std::vector<int32_t>> banned(rows_n);
  std::vector<int32_t> entries;  // (row, id, bias bits)
  const int32_t ban = std::bit_cast<int32_t>(-INFINITY);
  std::vector<float> want;
  for (int r = 0; r < rows_n; ++r) {
    std::vector<int32_t> order(vocab);
    for (int i = 0; i < vocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 3, order.end(), [&](int a, int b) {
      return logits[static_cast<size_t>(r) * vocab + a] > logits[static_cast<size_t>(r) * vocab + b];
    });
    banned[r] = {order[0], order[1], order[2]};  // the three most likely
    for (const int32_t id : banned[r]) entries.insert(entries.end(), {r, id, ban});
  }
  want = logits;
  for (int r = 0; r < rows_n; ++r) {
    for (const int32_t id : banned[r]) want[static_cast<size_t>(r) * vocab + id] = kBannedLogit;
    // Biases, up and down, on ids that are not banned.
    for (int32_t id = 10 + r; id < 40; id += 3) {
      if (std::count(banned[r].begin(), banned[r].end(), id) > 0) continue;
      const float bias = (id % 2 == 0 ? 0.75f : -1.25f) * static_cast<float>(1 + r);
      entries.insert(entries.end(), {r, id, std::bit_cast<int32_t>(bias)});
      want[static_cast<size_t>(r) * vocab + id] += bias;
    }
  }
  entries.insert(entries.end(), {rows_n, 0, ban, -1, 0, ban, 0, vocab, ban, -1, 5, std::bit_cast<int32_t>(2.f)});  // outside
  auto d = DeviceTensor::from(gpu(), DType::kF32, rows_n, vocab, logits);
  auto d_entries = upload_ints(gpu(), entries);
  gpu().adjust_logits(d.t, static_cast<const int32_t*>(d_entries.data()), static_cast<int>(entries.size() / 3));
  EXPECT_EQ(download(gpu(), d.t), want);

  const int stride = 8;
  std::vector<int32_t> history(static_cast<size_t>(rows_n) * stride);
  for (int r = 0; r < rows_n; ++r)
    for (int i = 0; i < stride; ++i) history[r * stride + i] = i < 2 ? banned[r][i] : 10 + i;  // penalised banned ids too
  std::vector<int32_t> lens(rows_n, stride);
  auto d_history = upload_ints(gpu(), history);
  auto d_lens = upload_ints(gpu(), lens);
  auto ids = upload_ints(gpu(), std::vector<int32_t>(rows_n, -1));
  DeviceBuffer d_rows = gpu().allocate(rows.size() * sizeof(SampleRow), "test sample rows");
  std::vector<int32_t> got(rows_n);
  for (uint64_t position = 0; position < 60; ++position) {
    for (size_t r = 0; r < rows.size(); ++r) {
      rows[r].params.seed = 77;
      rows[r].position = position;
      rows[r].stream = r;
    }
    gpu().copy_to_device(d_rows.data(), rows.data(), rows.size() * sizeof(SampleRow));
    gpu().sample_rows(d.t, static_cast<const SampleRow*>(d_rows.data()), static_cast<const int32_t*>(d_history.data()),
                      static_cast<const int32_t*>(d_lens.data()), stride, static_cast<int32_t*>(ids.data()));
    gpu().copy_to_host(got.data(), ids.data(), got.size() * sizeof(int32_t));
    for (int r = 0; r < rows_n; ++r) {
      ASSERT_GE(got[r], 0);
      EXPECT_EQ(std::count(banned[r].begin(), banned[r].end(), got[r]), 0) << "row " << r << " drew a banned id";
      std::vector<float> row(want.begin() + static_cast<int64_t>(r) * vocab, want.begin() + static_cast<int64_t>(r + 1) * vocab);
      apply_penalties(row.data(), vocab, rows[r].params, history.data() + r * stride, lens[r]);
      if (r == 0 || r == 1 || r == 3) {  // exact paths (greedy, small top_k)
        EXPECT_EQ(got[r], sample_row(row.data(), vocab, rows[r].params, rows[r].position, rows[r].stream)) << "row " << r;
      }
    }
  }
}

// mask_logits (a grammar's allowed ids) at Qwen's vocabulary: bit for bit what the CPU op
// leaves, for a dense random mask, a sparse one and one that allows a single id (rows given
// out of order, one row not masked, one outside the tensor); then draws from the masked rows
// pick only allowed ids.
TEST_F(CudaBatchedSampling, MaskLogitsMatchesTheCpuOp) {
  const int vocab = 152064;
  const int words = token_mask_words(vocab);
  const int rows_n = 4;
  auto logits = random_values(rng_, static_cast<size_t>(rows_n) * vocab, 2.f, DType::kF32);
  std::vector<int32_t> mask_rows = {2, 0, 3, rows_n};
  std::vector<uint32_t> masks(mask_rows.size() * words, 0);
  std::uniform_int_distribution<uint32_t> word;
  std::uniform_int_distribution<int> id(0, vocab - 1);
  for (int w = 0; w < words; ++w) masks[w] = word(rng_);                           // row 2: about half
  for (int k = 0; k < 200; ++k) {                                                  // row 0: a few hundred
    const int j = id(rng_);
    masks[static_cast<size_t>(words) + j / 32] |= 1u << (j % 32);
  }
  const int single = vocab - 1;                                                    // row 3: the last id
  masks[2 * static_cast<size_t>(words) + single / 32] = 1u << (single % 32);
  std::fill_n(masks.begin() + 3 * static_cast<size_t>(words), words, 0u);          // outside: skipped
  std::vector<float> want = logits;
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  cpu->mask_logits(Tensor{want.data(), DType::kF32, rows_n, vocab}, mask_rows.data(), masks.data(),
                   static_cast<int>(mask_rows.size()));
  auto d = DeviceTensor::from(gpu(), DType::kF32, rows_n, vocab, logits);
  auto d_rows = upload_ints(gpu(), mask_rows);
  auto d_masks = upload_ints(gpu(), masks);
  gpu().mask_logits(d.t, static_cast<const int32_t*>(d_rows.data()), static_cast<const uint32_t*>(d_masks.data()),
                    static_cast<int>(mask_rows.size()));
  const std::vector<float> got = download(gpu(), d.t);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  EXPECT_EQ(std::count(want.begin() + vocab, want.begin() + 2 * vocab, kBannedLogit), 0) << "row 1 untouched";
  EXPECT_EQ(std::count(want.begin() + 3 * static_cast<size_t>(vocab), want.end(), kBannedLogit), vocab - 1);

  std::vector<SampleRow> rows(rows_n);
  rows[2].params.temperature = 1.0f;  // full vocabulary
  rows[3].params.temperature = 0.8f;
  rows[3].params.top_k = 20;
  DeviceBuffer d_sample_rows = gpu().allocate(rows.size() * sizeof(SampleRow), "test sample rows");
  auto ids = upload_ints(gpu(), std::vector<int32_t>(rows_n, -1));
  std::vector<int32_t> drawn(rows_n);
  const auto allowed = [&](size_t i, int j) { return ((masks[i * words + j / 32] >> (j % 32)) & 1u) != 0; };
  for (uint64_t position = 0; position < 20; ++position) {
    for (size_t r = 0; r < rows.size(); ++r) {
      rows[r].position = position;
      rows[r].stream = r;
    }
    gpu().copy_to_device(d_sample_rows.data(), rows.data(), rows.size() * sizeof(SampleRow));
    gpu().sample_rows(d.t, static_cast<const SampleRow*>(d_sample_rows.data()), nullptr, nullptr, 0,
                      static_cast<int32_t*>(ids.data()));
    gpu().copy_to_host(drawn.data(), ids.data(), drawn.size() * sizeof(int32_t));
    EXPECT_TRUE(allowed(1, drawn[0])) << drawn[0];
    EXPECT_TRUE(allowed(0, drawn[2])) << drawn[2];
    EXPECT_EQ(drawn[3], single);
  }
}

TEST(CudaBatchedEngine, SchedulerCompletesAndReportsAgreementWithOneAtATime) {
  QWENRT_REQUIRE_GPU();
  const std::filesystem::path dir = std::filesystem::path(QWENRT_TEST_DATA) / "models" / "qwen2_gqa";
  EngineOptions options;
  options.device = "cuda";
  options.max_context = 256;
  options.max_seqs = 8;
  options.kv_cache_tokens = 8 * 256;
  Engine engine(dir, options);
  std::vector<SequenceRequest> requests;
  uint64_t state = 5;
  for (int i = 0; i < 8; ++i) {
    SequenceRequest request;
    for (int t = 0; t < 10 + 9 * i; ++t) {
      state = splitmix64(state);
      request.prompt.push_back(static_cast<int32_t>(state % static_cast<uint64_t>(engine.config().vocab_size)));
    }
    request.max_new_tokens = 24;
    request.ignore_eos = true;
    requests.push_back(request);
  }
  std::vector<std::vector<int32_t>> alone;
  for (const auto& request : requests) {
    GenerateOptions generate;
    generate.max_new_tokens = request.max_new_tokens;
    generate.stop_at_eos = false;
    alone.push_back(engine.generate(request.prompt, generate).ids);
  }
  Scheduler scheduler(engine);
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) index[scheduler.submit(requests[i])] = i;
  std::vector<std::vector<int32_t>> batched(requests.size());
  for (int step = 0; step < 1000 && !scheduler.idle(); ++step) {
    for (const auto& event : scheduler.step()) {
      if (event.token >= 0) batched[index.at(event.id)].push_back(event.token);
    }
  }
  ASSERT_TRUE(scheduler.idle());
  EXPECT_EQ(engine.block_allocator().held_blocks(), 0);
  int agreeing = 0, total = 0, identical = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(batched[i].size(), 24u);
    ASSERT_EQ(alone[i].size(), 24u);
    size_t prefix = 0;
    while (prefix < 24 && batched[i][prefix] == alone[i][prefix]) ++prefix;
    agreeing += static_cast<int>(prefix);
    total += 24;
    identical += prefix == 24;
  }
  std::printf("batched vs one at a time (bf16, greedy): %d of %zu sequences identical, %d of %d tokens before "
              "the first divergence\n",
              identical, requests.size(), agreeing, total);
  RecordProperty("identical_sequences", identical);
  RecordProperty("agreeing_tokens", agreeing);
}

// The last layer's tail on the device (QwenModel's LastLayerTail: a chunk's other tokens
// skip the last layer's attention output, MLP and final norm; the logit rows' q and
// residual rows are gathered): the log-probability of each generated token must match the
// score of the same text, which takes every token through every layer, to bf16 noise. A
// wrong gather or a wrong row's attention would be off by nats. Chunks of 16 tokens (ending
// mid-prompt beside other sequences' decode rows) and whole prompts; and 136 sequences at
// once, whose decode steps are recorded padded to the 192-row bucket (decode_bucket). A
// third of the requests report nothing, so the reporting rows are gathered from among the
// others (Engine's log-probability rows), and a third report the top 3 too.
TEST(CudaBatchedEngine, GeneratedLogprobsMatchTheScoreOfTheirText) {
  QWENRT_REQUIRE_GPU();
  const std::filesystem::path dir = std::filesystem::path(QWENRT_TEST_DATA) / "models" / "qwen2_gqa";
  EngineOptions options;
  options.device = "cuda";
  options.max_context = 256;
  options.max_seqs = 4;
  options.kv_cache_tokens = 8 * 256;
  Engine scorer(dir, options);
  struct Case {
    int batch_tokens, max_seqs, requests;
  };
  for (const Case& c : {Case{16, 4, 6}, Case{512, 4, 6}, Case{4096, 256, 136}}) {
    const int batch_tokens = c.batch_tokens;
    std::vector<SequenceRequest> requests;
    uint64_t state = 11;
    for (int i = 0; i < c.requests; ++i) {
      SequenceRequest request;
      for (int t = 0; t < 5 + 13 * i % 80; ++t) {
        state = splitmix64(state);
        request.prompt.push_back(static_cast<int32_t>(state % static_cast<uint64_t>(scorer.config().vocab_size)));
      }
      request.max_new_tokens = 3;
      request.ignore_eos = true;
      request.top_logprobs = i % 3 == 1 ? -1 : (i % 3 == 2 ? 3 : 0);
      requests.push_back(request);
    }
    options.max_batch_tokens = batch_tokens;
    options.max_seqs = c.max_seqs;
    options.kv_cache_tokens = int64_t{c.max_seqs} * 128;
    Engine engine(dir, options);
    Scheduler scheduler(engine);
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < requests.size(); ++i) index[scheduler.submit(requests[i])] = i;
    std::vector<std::vector<int32_t>> tokens(requests.size());
    std::vector<std::vector<float>> logprobs(requests.size());
    const uint64_t tails_before = engine.last_layer_tail_passes();
    for (int step = 0; step < 1000 && !scheduler.idle(); ++step) {
      for (const auto& event : scheduler.step()) {
        if (event.token < 0) continue;
        const size_t i = index.at(event.id);
        tokens[i].push_back(event.token);
        logprobs[i].push_back(event.logprobs.sampled);
        const size_t top = static_cast<size_t>(std::max(requests[i].top_logprobs, 0));
        ASSERT_EQ(event.logprobs.top.size(), top) << "request " << i;
        if (top > 0) {
          EXPECT_GE(event.logprobs.top[0].logprob, event.logprobs.sampled - 1e-6f) << "request " << i;
          EXPECT_GE(event.logprobs.top[0].logprob, event.logprobs.top[top - 1].logprob) << "request " << i;
        }
      }
    }
    ASSERT_TRUE(scheduler.idle());
    EXPECT_GT(engine.last_layer_tail_passes(), tails_before) << batch_tokens << " tokens a pass";
    // `worst`: the largest difference from the score of the sequence's own text;
    // `other_context`: from the score of its text with its first token changed, what a row
    // read from the wrong sequence would look like (it must exceed the tolerance, or the
    // comparison could not tell).
    double worst = 0, other_context = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(tokens[i].size(), 3u) << "request " << i;
      if (requests[i].top_logprobs < 0) continue;
      std::vector<int32_t> text = requests[i].prompt;
      text.insert(text.end(), tokens[i].begin(), tokens[i].end());
      const ScoreResult score = scorer.score(text);
      text[0] = (text[0] + 1) % scorer.config().vocab_size;
      const ScoreResult changed = scorer.score(text);
      for (size_t k = 0; k < 3; ++k) {
        const size_t at = requests[i].prompt.size() - 1 + k;
        worst = std::max(worst, static_cast<double>(std::fabs(logprobs[i][k] - score.logprobs[at])));
        other_context = std::max(other_context, static_cast<double>(std::fabs(logprobs[i][k] - changed.logprobs[at])));
        EXPECT_NEAR(logprobs[i][k], score.logprobs[at], 0.1)
            << "request " << i << ", token " << k << ", " << batch_tokens << " tokens a pass";
      }
    }
    EXPECT_GT(other_context, 0.1) << "the tolerance does not tell one context from another";
    std::printf("%d sequences, %d tokens a pass: largest log-prob difference from the score %.4f (from another "
                "context's %.4f)\n",
                c.requests, batch_tokens, worst, other_context);
  }
}

}  // namespace
}  // namespace qwenrt::test
