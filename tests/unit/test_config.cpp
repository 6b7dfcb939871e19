// config.json parsing: both RoPE spellings, head_dim defaults, EOS sources, sliding windows,
// every rejection of QWEN.md §Loader, and the RoPE tables against an independent
// double-precision derivation of the published formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/sampler.h"
#include "model/config.h"
#include "test_util.h"

namespace qwenrt {
namespace {

using test::expect_error;
using test::json;
using test::TempDir;
using test::write_file;

constexpr const char* kSource = "config.json";

ModelConfig parse(const json& config) {
  return parse_model_config(config.dump(), kSource);
}

json qwen2_config() {
  return test::tiny_qwen2_config();
}

json qwen3_config() {
  json config = test::tiny_qwen2_config();
  config["architectures"] = {"Qwen3ForCausalLM"};
  config["head_dim"] = 16;  // independent of hidden / heads, as in Qwen3
  return config;
}

void expect_config_error(const json& config, ErrorCategory category,
                         const std::vector<std::string>& keywords) {
  std::vector<std::string> needles = keywords;
  needles.push_back(kSource);
  expect_error([&] { parse(config); }, category, needles);
}

TEST(Config, ParsesQwen2) {
  ModelConfig config = parse(qwen2_config());
  EXPECT_EQ(config.architecture, Architecture::kQwen2);
  EXPECT_EQ(config.hidden_size, 8);
  EXPECT_EQ(config.intermediate_size, 12);
  EXPECT_EQ(config.num_layers, 2);
  EXPECT_EQ(config.num_heads, 2);
  EXPECT_EQ(config.num_kv_heads, 1);
  EXPECT_EQ(config.head_dim, 4);  // hidden / heads
  EXPECT_EQ(config.vocab_size, 16);
  EXPECT_EQ(config.dtype, DType::kF32);
  EXPECT_TRUE(config.attention_bias);  // Qwen2's q/k/v always carry a bias
  EXPECT_FALSE(config.qk_norm);
  EXPECT_FALSE(config.tie_word_embeddings);
  EXPECT_EQ(config.bos_token_id, 14);
  EXPECT_EQ(config.eos_token_ids, std::vector<int>{15});
  EXPECT_EQ(config.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(config.rope.theta, 10000.0);
  EXPECT_EQ(config.layer_sliding_window, (std::vector<int>{0, 0}));
}

TEST(Config, RmsNormEpsIsRead) {
  json raw = qwen2_config();
  raw["rms_norm_eps"] = 1e-5;
  EXPECT_DOUBLE_EQ(parse(raw).rms_norm_eps, 1e-5);
}

TEST(Config, Qwen2HeadDimDefaultsToHiddenOverHeads) {
  json raw = qwen2_config();
  raw["hidden_size"] = 896;
  raw["num_attention_heads"] = 14;
  raw["num_key_value_heads"] = 2;
  EXPECT_EQ(parse(raw).head_dim, 64);
}

TEST(Config, Qwen3HeadDimExplicitOrDefault128) {
  ModelConfig explicit_dim = parse(qwen3_config());
  EXPECT_EQ(explicit_dim.architecture, Architecture::kQwen3);
  EXPECT_EQ(explicit_dim.head_dim, 16);
  EXPECT_EQ(explicit_dim.q_dim(), 32);
  EXPECT_EQ(explicit_dim.kv_dim(), 16);
  EXPECT_TRUE(explicit_dim.qk_norm);
  EXPECT_FALSE(explicit_dim.attention_bias);  // Qwen3: attention_bias false by default
  json raw = qwen3_config();
  raw.erase("head_dim");
  EXPECT_EQ(parse(raw).head_dim, 128);  // Qwen3Config's default, not hidden / heads (= 4)
  raw["attention_bias"] = true;
  EXPECT_TRUE(parse(raw).attention_bias);
}

TEST(Config, EosIntOrList) {
  json raw = qwen2_config();
  raw["eos_token_id"] = 13;
  EXPECT_EQ(parse(raw).eos_token_ids, std::vector<int>{13});
  raw["eos_token_id"] = {15, 13};
  EXPECT_EQ(parse(raw).eos_token_ids, (std::vector<int>{15, 13}));
  raw["eos_token_id"] = nullptr;
  EXPECT_TRUE(parse(raw).eos_token_ids.empty());
  raw["eos_token_id"] = "15";
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"eos_token_id"});
}

TEST(Config, GenerationConfigEosOverridesConfig) {
  json gen = {{"eos_token_id", {12, 13}},
              {"temperature", 0.7},
              {"top_p", 0.8},
              {"top_k", 20},
              {"repetition_penalty", 1.05}};
  std::string gen_text = gen.dump();
  ModelConfig config = parse_model_config(qwen2_config().dump(), kSource, &gen_text);
  EXPECT_EQ(config.eos_token_ids, (std::vector<int>{12, 13}));
  ASSERT_TRUE(config.default_temperature && config.default_top_p && config.default_top_k &&
              config.default_repetition_penalty);
  EXPECT_FLOAT_EQ(*config.default_temperature, 0.7f);
  EXPECT_FLOAT_EQ(*config.default_top_p, 0.8f);
  EXPECT_EQ(*config.default_top_k, 20);
  EXPECT_FLOAT_EQ(*config.default_repetition_penalty, 1.05f);
  // A generation config without EOS keeps config.json's.
  std::string no_eos = json{{"temperature", 1.0}}.dump();
  EXPECT_EQ(parse_model_config(qwen2_config().dump(), kSource, &no_eos).eos_token_ids,
            std::vector<int>{15});
}

TEST(Config, LoadFromFolderUsesGenerationConfig) {
  TempDir dir;
  write_file(dir / "config.json", qwen2_config().dump());
  EXPECT_EQ(load_model_config(dir.path()).eos_token_ids, std::vector<int>{15});
  write_file(dir / "generation_config.json", json{{"eos_token_id", 13}}.dump());
  EXPECT_EQ(load_model_config(dir.path()).eos_token_ids, std::vector<int>{13});
  // The generation config's own errors name that file, not config.json.
  write_file(dir / "generation_config.json", json{{"eos_token_id", 99}}.dump());
  expect_error([&] { load_model_config(dir.path()); }, ErrorCategory::kInvalidModel,
               {(dir / "generation_config.json").string(), "eos_token_id 99", "vocab_size"});
  write_file(dir / "generation_config.json", "{oops");
  expect_error([&] { load_model_config(dir.path()); }, ErrorCategory::kInvalidModel,
               {"generation_config.json", dir.path().string(), "not valid JSON"});
}

TEST(Config, RopeOlderSpellingYarn) {
  for (const char* key : {"type", "rope_type"}) {
    json raw = qwen2_config();
    raw["rope_theta"] = 1e6;
    raw["max_position_embeddings"] = 131072;
    raw["rope_scaling"] = {
        {key, "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
    ModelConfig config = parse(raw);
    EXPECT_EQ(config.rope.type, RopeType::kYarn) << key;
    EXPECT_DOUBLE_EQ(config.rope.theta, 1e6);
    EXPECT_DOUBLE_EQ(config.rope.factor, 4.0);
    EXPECT_EQ(config.rope.original_max_position_embeddings, 32768);
    EXPECT_DOUBLE_EQ(config.rope.beta_fast, 32.0);
    EXPECT_DOUBLE_EQ(config.rope.beta_slow, 1.0);
    EXPECT_FALSE(config.rope.attention_factor.has_value());
  }
}

TEST(Config, RopeNewerSpellingYarn) {
  json raw = qwen2_config();
  raw.erase("rope_theta");
  raw["max_position_embeddings"] = 131072;
  raw["rope_scaling"] = nullptr;  // transformers 5 may still write a null rope_scaling
  raw["rope_parameters"] = {{"rope_theta", 1e6},
                            {"rope_type", "yarn"},
                            {"factor", 4.0},
                            {"original_max_position_embeddings", 32768}};
  ModelConfig config = parse(raw);
  EXPECT_EQ(config.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(config.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(config.rope.factor, 4.0);
  EXPECT_EQ(config.rope.original_max_position_embeddings, 32768);
}

TEST(Config, RopeNewerSpellingDefault) {
  json raw = qwen2_config();
  raw.erase("rope_theta");
  raw["rope_parameters"] = {{"rope_theta", 5e5}, {"rope_type", "default"}};
  ModelConfig config = parse(raw);
  EXPECT_EQ(config.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(config.rope.theta, 5e5);
}

TEST(Config, RopeThetaDefaultsWhenAbsent) {
  json raw = qwen2_config();
  raw.erase("rope_theta");
  EXPECT_DOUBLE_EQ(parse(raw).rope.theta, 10000.0);
}

TEST(Config, RejectsUnsupportedRopeType) {
  json raw = qwen2_config();
  raw["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_config_error(raw, ErrorCategory::kUnsupported, {"dynamic", "yarn"});
  raw["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  expect_config_error(raw, ErrorCategory::kUnsupported, {"longrope"});
}

TEST(Config, RejectsBadRopeValues) {
  json raw = qwen2_config();
  raw["rope_theta"] = 0;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"rope_theta"});
  raw = qwen2_config();
  raw["rope_scaling"] = {
      {"type", "yarn"}, {"factor", -2.0}, {"original_max_position_embeddings", 32}};
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"factor"});
  raw["rope_scaling"] = "yarn";
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"rope_scaling"});
  // A scaling asked for but not said in full: refused, not run unscaled (transformers too).
  raw["rope_scaling"] = {{"type", "yarn"}, {"original_max_position_embeddings", 32}};
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"yarn RoPE needs a 'factor'"});
  raw.erase("rope_scaling");
  raw["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}};
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"rope_parameters", "'factor'"});
  raw["rope_parameters"] = {{"rope_theta", 1e6}, {"factor", 4.0}};
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"'factor' but no 'rope_type'"});
}

TEST(Config, SlidingWindowFromMaxWindowLayers) {
  json raw = qwen2_config();
  raw["num_hidden_layers"] = 4;
  raw["use_sliding_window"] = true;
  raw["sliding_window"] = 4096;
  raw["max_window_layers"] = 2;
  // Layer i slides only when i >= max_window_layers.
  EXPECT_EQ(parse(raw).layer_sliding_window, (std::vector<int>{0, 0, 4096, 4096}));
  raw["use_sliding_window"] = false;  // the official checkpoints' setting: window ignored
  EXPECT_EQ(parse(raw).layer_sliding_window, (std::vector<int>{0, 0, 0, 0}));
}

TEST(Config, SlidingWindowFromLayerTypes) {
  json raw = qwen2_config();
  raw["num_hidden_layers"] = 3;
  raw["use_sliding_window"] = true;
  raw["sliding_window"] = 128;
  raw["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  EXPECT_EQ(parse(raw).layer_sliding_window, (std::vector<int>{128, 0, 128}));
  raw["layer_types"] = {"full_attention", "full_attention"};  // wrong length
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"layer_types"});
  raw["layer_types"] = {"full_attention", "chunked_attention", "full_attention"};
  expect_config_error(raw, ErrorCategory::kUnsupported, {"chunked_attention"});
}

TEST(Config, RejectsZeroOrNegativeValues) {
  json raw = qwen2_config();
  raw["hidden_size"] = 0;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"hidden_size", "positive"});
  raw = qwen2_config();
  raw["num_attention_heads"] = -1;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"num_attention_heads", "-1"});
  raw = qwen2_config();
  raw["num_key_value_heads"] = 0;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"num_key_value_heads"});
  for (const char* key : {"intermediate_size", "num_hidden_layers", "vocab_size"}) {
    raw = qwen2_config();
    raw[key] = -3;
    expect_config_error(raw, ErrorCategory::kInvalidModel, {key});
  }
  raw = qwen2_config();
  raw["rms_norm_eps"] = 0;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"rms_norm_eps"});
  raw = qwen2_config();
  raw["max_position_embeddings"] = -5;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"max_position_embeddings"});
  raw = qwen3_config();
  raw["head_dim"] = 0;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"head_dim"});
}

TEST(Config, RejectsMissingOrMistypedField) {
  json raw = qwen2_config();
  raw.erase("hidden_size");
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"hidden_size", "missing"});
  raw = qwen2_config();
  raw["hidden_size"] = "8";
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"hidden_size", "integer"});
  raw = qwen2_config();
  raw["hidden_size"] = 8.5;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"hidden_size"});
  raw = qwen2_config();
  raw["hidden_size"] = int64_t{1} << 40;  // would wrap in an int
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"hidden_size"});
}

TEST(Config, RejectsHiddenNotDivisibleByHeadsWithoutHeadDim) {
  json raw = qwen2_config();
  raw["num_attention_heads"] = 3;
  raw["num_key_value_heads"] = 1;
  expect_config_error(raw, ErrorCategory::kInvalidModel,
                      {"hidden_size", "not divisible", "head_dim"});
  // With an explicit head_dim the division is not needed.
  raw["head_dim"] = 4;
  EXPECT_EQ(parse(raw).head_dim, 4);
}

TEST(Config, RejectsKvHeadsNotDividingHeads) {
  json raw = qwen2_config();
  raw["hidden_size"] = 12;
  raw["num_attention_heads"] = 3;
  raw["num_key_value_heads"] = 2;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"num_key_value_heads", "multiple"});
}

TEST(Config, RejectsOddHeadDim) {
  json raw = qwen2_config();
  raw["hidden_size"] = 6;
  raw["num_attention_heads"] = 2;
  raw["num_key_value_heads"] = 2;  // head_dim 3: RoPE needs pairs
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"head_dim", "even"});
  raw = qwen3_config();
  raw["head_dim"] = 7;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"head_dim", "even"});
}

TEST(Config, RejectsVocabSmallerThanSpecialIds) {
  json raw = qwen2_config();
  raw["eos_token_id"] = 16;  // vocab 16: ids 0..15
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"eos_token_id 16", "vocab_size"});
  raw["eos_token_id"] = {15, 151643};
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"eos_token_id 151643"});
  raw = qwen2_config();
  raw["bos_token_id"] = 16;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"bos_token_id 16", "vocab_size"});
  raw = qwen2_config();
  raw["eos_token_id"] = -2;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"eos_token_id"});
}

TEST(Config, RejectsUnsupportedArchitectures) {
  for (const char* name :
       {"Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "LlamaForCausalLM"}) {
    json raw = qwen2_config();
    raw["architectures"] = {name};
    // The message names the architecture found and the ones that are supported.
    expect_config_error(raw, ErrorCategory::kUnsupported,
                        {name, "Qwen2ForCausalLM", "Qwen3ForCausalLM"});
  }
  json raw = qwen2_config();
  raw.erase("architectures");
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"architectures"});
}

TEST(Config, RejectsSizesPastAnyModel) {
  // 89478486 heads of 24 would overflow an int's product; each size has a bound.
  json raw = qwen2_config();
  raw["num_attention_heads"] = 89478486;
  raw["num_key_value_heads"] = 89478486;
  raw["head_dim"] = 24;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"num_attention_heads is 89478486", "at most 4096"});
  raw = qwen2_config();
  raw["head_dim"] = 1 << 30;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"head_dim is 1073741824"});
  raw = qwen2_config();
  raw["num_hidden_layers"] = 1000000;
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"num_hidden_layers"});
}

TEST(Config, RejectsQuantizedCheckpoints) {
  for (const char* method : {"gptq", "awq", "fp8"}) {
    json raw = qwen2_config();
    raw["quantization_config"] = {{"quant_method", method}, {"bits", 4}};
    expect_config_error(raw, ErrorCategory::kUnsupported, {"quantized", method, "unquantized"});
  }
  json raw = qwen2_config();
  raw["quantization_config"] = nullptr;  // written as null by some exporters: not quantized
  EXPECT_NO_THROW(parse(raw));
}

TEST(Config, GenerationConfigSamplingValuesAreChecked) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{{"temperature", -1.0},
                                                                           {"top_p", 7.0},
                                                                           {"top_p", -0.1},
                                                                           {"top_k", -2},
                                                                           {"min_p", 1.5},
                                                                           {"repetition_penalty", 0.0},
                                                                           {"temperature", 1e39},  // inf as a float
                                                                           {"repetition_penalty", 1e39}}) {
    json gen = {{"do_sample", true}, {key, value}};
    const std::string text = gen.dump();
    // The number as the file writes it, not as the float it became (1e39 is "inf" there).
    expect_error([&] { parse_model_config(qwen2_config().dump(), kSource, &text); }, ErrorCategory::kInvalidModel,
                 {"generation_config.json", "'" + key + "'", "(got " + value.dump() + ")"});
    // Without do_sample the drawing settings are not used, and not checked (as transformers
    // warns only); the repetition penalty is, greedy or not.
    json unused = {{"do_sample", false}, {key, value}};
    const std::string unused_text = unused.dump();
    if (key == "repetition_penalty") {
      expect_error([&] { parse_model_config(qwen2_config().dump(), kSource, &unused_text); },
                   ErrorCategory::kInvalidModel, {"generation_config.json", "'repetition_penalty'"});
    } else {
      EXPECT_NO_THROW(parse_model_config(qwen2_config().dump(), kSource, &unused_text)) << key;
    }
  }
}

// A top_p of 0, which the API's range leaves out, is transformers' too (its top-p then keeps
// one token). A null top_k is one left out: transformers 5 fills it with its default, 50.
TEST(Config, GenerationConfigTakesTopPZeroAndReadsANullTopKAsLeftOut) {
  const std::string text = json{{"do_sample", true}, {"top_p", 0.0}, {"top_k", nullptr}}.dump();
  const ModelConfig config = parse_model_config(qwen2_config().dump(), kSource, &text);
  ASSERT_TRUE(config.default_top_p.has_value());
  EXPECT_EQ(*config.default_top_p, 0.f);
  EXPECT_FALSE(config.default_top_k.has_value());
  const std::string null_top_k = json{{"do_sample", true}, {"top_k", nullptr}}.dump();
  EXPECT_EQ(model_default_sampling(parse_model_config(qwen2_config().dump(), kSource, &null_top_k)).top_k, 50);
}

TEST(Config, RejectsUnsupportedActivationAndDtype) {
  json raw = qwen2_config();
  raw["hidden_act"] = "gelu";
  expect_config_error(raw, ErrorCategory::kUnsupported, {"hidden_act"});
  raw = qwen2_config();
  raw["torch_dtype"] = "int4";
  expect_config_error(raw, ErrorCategory::kInvalidModel, {"torch_dtype", "int4"});
}

TEST(Config, RejectsNotJsonOrNotObject) {
  expect_error([] { parse_model_config("{\"hidden_size\": ", kSource); },
               ErrorCategory::kInvalidModel, {kSource, "not valid JSON"});
  expect_error([] { parse_model_config("[1]", kSource); }, ErrorCategory::kInvalidModel,
               {kSource, "object"});
}

TEST(Config, LoadRejectsMissingOrBrokenConfigFile) {
  TempDir dir;
  expect_error([&] { load_model_config(dir.path()); }, ErrorCategory::kIo,
               {(dir / "config.json").string(), "missing"});
  write_file(dir / "config.json", "{\"architectures\": [\"Qwen2ForCausalLM\"],");
  expect_error([&] { load_model_config(dir.path()); }, ErrorCategory::kInvalidModel,
               {(dir / "config.json").string(), "not valid JSON"});
  expect_error([&] { load_model_config(dir / "nowhere"); }, ErrorCategory::kIo, {"nowhere"});
}

// ---- RoPE tables vs an independent derivation ----

// Relative distance, for inverse frequencies spanning many orders of magnitude.
double relative_error(double actual, double expected) {
  return std::abs(actual - expected) / std::abs(expected);
}

TEST(RopeTables, DefaultAndLinear) {
  json raw = qwen3_config();
  raw["head_dim"] = 128;
  raw["rope_theta"] = 1e6;
  ModelConfig config = parse(raw);
  RopeTables tables = compute_rope_tables(config);
  ASSERT_EQ(tables.inv_freq.size(), 64u);
  EXPECT_EQ(tables.attention_scaling, 1.f);
  for (int i = 0; i < 64; ++i) {
    double expected = 1.0 / std::pow(1e6, 2.0 * i / 128.0);
    EXPECT_LT(relative_error(tables.inv_freq[i], expected), 1e-6) << i;
  }
  raw["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.5}};
  tables = compute_rope_tables(parse(raw));
  for (int i = 0; i < 64; ++i) {
    double expected = 1.0 / (2.5 * std::pow(1e6, 2.0 * i / 128.0));
    EXPECT_LT(relative_error(tables.inv_freq[i], expected), 1e-6) << i;
  }
}

// YaRN (Peng et al. 2023) as in transformers' _compute_yarn_parameters, in double precision:
// dimensions rotating more than beta_fast times over the original context keep their
// frequency (extrapolation), those rotating fewer than beta_slow times are divided by the
// factor (interpolation), with a linear ramp between; cos/sin are scaled by 0.1·ln(s) + 1.
struct YarnReference {
  std::vector<double> inv_freq;
  double attention_factor;
};

YarnReference yarn_reference(int dim, double base, double factor, double original,
                             bool truncate = true) {
  const double pi = std::acos(-1.0);
  auto correction_dim = [&](double rotations) {
    // Dimension index whose wavelength fits `rotations` times into `original` positions.
    return dim * std::log(original / (rotations * 2 * pi)) / (2 * std::log(base));
  };
  double low = correction_dim(32.0), high = correction_dim(1.0);
  if (truncate) {  // whole dimensions, as the YaRN paper's code does
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;
  YarnReference ref;
  for (int i = 0; i < dim / 2; ++i) {
    double pos_freq = std::pow(base, 2.0 * i / dim);
    double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    double extrapolation_weight = 1.0 - ramp;
    double extrapolated = 1.0 / pos_freq;
    double interpolated = 1.0 / (factor * pos_freq);
    ref.inv_freq.push_back(interpolated * (1 - extrapolation_weight) +
                           extrapolated * extrapolation_weight);
  }
  ref.attention_factor = factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0;
  return ref;
}

struct YarnCase {
  int head_dim;
  double theta;
  double factor;
  int original;
};

TEST(RopeTables, YarnMatchesPublishedFormula) {
  // Qwen2.5's recommended 128k setting, a small-theta case, and factor 2 / head_dim 64.
  for (const YarnCase& c : {YarnCase{128, 1e6, 4.0, 32768}, YarnCase{64, 1e4, 8.0, 4096},
                            YarnCase{64, 1e5, 2.0, 128}, YarnCase{8, 1e4, 4.0, 2048}}) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " theta " + std::to_string(c.theta));
    json raw = qwen3_config();
    raw["head_dim"] = c.head_dim;
    raw["max_position_embeddings"] = static_cast<int>(c.original * c.factor);
    raw["rope_scaling"] = {
        {"type", "yarn"}, {"factor", c.factor}, {"original_max_position_embeddings", c.original}};
    raw["rope_theta"] = c.theta;
    RopeTables tables = compute_rope_tables(parse(raw));
    YarnReference ref = yarn_reference(c.head_dim, c.theta, c.factor, c.original);
    ASSERT_EQ(tables.inv_freq.size(), ref.inv_freq.size());
    for (size_t i = 0; i < ref.inv_freq.size(); ++i) {
      EXPECT_LT(relative_error(tables.inv_freq[i], ref.inv_freq[i]), 1e-6) << "i = " << i;
    }
    EXPECT_NEAR(tables.attention_scaling, ref.attention_factor, 1e-6);
  }
}

TEST(RopeTables, YarnRampIsNotTrivial) {
  // Guards the reference itself: for Qwen2.5's setting the ramp must leave high frequencies
  // untouched, divide low ones by the factor and blend in between.
  YarnReference ref = yarn_reference(128, 1e6, 4.0, 32768);
  EXPECT_DOUBLE_EQ(ref.inv_freq[0], 1.0);
  double last = 1.0 / std::pow(1e6, 126.0 / 128);
  EXPECT_NEAR(ref.inv_freq[63] / last, 0.25, 1e-12);
  double mid = 1.0 / std::pow(1e6, 60.0 / 128);
  double blend = ref.inv_freq[30] / mid;
  EXPECT_GT(blend, 0.25 + 1e-3);
  EXPECT_LT(blend, 1.0 - 1e-3);
}

TEST(RopeTables, YarnExplicitAttentionFactor) {
  json raw = qwen3_config();
  raw["head_dim"] = 64;
  raw["rope_parameters"] = {{"rope_type", "yarn"},
                            {"rope_theta", 1e4},
                            {"factor", 4.0},
                            {"original_max_position_embeddings", 1024},
                            {"attention_factor", 1.5}};
  raw.erase("rope_theta");
  EXPECT_FLOAT_EQ(compute_rope_tables(parse(raw)).attention_scaling, 1.5f);
}

TEST(RopeTables, YarnWithoutTruncation) {
  // truncate: false keeps the fractional correction range (used by some newer checkpoints).
  json raw = qwen3_config();
  raw["head_dim"] = 128;
  raw.erase("rope_theta");
  raw["rope_parameters"] = {{"rope_type", "yarn"},
                            {"rope_theta", 1e6},
                            {"factor", 4.0},
                            {"original_max_position_embeddings", 32768},
                            {"truncate", false}};
  RopeTables tables = compute_rope_tables(parse(raw));
  YarnReference ref = yarn_reference(128, 1e6, 4.0, 32768, /*truncate=*/false);
  YarnReference truncated = yarn_reference(128, 1e6, 4.0, 32768);
  bool differs = false;
  for (size_t i = 0; i < ref.inv_freq.size(); ++i) {
    EXPECT_LT(relative_error(tables.inv_freq[i], ref.inv_freq[i]), 1e-6) << "i = " << i;
    differs |= relative_error(ref.inv_freq[i], truncated.inv_freq[i]) > 1e-4;
  }
  EXPECT_TRUE(differs);  // the case distinguishes the two ramps
}

}  // namespace
}  // namespace qwenrt
