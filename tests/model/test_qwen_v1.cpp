// The original Qwen (QWenLMHeadModel): two tiny checkpoints in the released layout whose
// goldens were computed in fp32 by Qwen's own modeling_qwen.py. qwen1-a has seq_length 64
// with dynamic NTK and logn on, and sequences past 64 tokens; qwen1-b-no-ntk has both off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "../unit/test_util.h"
#include "backend/backend.h"
#include "core/error.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "qwen_v1_batch.h"
#include "qwenrt/engine.h"

namespace qwenrt {
namespace {

namespace fs = std::filesystem;

constexpr double kLogprobTolerance = 1e-3;  // absolute, as the acceptance criterion

fs::path v1_dir(const std::string& name) {
  return fs::path(QWENRT_TEST_DATA) / "qwen1" / name;
}

nlohmann::json load_golden(const fs::path& dir) {
  std::ifstream in(dir / "golden.json");
  return nlohmann::json::parse(in);
}

EngineOptions cpu_options() {
  EngineOptions options;
  options.device = "cpu";
  options.threads = 2;
  options.max_context = 512;
  return options;
}

class QwenV1Model : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return v1_dir(GetParam()); }
};

// Every score sequence within kLogprobTolerance of the goldens; returns the largest difference.
double expect_scores_match(Engine& engine, const nlohmann::json& golden) {
  EXPECT_FALSE(golden["score"].empty());
  double worst = 0;
  for (const auto& item : golden["score"]) {
    const auto ids = item["ids"].get<std::vector<int32_t>>();
    const auto expected = item["logprobs"].get<std::vector<double>>();
    ScoreResult result = engine.score(ids);
    EXPECT_EQ(result.logprobs.size(), expected.size());
    for (size_t i = 0; i < expected.size() && i < result.logprobs.size(); ++i) {
      worst = std::max(worst, std::abs(result.logprobs[i] - expected[i]));
      EXPECT_NEAR(result.logprobs[i], expected[i], kLogprobTolerance)
          << ids.size() << "-token sequence, position " << i + 1;
    }
  }
  return worst;
}

// Every greedy continuation identical to the goldens (made through the original's KV cache).
void expect_greedy_match(Engine& engine, const nlohmann::json& golden) {
  EXPECT_FALSE(golden["greedy"].empty());
  for (const auto& item : golden["greedy"]) {
    const auto prompt = item["prompt"].get<std::vector<int32_t>>();
    const auto expected = item["greedy"].get<std::vector<int32_t>>();
    GenerateOptions generate;
    generate.max_new_tokens = static_cast<int>(expected.size());
    EXPECT_EQ(engine.generate(prompt, generate).ids, expected)
        << "prompt of " << prompt.size() << " tokens";
  }
}

TEST_P(QwenV1Model, ScoreAndGreedyMatchOriginalCode) {
  const auto golden = load_golden(dir());
  Engine engine(dir(), cpu_options());
  RecordProperty("max_abs_logprob_diff", std::to_string(expect_scores_match(engine, golden)));
  expect_greedy_match(engine, golden);
}

// Prefill in chunks of 7 tokens: every chunk must use the alpha of the whole prompt (a chunk's
// own length would give a different RoPE base and other tokens).
TEST_P(QwenV1Model, ChunkedPrefillKeepsTheWholePromptsAlpha) {
  const auto golden = load_golden(dir());
  EngineOptions small = cpu_options();
  small.max_batch_tokens = 7;
  small.max_logit_rows = 7;
  Engine engine(dir(), small);
  expect_greedy_match(engine, golden);
  expect_scores_match(engine, golden);
}

// The released 7B/14B/72B folders are sharded with model.safetensors.index.json: the same
// tensors in three shards give the same numbers.
TEST_P(QwenV1Model, ShardedFolderMatchesOriginalCode) {
  ModelFiles single(dir());
  std::vector<test::TensorSpec> tensors;
  for (const std::string& name : single.names()) {
    const SafetensorsTensor* tensor = single.find(name);
    tensors.push_back(
        {name, tensor->dtype_name, tensor->shape,
         std::string(reinterpret_cast<const char*>(tensor->data), tensor->byte_size)});
  }
  test::TempDir sharded;
  std::ifstream in(dir() / "config.json");
  test::write_model(sharded.path(), nlohmann::json::parse(in), tensors, /*shards=*/3);
  ASSERT_TRUE(fs::exists(sharded.path() / "model.safetensors.index.json"));
  Engine engine(sharded.path(), cpu_options());
  const auto golden = load_golden(dir());
  expect_scores_match(engine, golden);
  expect_greedy_match(engine, golden);
}

INSTANTIATE_TEST_SUITE_P(Folders, QwenV1Model, ::testing::Values("qwen1-a", "qwen1-b-no-ntk"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(QwenV1, ConfigFieldsAsReleased) {
  ModelConfig config = load_model_config(v1_dir("qwen1-a"));
  EXPECT_EQ(config.architecture, Architecture::kQwenV1);
  EXPECT_EQ(config.head_dim, 16);
  EXPECT_EQ(config.num_kv_heads, 4);
  EXPECT_EQ(config.intermediate_size, 128);  // half of config.json's 256
  EXPECT_EQ(config.seq_length, 64);
  EXPECT_TRUE(config.use_dynamic_ntk);
  EXPECT_TRUE(config.use_logn_attn);
  EXPECT_TRUE(config.attention_bias);
  EXPECT_FALSE(config.qk_norm);
  EXPECT_EQ(config.chat_format, "raw");
  // The original's alpha: max(2^ceil(log2(L / 64) + 1) - 1, 1) = 2^(index + 1) - 1.
  EXPECT_EQ(ntk_alpha_index(config, 1), 0);
  EXPECT_EQ(ntk_alpha_index(config, 64), 0);
  EXPECT_EQ(ntk_alpha_index(config, 65), 1);   // alpha 3
  EXPECT_EQ(ntk_alpha_index(config, 128), 1);  // log2(2) + 1 = 2 exactly: alpha 3
  EXPECT_EQ(ntk_alpha_index(config, 129), 2);  // alpha 7
  EXPECT_EQ(ntk_alpha_index(config, 200), 2);
  EXPECT_EQ(ntk_alpha_index(config, 257), 3);  // alpha 15
  ModelConfig plain = load_model_config(v1_dir("qwen1-b-no-ntk"));
  EXPECT_FALSE(plain.use_logn_attn);
  EXPECT_EQ(ntk_alpha_index(plain, 1000), 0);

  // Qwen-7B's config.json and generation_config.json as released.
  auto read = [](const std::string& name) {
    std::ifstream in(fs::path(QWENRT_TEST_DATA) / "qwen1" / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string generation = read("Qwen-7B.generation_config.json");
  ModelConfig qwen7b = parse_model_config(read("Qwen-7B.config.json"), "config.json", &generation);
  EXPECT_EQ(qwen7b.hidden_size, 4096);
  EXPECT_EQ(qwen7b.num_heads, 32);
  EXPECT_EQ(qwen7b.head_dim, 128);
  EXPECT_EQ(qwen7b.intermediate_size, 11008);
  EXPECT_EQ(qwen7b.seq_length, 8192);
  EXPECT_EQ(qwen7b.vocab_size, 151936);
  EXPECT_EQ(qwen7b.eos_token_ids, std::vector<int>{151643});
  EXPECT_EQ(qwen7b.chat_format, "raw");
  EXPECT_TRUE(qwen7b.stop_words_ids.empty());  // [[151643]]: the end-of-text id alone
  EXPECT_FALSE(qwen7b.tie_word_embeddings);
  EXPECT_EQ(model_context_limit(qwen7b), kLognMaxContext);  // max_position_embeddings is 32768
}

TEST(QwenV1, LognScaleAsTheOriginalTable) {
  EXPECT_EQ(logn_scale(0, 5000), 1.f);  // off
  EXPECT_EQ(logn_scale(64, 63), 1.f);   // p + 1 = 64 is not past seq_length
  EXPECT_FLOAT_EQ(logn_scale(64, 64), static_cast<float>(std::log(65.0) / std::log(64.0)));
  EXPECT_FLOAT_EQ(logn_scale(8192, 32766),
                  static_cast<float>(std::log(32767.0) / std::log(8192.0)));
}

TEST(QwenV1, ContextIsCappedAtTheLognTable) {
  EngineOptions options = cpu_options();
  options.max_context = kLognMaxContext + 1;
  try {
    Engine engine(v1_dir("qwen1-a"), options);
    ADD_FAILURE() << "a context past the logn table was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("32767"), std::string::npos) << e.what();
  }
}

// A Session must not reuse keys computed under another alpha: a prompt that crosses
// seq_length recomputes the cached turn, and the answers equal those of fresh runs.
TEST(QwenV1, SessionRecomputesWhenTheAlphaChanges) {
  const auto golden = load_golden(v1_dir("qwen1-a"));
  Engine engine(v1_dir("qwen1-a"), cpu_options());
  const auto long_prompt = golden["greedy"][1]["prompt"].get<std::vector<int32_t>>();
  const auto expected = golden["greedy"][1]["greedy"].get<std::vector<int32_t>>();
  ASSERT_GT(long_prompt.size(), 64u);
  std::unique_ptr<Session> session = engine.new_session();
  GenerateOptions one;
  one.max_new_tokens = 1;
  // 40 tokens: alpha 1. Then the 120-token prompt that starts with them: alpha 3.
  engine.generate(*session, {long_prompt.begin(), long_prompt.begin() + 40}, one);
  GenerateOptions generate;
  generate.max_new_tokens = static_cast<int>(expected.size());
  GenerateResult result = engine.generate(*session, long_prompt, generate);
  EXPECT_EQ(result.reused_tokens, 0);
  EXPECT_EQ(result.ids, expected);
  // The same alpha again: the cache is reused.
  GenerateResult again = engine.generate(*session, long_prompt, generate);
  EXPECT_EQ(again.reused_tokens, static_cast<int>(long_prompt.size()) - 1);
  EXPECT_EQ(again.ids, expected);
}

// One forward pass over sequences with different alphas gives each sequence the logits it
// gets alone: the alpha travels with each sequence, not with the model.
TEST(QwenV1, BatchMixesAlphas) {
  const auto golden = load_golden(v1_dir("qwen1-a"));
  const auto long_ids = golden["score"][1]["ids"].get<std::vector<int32_t>>();  // 200: alpha 7
  const auto short_ids = golden["score"][0]["ids"].get<std::vector<int32_t>>();
  std::unique_ptr<Backend> backend = make_cpu_backend(2);
  const test::MixedAlphaResult result =
      test::mixed_alpha_batch(*backend, v1_dir("qwen1-a"), long_ids, 2, short_ids);
  EXPECT_LT(result.first_diff, 1e-5);
  EXPECT_LT(result.second_diff, 1e-5);
  EXPECT_GT(result.alpha_effect, 0.1);  // the alpha does change the result (0.55 measured)
}

// A copy of qwen1-a with config.json edited; the error must be one line naming the file.
void expect_folder_error(const std::function<void(nlohmann::json&)>& edit,
                         const std::string& needle) {
  test::TempDir dir;
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
    fs::copy_file(v1_dir("qwen1-a") / name, dir.path() / name);
  }
  std::ifstream in(v1_dir("qwen1-a") / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  edit(config);
  fs::permissions(dir.path() / "config.json", fs::perms::owner_all, fs::perm_options::add);
  test::write_file(dir.path() / "config.json", config.dump(2));
  try {
    Engine engine(dir.path(), cpu_options());
    ADD_FAILURE() << "accepted a folder with " << needle;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find((dir.path() / "config.json").string()), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// no_bias false: the attention output and the MLP's three products carry biases. No release
// has them, so there is no golden from the original code: zero biases must give the released
// numbers exactly (every bias loaded, shaped and added, or the folder refused), a non-zero
// one must move them, and a folder without the biases is refused naming the tensor.
TEST(QwenV1, OutputAndMlpBiasesLoadAndApply) {
  ModelFiles single(v1_dir("qwen1-a"));
  std::ifstream in(v1_dir("qwen1-a") / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["no_bias"] = false;
  std::vector<test::TensorSpec> tensors;
  for (const std::string& name : single.names()) {
    const SafetensorsTensor* tensor = single.find(name);
    tensors.push_back({name, tensor->dtype_name, tensor->shape,
                       std::string(reinterpret_cast<const char*>(tensor->data), tensor->byte_size)});
  }
  const int64_t hidden = config["hidden_size"].get<int64_t>();
  const int64_t width = config["intermediate_size"].get<int64_t>() / 2;
  const int layers = config["num_hidden_layers"].get<int>();
  {
    test::TempDir missing;
    test::write_model(missing.path(), config, tensors, /*shards=*/1);
    try {
      Engine engine(missing.path(), cpu_options());
      ADD_FAILURE() << "accepted no_bias false without the biases";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("transformer.h.0.attn.c_proj.bias"), std::string::npos) << e.what();
    }
  }
  auto bf16_values = [](int64_t count, float value) {
    std::string bytes(static_cast<size_t>(count) * 2, '\0');
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    const uint16_t half = static_cast<uint16_t>(bits >> 16);
    for (int64_t i = 0; i < count; ++i) std::memcpy(&bytes[static_cast<size_t>(i) * 2], &half, 2);
    return bytes;
  };
  auto with_biases = [&](float up_bias_layer0) {
    std::vector<test::TensorSpec> all = tensors;
    for (int layer = 0; layer < layers; ++layer) {
      const std::string prefix = "transformer.h." + std::to_string(layer) + ".";
      all.push_back({prefix + "attn.c_proj.bias", "BF16", {hidden}, bf16_values(hidden, 0.f)});
      all.push_back({prefix + "mlp.w2.bias", "BF16", {width}, bf16_values(width, 0.f)});
      all.push_back({prefix + "mlp.w1.bias", "BF16", {width}, bf16_values(width, layer == 0 ? up_bias_layer0 : 0.f)});
      all.push_back({prefix + "mlp.c_proj.bias", "BF16", {hidden}, bf16_values(hidden, 0.f)});
    }
    return all;
  };
  const auto golden = load_golden(v1_dir("qwen1-a"));
  {
    test::TempDir zero;
    test::write_model(zero.path(), config, with_biases(0.f), /*shards=*/1);
    Engine engine(zero.path(), cpu_options());
    expect_scores_match(engine, golden);
    expect_greedy_match(engine, golden);
  }
  test::TempDir moved;
  test::write_model(moved.path(), config, with_biases(0.5f), /*shards=*/1);
  Engine engine(moved.path(), cpu_options());
  const auto& first = golden["score"][0];
  const ScoreResult score = engine.score(first["ids"].get<std::vector<int32_t>>());
  const std::vector<double> want = first["logprobs"].get<std::vector<double>>();
  double max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) max_diff = std::max(max_diff, std::fabs(score.logprobs[i] - want[i]));
  EXPECT_GT(max_diff, 1e-2) << "a 0.5 bias on layer 0's up projection changed nothing";
}

// A copy of qwen1-a whose generation_config.json carries `extra` (eos_token_id, stop_words_ids).
void write_v1_folder(const fs::path& dir, const nlohmann::json& extra) {
  for (const char* name : {"config.json", "model.safetensors"}) fs::copy_file(v1_dir("qwen1-a") / name, dir / name);
  std::ifstream in(v1_dir("qwen1-a") / "generation_config.json");
  nlohmann::json generation = nlohmann::json::parse(in);
  generation.update(extra);
  test::write_file(dir / "generation_config.json", generation.dump());
}

// generation_config.json's stop_words_ids as the original's generate() applies them
// (StopWordsLogitsProcessor): once prompt and generated ids end with a word, the end-of-text
// id is forced next, which ends the generation; both stay in the ids, as transformers returns
// them. The expected ids are the golden continuation cut where the context first ends with
// a word.
TEST(QwenV1, StopWordsForceTheEndOfTextNext) {
  const auto golden = load_golden(v1_dir("qwen1-a"));
  const auto prompt = golden["greedy"][1]["prompt"].get<std::vector<int32_t>>();
  const auto greedy = golden["greedy"][1]["greedy"].get<std::vector<int32_t>>();
  constexpr int kEnd = 1000;  // not in the continuation
  ASSERT_EQ(std::find(greedy.begin(), greedy.end(), kEnd), greedy.end());
  const auto run = [&](const nlohmann::json& words, bool stop_at_eos = true) {
    test::TempDir dir;
    write_v1_folder(dir.path(), {{"eos_token_id", kEnd}, {"stop_words_ids", words}});
    Engine engine(dir.path(), cpu_options());
    GenerateOptions options;
    options.max_new_tokens = static_cast<int>(greedy.size());
    options.stop_at_eos = stop_at_eos;
    std::vector<int32_t> streamed;
    GenerateResult result = engine.generate(prompt, options, [&](int32_t id) {
      streamed.push_back(id);
      return true;
    });
    EXPECT_EQ(streamed, result.ids);
    return result;
  };
  const auto cut_after = [&](size_t count) {
    std::vector<int32_t> ids(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(count));
    ids.push_back(kEnd);
    return ids;
  };
  // [758, 482, 574] first ends the context at the continuation's fifth token.
  ASSERT_EQ(std::vector<int32_t>(greedy.begin() + 2, greedy.begin() + 5), (std::vector<int32_t>{758, 482, 574}));
  GenerateResult three = run({{758, 482, 574}, {999, 998}});
  EXPECT_EQ(three.ids, cut_after(5));
  EXPECT_EQ(three.finish_reason, "stop");
  // A one-token word: the first 387 (the sixth token).
  EXPECT_EQ(run({{387}}).ids, cut_after(6));
  // A word that spans the prompt's last token and the first generated one.
  EXPECT_EQ(run({{prompt.back(), 482}}).ids, cut_after(1));
  // A prompt that ends with a word: the end-of-text id comes first.
  GenerateResult first = run({{prompt[prompt.size() - 2], prompt.back()}});
  EXPECT_EQ(first.ids, std::vector<int32_t>{kEnd});
  EXPECT_EQ(first.finish_reason, "stop");
  // With the end-of-text ignored, the words are too. (A word of the end-of-text id alone is
  // left out at load: StopWordsAreChecked.)
  EXPECT_EQ(run({{758, 482, 574}}, /*stop_at_eos=*/false).ids, greedy);
}

// After a forced end-of-text, the session's cache is as its ids say: the next turn on it
// gives what a fresh session gives.
TEST(QwenV1, SessionAfterAStopWordMatchesAFreshOne) {
  const auto golden = load_golden(v1_dir("qwen1-a"));
  // The short prompt: all turns stay under seq_length, so one NTK alpha and the cache is reused.
  const auto prompt = golden["greedy"][0]["prompt"].get<std::vector<int32_t>>();
  test::TempDir dir;
  write_v1_folder(dir.path(), {{"eos_token_id", 1000}, {"stop_words_ids", {{725, 707}}}});
  Engine engine(dir.path(), cpu_options());
  GenerateOptions options;
  options.max_new_tokens = 12;
  std::unique_ptr<Session> session = engine.new_session();
  const GenerateResult first = engine.generate(*session, prompt, options);
  ASSERT_EQ(first.ids, (std::vector<int32_t>{95, 95, 95, 95, 725, 707, 1000}));
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.ids.begin(), first.ids.end());
  next.insert(next.end(), {5, 6, 7});
  const GenerateResult again = engine.generate(*session, next, options);
  EXPECT_GT(again.reused_tokens, static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(again.ids, engine.generate(next, options).ids);
}

TEST(QwenV1, StopWordsAreChecked) {
  ModelConfig config = load_model_config(v1_dir("qwen1-a"));
  EXPECT_TRUE(config.stop_words_ids.empty());
  const auto expect_refused = [](const nlohmann::json& extra, const std::string& needle) {
    test::TempDir dir;
    write_v1_folder(dir.path(), extra);
    try {
      load_model_config(dir.path());
      ADD_FAILURE() << "accepted " << extra.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("generation_config.json"), std::string::npos) << e.what();
    }
  };
  expect_refused({{"eos_token_id", 5}, {"stop_words_ids", {1, 2}}}, "list of non-empty lists");
  expect_refused({{"eos_token_id", 5}, {"stop_words_ids", {nlohmann::json::array()}}}, "list of non-empty lists");
  expect_refused({{"eos_token_id", 5}, {"stop_words_ids", {{1, 1024}}}}, "below vocab_size 1024 (got 1024)");
  expect_refused({{"eos_token_id", 5}, {"stop_words_ids", {{-1}}}}, "(got -1)");
  expect_refused({{"stop_words_ids", {{3}}}}, "needs an 'eos_token_id'");
  test::TempDir dir;
  write_v1_folder(dir.path(), {{"eos_token_id", 5}, {"stop_words_ids", {{5}, {7, 8}}}});
  EXPECT_EQ(load_model_config(dir.path()).stop_words_ids, (std::vector<std::vector<int>>{{7, 8}}));
}

TEST(QwenV1, BadFoldersGiveOneLineErrors) {
  expect_folder_error([](auto& c) { c["rotary_pct"] = 0.5; }, "rotary_pct");
  expect_folder_error([](auto& c) { c["kv_channels"] = 8; }, "kv_channels");
  expect_folder_error([](auto& c) { c.erase("kv_channels"); }, "kv_channels");
  expect_folder_error([](auto& c) { c["intermediate_size"] = 255; }, "intermediate_size");
  expect_folder_error([](auto& c) { c["bf16"] = true, c["fp16"] = true; }, "bf16");
  expect_folder_error([](auto& c) { c["seq_length"] = 0; }, "seq_length");
  // Tensors checked against the config: a config with another width no longer matches.
  test::TempDir dir;
  for (const char* name : {"config.json", "model.safetensors"})
    fs::copy_file(v1_dir("qwen1-a") / name, dir.path() / name);
  std::ifstream in(v1_dir("qwen1-a") / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["intermediate_size"] = 512;
  fs::permissions(dir.path() / "config.json", fs::perms::owner_all, fs::perm_options::add);
  test::write_file(dir.path() / "config.json", config.dump());
  try {
    Engine engine(dir.path(), cpu_options());
    ADD_FAILURE() << "accepted mismatched MLP weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transformer.h.0.mlp.w2.weight"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qwenrt
