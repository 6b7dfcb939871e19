#include "model/config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "engine/sampling_ranges.h"

namespace qwenrt {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw Error(ErrorCategory::kInvalidModel, source + ": " + message);
}

json parse_json_object(const std::string& text, const std::string& source) {
  json parsed = parse_json(text, source);
  if (!parsed.is_object()) fail(source, "expected a JSON object at the top level");
  return parsed;
}

bool has_value(const json& object, const char* key) {
  return object.contains(key) && !object.at(key).is_null();
}

// Integer field: must be an integer number within int range.
std::optional<int> get_int(const json& object, const char* key, const std::string& source) {
  if (!has_value(object, key)) return std::nullopt;
  const json& value = object.at(key);
  if (!value.is_number_integer()) fail(source, std::string("'") + key + "' must be an integer");
  auto wide = value.get<int64_t>();
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
    fail(source, std::string("'") + key + "' is out of range: " + std::to_string(wide));
  }
  return static_cast<int>(wide);
}

int require_positive_int(const json& object, const char* key, const std::string& source) {
  auto value = get_int(object, key, source);
  if (!value) fail(source, std::string("missing required field '") + key + "'");
  if (*value <= 0) {
    fail(source, std::string("'") + key + "' must be positive, got " + std::to_string(*value));
  }
  return *value;
}

std::optional<double> get_number(const json& object, const char* key, const std::string& source) {
  if (!has_value(object, key)) return std::nullopt;
  const json& value = object.at(key);
  if (!value.is_number()) fail(source, std::string("'") + key + "' must be a number");
  double number = value.get<double>();
  if (!std::isfinite(number)) fail(source, std::string("'") + key + "' must be finite");
  return number;
}

std::optional<bool> get_bool(const json& object, const char* key, const std::string& source) {
  if (!has_value(object, key)) return std::nullopt;
  const json& value = object.at(key);
  if (!value.is_boolean()) fail(source, std::string("'") + key + "' must be true or false");
  return value.get<bool>();
}

// eos_token_id may be an integer or a list of integers.
std::vector<int> get_token_ids(const json& object, const char* key, const std::string& source) {
  std::vector<int> ids;
  if (!has_value(object, key)) return ids;
  const json& value = object.at(key);
  auto check = [&](const json& item) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0 ||
        item.get<int64_t>() > std::numeric_limits<int>::max()) {
      fail(source, std::string("'") + key + "' must be a non-negative integer or a list of them");
    }
    ids.push_back(static_cast<int>(item.get<int64_t>()));
  };
  if (value.is_array()) {
    for (const auto& item : value) check(item);
  } else {
    check(value);
  }
  return ids;
}

void parse_rope(const json& config, const std::string& source, ModelConfig& model) {
  RopeConfig& rope = model.rope;
  // transformers >= 5 writes `rope_parameters` (with rope_theta inside); older configs write
  // `rope_theta` and `rope_scaling` at the top level. rope_scaling wins when both exist.
  json params = json::object();
  if (has_value(config, "rope_scaling")) {
    params = config.at("rope_scaling");
  } else if (has_value(config, "rope_parameters")) {
    params = config.at("rope_parameters");
  }
  if (!params.is_object()) fail(source, "'rope_scaling'/'rope_parameters' must be an object");
  std::string what = has_value(config, "rope_scaling") ? "rope_scaling" : "rope_parameters";

  if (auto theta = get_number(params, "rope_theta", source)) {
    rope.theta = *theta;
  } else if (auto top_theta = get_number(config, "rope_theta", source)) {
    rope.theta = *top_theta;
  }
  if (!(rope.theta > 0)) fail(source, "rope_theta must be positive");

  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (has_value(params, key)) {
      if (!params.at(key).is_string()) fail(source, what + "." + key + " must be a string");
      type = params.at(key).get<std::string>();
      break;
    }
  }
  if (auto partial = get_number(params, "partial_rotary_factor", source); partial && *partial != 1.0) {
    throw Error(ErrorCategory::kUnsupported, source + ": partial_rotary_factor != 1 is not supported");
  }
  if (type == "default") {
    // A scaling factor with no type names a scaling it does not say (transformers refuses it).
    if (has_value(params, "factor") && !has_value(params, "rope_type") && !has_value(params, "type")) {
      fail(source, what + " has a 'factor' but no 'rope_type' (linear or yarn)");
    }
    rope.type = RopeType::kDefault;
    return;
  }
  if (type == "linear") {
    rope.type = RopeType::kLinear;
    auto factor = get_number(params, "factor", source);
    if (!factor || *factor <= 0) fail(source, what + ": linear RoPE needs a positive 'factor'");
    rope.factor = *factor;
    return;
  }
  if (type != "yarn") {
    throw Error(ErrorCategory::kUnsupported,
                source + ": RoPE type '" + type +
                    "' is not supported (supported: default, linear, yarn)");
  }
  rope.type = RopeType::kYarn;
  // original_max_position_embeddings: inside the RoPE dict, else a top-level field, else
  // max_position_embeddings (transformers' standardisation order).
  if (auto original = get_int(config, "original_max_position_embeddings", source)) {
    rope.original_max_position_embeddings = *original;
  } else if (auto inner = get_int(params, "original_max_position_embeddings", source)) {
    rope.original_max_position_embeddings = *inner;
  } else {
    rope.original_max_position_embeddings = model.max_position_embeddings;
  }
  if (rope.original_max_position_embeddings <= 0) {
    fail(source, what + ".original_max_position_embeddings must be positive");
  }
  // Required, as transformers has it: without it the context extension asked for would
  // silently be none.
  auto factor = get_number(params, "factor", source);
  if (!factor) fail(source, what + ": yarn RoPE needs a 'factor'");
  rope.factor = *factor;
  if (!(rope.factor > 0)) fail(source, what + ".factor must be positive");
  rope.attention_factor = get_number(params, "attention_factor", source);
  rope.mscale = get_number(params, "mscale", source);
  rope.mscale_all_dim = get_number(params, "mscale_all_dim", source);
  // `or` semantics: a zero/absent beta falls back to the default, as in transformers.
  if (auto beta = get_number(params, "beta_fast", source); beta && *beta != 0) rope.beta_fast = *beta;
  if (auto beta = get_number(params, "beta_slow", source); beta && *beta != 0) rope.beta_slow = *beta;
  if (auto truncate = get_bool(params, "truncate", source)) rope.truncate = *truncate;
}

void parse_sliding_window(const json& config, const std::string& source, ModelConfig& model) {
  bool use_sliding = get_bool(config, "use_sliding_window", source).value_or(false);
  std::optional<int> window;
  if (use_sliding) {
    window = get_int(config, "sliding_window", source);
    if (window && *window <= 0) fail(source, "'sliding_window' must be positive");
  }
  model.layer_sliding_window.assign(model.num_layers, 0);
  if (has_value(config, "layer_types")) {
    const json& types = config.at("layer_types");
    if (!types.is_array() || static_cast<int>(types.size()) != model.num_layers) {
      fail(source, "'layer_types' must be a list with one entry per layer (" +
                       std::to_string(model.num_layers) + ")");
    }
    for (int i = 0; i < model.num_layers; ++i) {
      if (!types[i].is_string()) fail(source, "'layer_types' entries must be strings");
      std::string type = types[i].get<std::string>();
      if (type == "sliding_attention") {
        model.layer_sliding_window[i] = window.value_or(0);
      } else if (type != "full_attention") {
        throw Error(ErrorCategory::kUnsupported,
                    source + ": layer type '" + type + "' is not supported");
      }
    }
    return;
  }
  if (!window) return;
  int max_window_layers = get_int(config, "max_window_layers", source).value_or(28);
  for (int i = 0; i < model.num_layers; ++i) {
    if (i >= max_window_layers) model.layer_sliding_window[i] = *window;
  }
}

// ---- The original Qwen (QWenLMHeadModel): its config.json spells some fields its own way
// (configuration_qwen.py) and adds the long-context scaling past seq_length.

// kv_channels is the head width; the attention's output must fill hidden_size exactly.
int qwen_v1_head_dim(const json& config, const std::string& source, const ModelConfig& model) {
  const int head_dim = require_positive_int(config, "kv_channels", source);
  if (static_cast<int64_t>(head_dim) * model.num_heads != model.hidden_size) {
    fail(source, "num_attention_heads (" + std::to_string(model.num_heads) + ") x kv_channels (" +
                     std::to_string(head_dim) + ") must equal hidden_size (" +
                     std::to_string(model.hidden_size) + ")");
  }
  return head_dim;
}

void parse_qwen_v1(const json& config, const std::string& source, ModelConfig& model) {
  if (auto pct = get_number(config, "rotary_pct", source); pct && *pct != 1.0) {
    throw Error(ErrorCategory::kUnsupported,
                source + ": rotary_pct " + std::to_string(*pct) +
                    " is not supported (RoPE over part of each head; every release has 1.0)");
  }
  // The released MLP: c_proj(w1(x) * silu(w2(x))), each of w1/w2 half of intermediate_size.
  const int intermediate = model.intermediate_size;
  if (intermediate % 2 != 0) {
    fail(source, "'intermediate_size' must be even (the MLP width is half of it), got " +
                     std::to_string(intermediate));
  }
  model.intermediate_size = intermediate / 2;
  model.num_kv_heads = model.num_heads;  // full multi-head attention
  model.attention_bias = true;           // c_attn always has a bias
  model.qk_norm = false;
  model.output_mlp_bias = !get_bool(config, "no_bias", source).value_or(true);
  model.rms_norm_eps = get_number(config, "layer_norm_epsilon", source).value_or(1e-6);
  if (!(model.rms_norm_eps > 0)) fail(source, "'layer_norm_epsilon' must be positive");
  model.rope = RopeConfig{};
  model.rope.theta = get_number(config, "rotary_emb_base", source).value_or(10000.0);
  if (!(model.rope.theta > 0)) fail(source, "'rotary_emb_base' must be positive");
  model.seq_length = get_int(config, "seq_length", source).value_or(2048);
  if (model.seq_length <= 1) fail(source, "'seq_length' must be at least 2");
  model.use_dynamic_ntk = get_bool(config, "use_dynamic_ntk", source).value_or(true);
  model.use_logn_attn = get_bool(config, "use_logn_attn", source).value_or(true);
  // Precision hints (all false: chosen at load; --dtype decides what runs).
  int hints = 0;
  for (auto [key, dtype] : {std::pair{"bf16", DType::kBF16}, std::pair{"fp16", DType::kF16},
                            std::pair{"fp32", DType::kF32}}) {
    if (get_bool(config, key, source).value_or(false)) {
      model.dtype = dtype;
      ++hints;
    }
  }
  if (hints > 1) fail(source, "at most one of 'bf16', 'fp16' and 'fp32' may be true");
}

void parse_qwen_v1_generation(const json& gen, const std::string& source, ModelConfig& model) {
  if (has_value(gen, "chat_format")) {
    if (!gen.at("chat_format").is_string()) fail(source, "'chat_format' must be a string");
    model.chat_format = gen.at("chat_format").get<std::string>();
    if (model.chat_format != "chatml" && model.chat_format != "raw") {
      throw Error(ErrorCategory::kUnsupported, source + ": chat_format '" + model.chat_format +
                                                   "' is not supported (expected chatml or raw)");
    }
  }
  if (!has_value(gen, "stop_words_ids")) return;
  const json& words = gen.at("stop_words_ids");
  const std::string shape = "'stop_words_ids' must be a list of non-empty lists of token ids";
  if (!words.is_array()) fail(source, shape);
  for (const json& word : words) {
    if (!word.is_array() || word.empty()) fail(source, shape);
    std::vector<int> ids;
    for (const json& id : word) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= model.vocab_size) {
        fail(source, shape + " below vocab_size " + std::to_string(model.vocab_size) + " (got " + id.dump() + ")");
      }
      ids.push_back(static_cast<int>(id.get<int64_t>()));
    }
    // As the original's processor: a word that is the end-of-text id alone ends generation anyway.
    if (!model.eos_token_ids.empty() && ids == std::vector<int>{model.eos_token_ids.front()}) continue;
    if (model.eos_token_ids.empty()) {
      fail(source, "'stop_words_ids' needs an 'eos_token_id' (the id forced after a stop word)");
    }
    model.stop_words_ids.push_back(std::move(ids));
  }
}

}  // namespace

int ntk_alpha_index(const ModelConfig& config, int length) {
  if (!config.use_dynamic_ntk || length <= config.seq_length) return 0;
  // As the original: math.log(L / seq_length, 2) + 1, i.e. log(x) / log(2) in double.
  const double context_value =
      std::log(static_cast<double>(length) / config.seq_length) / std::log(2.0) + 1.0;
  return std::max(static_cast<int>(std::ceil(context_value)) - 1, 0);
}

ModelConfig parse_model_config(const std::string& config_json, const std::string& source,
                               const std::string* generation_config_json) {
  json config = parse_json_object(config_json, source);
  ModelConfig model;

  if (!config.contains("architectures") || !config["architectures"].is_array() ||
      config["architectures"].empty() || !config["architectures"][0].is_string()) {
    fail(source, "missing 'architectures' (expected e.g. [\"Qwen2ForCausalLM\"])");
  }
  model.architecture_name = config["architectures"][0].get<std::string>();
  const std::string kSupported =
      "supported: QWenLMHeadModel (the original Qwen), Qwen2ForCausalLM (Qwen1.5, Qwen2, "
      "Qwen2.5) and Qwen3ForCausalLM (Qwen3 dense)";
  if (model.architecture_name == "Qwen2ForCausalLM") {
    model.architecture = Architecture::kQwen2;
  } else if (model.architecture_name == "Qwen3ForCausalLM") {
    model.architecture = Architecture::kQwen3;
  } else if (model.architecture_name == "QWenLMHeadModel") {
    model.architecture = Architecture::kQwenV1;
  } else if (model.architecture_name.find("Moe") != std::string::npos) {
    throw Error(ErrorCategory::kUnsupported, source + ": mixture-of-experts models (" +
                                                 model.architecture_name +
                                                 ") are not supported yet; " + kSupported);
  } else {
    throw Error(ErrorCategory::kUnsupported,
                source + ": architecture '" + model.architecture_name + "' is not supported; " +
                    kSupported);
  }

  model.hidden_size = require_positive_int(config, "hidden_size", source);
  model.intermediate_size = require_positive_int(config, "intermediate_size", source);
  model.num_layers = require_positive_int(config, "num_hidden_layers", source);
  model.num_heads = require_positive_int(config, "num_attention_heads", source);
  model.vocab_size = require_positive_int(config, "vocab_size", source);
  model.num_kv_heads = get_int(config, "num_key_value_heads", source).value_or(model.num_heads);
  if (model.num_kv_heads <= 0) fail(source, "'num_key_value_heads' must be positive");
  if (model.num_heads % model.num_kv_heads != 0) {
    fail(source, "num_attention_heads (" + std::to_string(model.num_heads) +
                     ") is not a multiple of num_key_value_heads (" +
                     std::to_string(model.num_kv_heads) + ")");
  }
  if (model.architecture == Architecture::kQwenV1) {
    model.head_dim = qwen_v1_head_dim(config, source, model);
  } else if (auto head_dim = get_int(config, "head_dim", source)) {
    model.head_dim = *head_dim;
  } else if (model.architecture == Architecture::kQwen3) {
    model.head_dim = 128;  // Qwen3Config's default
  } else {
    if (model.hidden_size % model.num_heads != 0) {
      fail(source, "hidden_size (" + std::to_string(model.hidden_size) +
                       ") is not divisible by num_attention_heads (" +
                       std::to_string(model.num_heads) + ") and no head_dim is given");
    }
    model.head_dim = model.hidden_size / model.num_heads;
  }
  if (model.head_dim <= 0 || model.head_dim % 2 != 0) {
    fail(source, "head_dim must be positive and even, got " + std::to_string(model.head_dim));
  }
  // Far past any released model, and small enough that no product of them overflows.
  const auto at_most = [&](const char* what, int value, int limit) {
    if (value > limit) {
      fail(source, std::string(what) + " is " + std::to_string(value) + ": more than a model this runs has (at most " +
                       std::to_string(limit) + ")");
    }
  };
  at_most("hidden_size", model.hidden_size, 1 << 20);
  at_most("intermediate_size", model.intermediate_size, 1 << 22);
  at_most("vocab_size", model.vocab_size, 1 << 24);
  at_most("num_hidden_layers", model.num_layers, 1 << 12);
  at_most("num_attention_heads", model.num_heads, 1 << 12);
  at_most("head_dim", model.head_dim, 1 << 12);
  if (has_value(config, "quantization_config")) {
    const json& quantization = config["quantization_config"];
    const std::string method = quantization.is_object() && quantization.contains("quant_method") &&
                                       quantization["quant_method"].is_string()
                                   ? quantization["quant_method"].get<std::string>()
                                   : std::string("unknown");
    throw Error(ErrorCategory::kUnsupported,
                source + ": a quantized checkpoint (quantization_config, quant_method '" + method +
                    "') is not supported; qwenrt runs the unquantized release (bf16, fp16 or fp32 weights)");
  }

  model.rms_norm_eps = get_number(config, "rms_norm_eps", source).value_or(1e-6);
  if (!(model.rms_norm_eps > 0)) fail(source, "'rms_norm_eps' must be positive");
  model.max_position_embeddings =
      get_int(config, "max_position_embeddings", source).value_or(32768);
  if (model.max_position_embeddings <= 0) fail(source, "'max_position_embeddings' must be positive");
  model.tie_word_embeddings = get_bool(config, "tie_word_embeddings", source).value_or(false);
  if (model.architecture == Architecture::kQwen2) {
    model.attention_bias = true;
  } else if (model.architecture == Architecture::kQwen3) {
    model.attention_bias = get_bool(config, "attention_bias", source).value_or(false);
    model.qk_norm = true;
  }
  if (has_value(config, "hidden_act")) {
    if (!config["hidden_act"].is_string() || config["hidden_act"].get<std::string>() != "silu") {
      throw Error(ErrorCategory::kUnsupported, source + ": only hidden_act \"silu\" is supported");
    }
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (has_value(config, key) && config[key].is_string()) {
      try {
        model.dtype = parse_dtype(config[key].get<std::string>());
      } catch (const Error&) {
        fail(source, std::string("unsupported '") + key + "': " + config[key].get<std::string>());
      }
    }
  }
  parse_rope(config, source, model);
  parse_sliding_window(config, source, model);
  if (model.architecture == Architecture::kQwenV1) parse_qwen_v1(config, source, model);

  model.bos_token_id = get_int(config, "bos_token_id", source).value_or(-1);
  model.eos_token_ids = get_token_ids(config, "eos_token_id", source);
  std::string eos_source = source;  // the file the EOS ids came from, for the range check
  if (generation_config_json != nullptr) {
    std::string gen_source = "generation_config.json";
    json gen = parse_json_object(*generation_config_json, gen_source);
    auto gen_eos = get_token_ids(gen, "eos_token_id", gen_source);
    if (!gen_eos.empty()) {
      model.eos_token_ids = gen_eos;
      eos_source = gen_source;
    }
    model.default_do_sample = get_bool(gen, "do_sample", gen_source).value_or(false);
    if (auto value = get_number(gen, "temperature", gen_source)) model.default_temperature = *value;
    if (auto value = get_number(gen, "min_p", gen_source)) model.default_min_p = *value;
    if (auto value = get_number(gen, "top_p", gen_source)) model.default_top_p = *value;
    // A null top_k is one left out: transformers 5 fills every field still None with its
    // defaults (top_k 50) when it generates.
    if (auto value = get_int(gen, "top_k", gen_source)) model.default_top_k = *value;
    if (auto value = get_number(gen, "repetition_penalty", gen_source)) {
      model.default_repetition_penalty = *value;
    }
    if (model.architecture == Architecture::kQwenV1) parse_qwen_v1_generation(gen, gen_source, model);
    // The values sampling starts from: in the ranges the command line and the server accept,
    // as the floats the sampler takes (1e39 is infinite there).
    namespace range = sampling_range;
    const auto check = [&](const char* key, const ValueRange& valid, double value) {
      if (!valid.contains(value)) {
        // The file's number as JSON writes it, not the float it became (1e300 is inf there).
        fail(gen_source, std::string("'") + key + "' must be " + valid.text() + " (got " + gen.at(key).dump() + ")");
      }
    };
    if (model.default_do_sample) {
      check("temperature", range::kTemperature, model.default_temperature.value_or(1.f));
      check("top_p", range::kFileTopP, model.default_top_p.value_or(1.f));
      check("top_k", range::kTopK, model.default_top_k.value_or(0));
      check("min_p", range::kMinP, model.default_min_p.value_or(0.f));
    }
    // Used greedy or not (model_default_sampling).
    check("repetition_penalty", range::kRepetitionPenalty, model.default_repetition_penalty.value_or(1.f));
  }
  for (int id : model.eos_token_ids) {
    if (id >= model.vocab_size) {
      fail(eos_source, "eos_token_id " + std::to_string(id) + " is not below vocab_size " +
                       std::to_string(model.vocab_size));
    }
  }
  if (model.bos_token_id >= model.vocab_size) {
    fail(source, "bos_token_id " + std::to_string(model.bos_token_id) +
                     " is not below vocab_size " + std::to_string(model.vocab_size));
  }
  return model;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  if (!std::filesystem::is_directory(model_dir)) {
    throw Error(ErrorCategory::kIo, model_dir.string() + ": not a directory (expected a Hugging "
                                                         "Face model folder with config.json)");
  }
  auto config_path = model_dir / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw Error(ErrorCategory::kIo,
                config_path.string() + ": missing (the model folder has no config.json)");
  }
  std::string config_text = read_text_file(config_path);
  auto gen_path = model_dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    std::string gen_text = read_text_file(gen_path);
    try {
      return parse_model_config(config_text, config_path.string(), &gen_text);
    } catch (const Error& e) {
      // Name the generation config by its full path when it is the culprit.
      std::string message = e.what();
      if (message.rfind("generation_config.json", 0) == 0) {
        throw Error(e.category(), gen_path.string() + message.substr(22));
      }
      throw;
    }
  }
  return parse_model_config(config_text, config_path.string());
}

RopeTables compute_rope_tables(const ModelConfig& config, int ntk_alpha_index) {
  RopeConfig rope = config.rope;
  if (ntk_alpha_index > 0) {
    // The original: base * alpha ** (d / (d - 2)) in double, then powers in fp32.
    const double alpha = std::ldexp(1.0, ntk_alpha_index + 1) - 1.0;
    const double dim = config.head_dim;
    rope.theta *= std::pow(alpha, dim / (dim - 2.0));
  }
  const int dim = config.head_dim;
  const int half = dim / 2;
  RopeTables tables;
  tables.inv_freq.resize(half);
  // transformers: base ** (arange(0, dim, 2).float() / dim), all in fp32.
  std::vector<float> pos_freqs(half);
  for (int i = 0; i < half; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freqs[i] = std::pow(static_cast<float>(rope.theta), exponent);
  }
  if (rope.type == RopeType::kDefault) {
    for (int i = 0; i < half; ++i) tables.inv_freq[i] = 1.0f / pos_freqs[i];
    return tables;
  }
  if (rope.type == RopeType::kLinear) {
    for (int i = 0; i < half; ++i) {
      tables.inv_freq[i] = (1.0f / pos_freqs[i]) / static_cast<float>(rope.factor);
    }
    return tables;
  }
  // YaRN.
  const double factor = rope.factor;
  auto get_mscale = [](double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
  };
  double attention_factor;
  if (rope.attention_factor) {
    attention_factor = *rope.attention_factor;
  } else if (rope.mscale && rope.mscale_all_dim && *rope.mscale != 0 && *rope.mscale_all_dim != 0) {
    attention_factor = get_mscale(factor, *rope.mscale) / get_mscale(factor, *rope.mscale_all_dim);
  } else {
    attention_factor = get_mscale(factor, 1.0);
  }
  const double base = rope.theta;
  const double original = rope.original_max_position_embeddings;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = correction_dim(rope.beta_fast);
  double high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  for (int i = 0; i < half; ++i) {
    float ramp = static_cast<float>((static_cast<float>(i) - low) / (high - low));
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    float extrapolation_factor = 1.0f - ramp;
    float extrapolated = 1.0f / pos_freqs[i];
    float interpolated = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
    tables.inv_freq[i] =
        interpolated * (1.0f - extrapolation_factor) + extrapolated * extrapolation_factor;
  }
  tables.attention_scaling = static_cast<float>(attention_factor);
  return tables;
}

}  // namespace qwenrt
