// Model-level check of the CUDA backend: the tiny checkpoints written by transformers
// (tests/data/models) scored and greedily continued through the engine on the GPU, against
// transformers' fp32 log-probs and greedy tokens. The GPU computes in bf16/fp16, so
// log-probs agree to bf16 tolerance and greedy tokens where transformers' top-2 margin is
// not a near tie.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "engine/kv_cache.h"
#include "model/presets.h"
#include "gpu_test_util.h"
#include "qwenrt/engine.h"

namespace qwenrt::test {
namespace {

const char* const kFixtures[] = {"qwen2_gqa", "qwen2_tied", "qwen2_yarn", "qwen3_qknorm", "qwen3_yarn"};

nlohmann::json read_reference(const std::filesystem::path& dir) {
  std::ifstream in(dir / "reference.json");
  return nlohmann::json::parse(in);
}

struct ModelCase {
  const char* fixture;
  DType dtype;
  int max_batch_tokens;  // small values force chunked prompts over a cached prefix
};

class CudaModel : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    QWENRT_REQUIRE_GPU();
  }
};

std::vector<ModelCase> all_cases() {
  std::vector<ModelCase> cases;
  for (const char* fixture : kFixtures) {
    cases.push_back({fixture, DType::kBF16, 512});
    cases.push_back({fixture, DType::kF16, 512});
    cases.push_back({fixture, DType::kBF16, 7});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModel, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<ModelCase>& p) {
                           return std::string(p.param.fixture) + "_" + dtype_name(p.param.dtype) +
                                  "_chunk" + std::to_string(p.param.max_batch_tokens);
                         });

TEST_P(CudaModel, ScoreAndGreedyMatchTransformers) {
  const ModelCase& mc = GetParam();
  const std::filesystem::path dir = std::filesystem::path(QWENRT_TEST_DATA) / "models" / mc.fixture;
  const nlohmann::json ref = read_reference(dir);
  EngineOptions options;
  options.device = "cuda";
  options.dtype = mc.dtype;
  options.max_context = 256;
  options.max_batch_tokens = mc.max_batch_tokens;
  options.max_logit_rows = 64;
  Engine engine(dir, options);

  const std::vector<int32_t> ids = ref["score_ids"].get<std::vector<int32_t>>();
  const std::vector<double> want = ref["logprobs"].get<std::vector<double>>();
  const ScoreResult score = engine.score(ids);
  ASSERT_EQ(score.logprobs.size(), want.size());
  double max_diff = 0, sum_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(score.logprobs[i])) << "position " << i;
    const double diff = std::fabs(score.logprobs[i] - want[i]);
    max_diff = std::max(max_diff, diff);
    sum_diff += diff;
  }
  const double mean_diff = sum_diff / static_cast<double>(want.size());
  std::printf("[ %s %s chunk %d ] log-prob |diff| mean %.4f max %.4f (nll %.4f vs %.4f)\n",
              mc.fixture, dtype_name(mc.dtype), mc.max_batch_tokens, mean_diff, max_diff,
              score.nll_mean, ref["nll_mean"].get<double>());
  // Activations rounded to bf16 (8 significant bits) or fp16 (11) at every op: the log-prob
  // error grows with the logits' spread, which the NLL measures (these random models have
  // NLLs of 6 to 20 nats). Measured on an H200: bf16 mean/NLL <= 0.95%, max/NLL <= 4.3%;
  // fp16 about 8x smaller.
  const double nll = std::max(ref["nll_mean"].get<double>(), 1.0);
  const bool bf16 = mc.dtype == DType::kBF16;
  EXPECT_LT(mean_diff, (bf16 ? 0.015 : 0.002) * nll);
  EXPECT_LT(max_diff, (bf16 ? 0.06 : 0.008) * nll);

  for (const auto& g : ref["greedy"]) {
    GenerateOptions gen;
    gen.max_new_tokens = g["max_new_tokens"].get<int>();
    gen.stop_at_eos = false;
    const std::vector<int32_t> expected = g["generated"].get<std::vector<int32_t>>();
    const GenerateResult result = engine.generate(g["prompt"].get<std::vector<int32_t>>(), gen);
    size_t agree = 0;
    while (agree < expected.size() && agree < result.ids.size() && expected[agree] == result.ids[agree]) ++agree;
    const double margin = g["min_top2_margin"].get<double>();
    std::printf("[ %s %s ] greedy: %zu of %zu tokens agree (transformers' min top-2 margin %.3f)\n",
                mc.fixture, dtype_name(mc.dtype), agree, expected.size(), margin);
    EXPECT_GE(agree, 1u) << "the first greedy token differs";
    // A top-2 margin above twice the log-prob error cannot flip.
    if (margin > 2 * max_diff) {
      EXPECT_EQ(agree, expected.size());
    }
  }
}

// A decode step replayed from its recording runs the same kernels on the same data as one
// launched op by op: the tokens are identical, over contexts that cross KV blocks.
TEST_P(CudaModel, RecordedDecodeMatchesDirectLaunches) {
  const ModelCase& mc = GetParam();
  const std::filesystem::path dir = std::filesystem::path(QWENRT_TEST_DATA) / "models" / mc.fixture;
  EngineOptions options;
  options.device = "cuda";
  options.dtype = mc.dtype;
  options.max_context = 256;
  options.max_batch_tokens = mc.max_batch_tokens;
  const int vocab = load_model_config(dir).vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back((i * 37 + 5) % vocab);
  GenerateOptions gen;
  gen.max_new_tokens = 40;
  gen.stop_at_eos = false;
  std::vector<int32_t> direct, recorded;
  {
    options.record_decode = false;
    Engine engine(dir, options);
    direct = engine.generate(prompt, gen).ids;
  }
  {
    options.record_decode = true;
    Engine engine(dir, options);
    recorded = engine.generate(prompt, gen).ids;
    EXPECT_EQ(engine.generate(prompt, gen).ids, recorded) << "a second replay differs";
  }
  ASSERT_EQ(direct.size(), 40u);
  EXPECT_EQ(recorded, direct);
}

// Chained launches (each kernel may start while the one before it ends) change when a
// kernel starts, never what it computes. Two small models cut to three layers (random
// weights): head sizes 64 and 128 take the tensor-core decode attention (whose splits that
// end before the new token start their K/V loads before the wait), its combine and the
// vector epilogue, and the wide products the four-feature blocks; the shallow form lets the
// next kernel start after the wait, and after the stream in the products of 8 MiB or more
// (gate|up, lm_head). The same tokens with deep, shallow and no chains, op by op (the
// setting is read at every launch), and from recorded steps (recorded with the model's
// setting: deep for the 0.5B, shallow for Qwen3-0.6B).
TEST(CudaChainedLaunches, ChangeNoTokenAtTheSmallModelsShapes) {
  QWENRT_REQUIRE_GPU();
  if (std::getenv("QWENRT_CHAINED_LAUNCHES") != nullptr) {
    GTEST_SKIP() << "QWENRT_CHAINED_LAUNCHES is set: every run would launch alike";
  }
  const GpuRuntimeInfo gpus = query_gpus();
  if (gpus.devices.empty() || gpus.devices[0].compute_major < 9) {
    GTEST_SKIP() << "chained launches need compute capability 9.0 or later";
  }
  for (const char* preset : {"qwen2.5-0.5b", "qwen3-0.6b"}) {
    SCOPED_TRACE(preset);
    ModelConfig config = synthetic_config(preset);
    config.num_layers = 3;
    config.layer_sliding_window.assign(3, 0);
    EngineOptions options;
    options.device = "cuda";
    options.dtype = DType::kBF16;
    options.max_context = 512;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 45; ++i) prompt.push_back((i * 7919 + 13) % config.vocab_size);
    GenerateOptions gen;
    gen.max_new_tokens = 40;  // the context crosses KV blocks and a split boundary
    gen.stop_at_eos = false;
    options.record_decode = false;
    Engine engine(config, options, 11);
    engine.backend().set_chained_launches(ChainedLaunches::kDeep);
    const std::vector<int32_t> deep = engine.generate(prompt, gen).ids;
    engine.backend().set_chained_launches(ChainedLaunches::kShallow);
    const std::vector<int32_t> shallow = engine.generate(prompt, gen).ids;
    engine.backend().set_chained_launches(ChainedLaunches::kOff);
    const std::vector<int32_t> plain = engine.generate(prompt, gen).ids;
    ASSERT_EQ(plain.size(), 40u);
    EXPECT_EQ(deep, plain) << "deep chains";
    EXPECT_EQ(shallow, plain) << "shallow chains";
    options.record_decode = true;
    Engine recording(config, options, 11);
    EXPECT_EQ(recording.generate(prompt, gen).ids, plain) << "recorded steps";
  }
}

// Generation issues the step a token feeds before that token is read back (the draw left on
// the device, its ids coming back on a ticket), so a token that ends it (a stop id, a
// cancel, a throwing callback) has a step behind it that must be undone: its draw dropped,
// its cache position given back. The session then holds the prompt and the tokens fed
// before the last one, and a follow-up turn reuses all of them. Its tokens are compared with
// the same turn on a session fed the same tokens by a generation that ended on its length
// (no step ahead to undo), not with a run from scratch: that would compute the cached
// positions in one prefill product instead of one-row decode steps, which round differently
// in bf16/fp16, and these random models have top-2 margins down to 0.004 nats. The same
// kernels on the same tokens give the same ids, exactly; the run from scratch is reported.
TEST_P(CudaModel, StopAndCancelLeaveTheSessionAsFed) {
  const ModelCase& mc = GetParam();
  const std::filesystem::path dir = std::filesystem::path(QWENRT_TEST_DATA) / "models" / mc.fixture;
  const nlohmann::json ref = read_reference(dir);
  EngineOptions options;
  options.device = "cuda";
  options.dtype = mc.dtype;
  options.max_context = 256;
  options.max_batch_tokens = mc.max_batch_tokens;
  Engine engine(dir, options);
  const std::vector<int32_t> prompt = ref["greedy"][0]["prompt"].get<std::vector<int32_t>>();
  const int p = static_cast<int>(prompt.size());
  ASSERT_GE(p, 3);
  GenerateOptions generate;
  generate.max_new_tokens = 12;
  generate.stop_at_eos = false;
  const std::vector<int32_t> free_run = engine.generate(prompt, generate).ids;
  ASSERT_EQ(free_run.size(), 12u);
  const auto first_of_free_run = [&](size_t n) {
    return std::vector<int32_t>(free_run.begin(), free_run.begin() + static_cast<long>(n));
  };

  // `follow` on `session`, which must hold the prompt and the first `fed` tokens of the free
  // run, against the same turn on a session that a length-limited generation left so.
  const auto expect_follow_up = [&](Session& session, int fed, const std::vector<int32_t>& follow,
                                    const char* what) {
    SCOPED_TRACE(what);
    std::unique_ptr<Session> reference = engine.new_session();
    GenerateOptions shorter = generate;
    shorter.max_new_tokens = fed + 1;
    const GenerateResult fed_run = engine.generate(*reference, prompt, shorter);
    ASSERT_EQ(fed_run.finish_reason, "length");
    ASSERT_EQ(fed_run.ids, first_of_free_run(static_cast<size_t>(fed) + 1));
    ASSERT_EQ(reference->cached_tokens(), p + fed);

    const GenerateResult next = engine.generate(session, follow, generate);
    const GenerateResult want = engine.generate(*reference, follow, generate);
    EXPECT_EQ(next.reused_tokens, p + fed);
    EXPECT_EQ(want.reused_tokens, p + fed);
    ASSERT_EQ(want.ids.size(), 12u);
    EXPECT_EQ(next.ids, want.ids);

    const std::vector<int32_t> scratch = engine.generate(follow, generate).ids;
    size_t agree = 0;
    while (agree < scratch.size() && agree < next.ids.size() && scratch[agree] == next.ids[agree]) ++agree;
    std::printf("[ %s %s chunk %d ] after %s: %zu of %zu tokens agree with a run from scratch\n", mc.fixture,
                dtype_name(mc.dtype), mc.max_batch_tokens, what, agree, scratch.size());
  };

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
  const GenerateResult stopped = engine.generate(*session, prompt, stopping);
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.ids, first_of_free_run(stop_at + 1));
  EXPECT_EQ(session->cached_tokens(), p + static_cast<int>(stop_at));
  std::vector<int32_t> follow = prompt;
  follow.insert(follow.end(), stopped.ids.begin(), stopped.ids.end());
  follow.insert(follow.end(), prompt.begin(), prompt.begin() + 3);
  expect_follow_up(*session, static_cast<int>(stop_at), follow, "a stop id");

  // A cancel after the second token.
  session->reset();
  int seen = 0;
  const GenerateResult cancelled =
      engine.generate(*session, prompt, generate, [&](int32_t) { return ++seen < 2; });
  EXPECT_EQ(cancelled.finish_reason, "cancelled");
  EXPECT_EQ(cancelled.ids, first_of_free_run(2));
  EXPECT_EQ(session->cached_tokens(), p + 1);
  follow.assign(prompt.begin(), prompt.end());
  follow.insert(follow.end(), cancelled.ids.begin(), cancelled.ids.end());
  expect_follow_up(*session, 1, follow, "a cancel");

  // A callback that throws at the third token: the error comes out, the session holds what
  // was fed before it.
  session->reset();
  seen = 0;
  EXPECT_THROW(engine.generate(*session, prompt, generate,
                               [&](int32_t) -> bool {
                                 if (++seen == 3) throw std::runtime_error("the reader went away");
                                 return true;
                               }),
               std::runtime_error);
  EXPECT_EQ(session->cached_tokens(), p + 2);
  follow.assign(prompt.begin(), prompt.end());
  follow.insert(follow.end(), free_run.begin(), free_run.begin() + 3);
  expect_follow_up(*session, 2, follow, "a throwing callback");
}

// Sampling with every parameter through the engine: runs, stays in the vocabulary, and is
// reproducible for a fixed seed.
TEST(CudaModelSampling, SeededSamplingWithPenaltiesIsReproducible) {
  QWENRT_REQUIRE_GPU();
  const std::filesystem::path dir = std::filesystem::path(QWENRT_TEST_DATA) / "models" / "qwen2_gqa";
  EngineOptions options;
  options.device = "cuda";
  options.max_context = 128;
  Engine engine(dir, options);
  GenerateOptions gen;
  gen.max_new_tokens = 20;
  gen.stop_at_eos = false;
  gen.sampling.temperature = 0.8f;
  gen.sampling.top_k = 30;
  gen.sampling.top_p = 0.9f;
  gen.sampling.min_p = 0.01f;
  gen.sampling.repetition_penalty = 1.2f;
  gen.sampling.presence_penalty = 0.3f;
  gen.sampling.frequency_penalty = 0.1f;
  gen.sampling.seed = 42;
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  const GenerateResult a = engine.generate(prompt, gen);
  const GenerateResult b = engine.generate(prompt, gen);
  ASSERT_EQ(a.ids.size(), 20u);
  EXPECT_EQ(a.ids, b.ids);
  for (int32_t id : a.ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, engine.config().vocab_size);
  }
}

// generate keeps the penalties' history on the device (each fed token copied there, the
// next step issued before the token is read); the batched step uploads it from the host for
// every token. The same seeded draws on the same logits: the same tokens.
TEST(CudaModelSampling, GenerateWithPenaltiesEqualsTheBatchedStep) {
  QWENRT_REQUIRE_GPU();
  const std::filesystem::path dir = std::filesystem::path(QWENRT_TEST_DATA) / "models" / "qwen2_gqa";
  EngineOptions options;
  options.device = "cuda";
  options.max_context = 128;
  Engine engine(dir, options);
  GenerateOptions gen;
  gen.max_new_tokens = 40;
  gen.stop_at_eos = false;
  gen.sampling.temperature = 0.9f;
  gen.sampling.top_k = 20;
  gen.sampling.repetition_penalty = 1.5f;
  gen.sampling.frequency_penalty = 0.4f;
  gen.sampling.seed = 11;
  const std::vector<int32_t> prompt = {5, 9, 5, 9, 5, 9, 7};
  const GenerateResult generated = engine.generate(prompt, gen);

  std::unique_ptr<SequenceBlocks> sequence = engine.new_sequence();
  ASSERT_TRUE(sequence->reserve(static_cast<int>(prompt.size()) + gen.max_new_tokens));
  const SampleRow row{gen.sampling, 0, 0};
  std::vector<int32_t> history = prompt, out, stepped;
  StepInput first{sequence.get(), prompt, true, row, history};
  engine.step(std::span<const StepInput>(&first, 1), out);
  stepped.push_back(out[0]);
  while (static_cast<int>(stepped.size()) < gen.max_new_tokens) {
    history.push_back(stepped.back());
    StepInput next{sequence.get(), std::span<const int32_t>(&history.back(), 1), true, row, history};
    engine.step(std::span<const StepInput>(&next, 1), out);
    stepped.push_back(out[0]);
  }
  EXPECT_EQ(generated.ids, stepped);
}

}  // namespace
}  // namespace qwenrt::test
