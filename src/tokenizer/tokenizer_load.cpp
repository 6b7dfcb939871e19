// Reads tokenizer.json (and tokenizer_config.json beside it) into Tokenizer::Impl. Every
// field that changes what HF's encode or decode produces is checked: values this code
// reproduces are accepted, anything else is refused with an error naming the field.
#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/json.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace qwenrt {
namespace {

constexpr const char* kJsonFile = "tokenizer.json";
constexpr const char* kTiktokenFile = "qwen.tiktoken";

using nlohmann::json;

// Patterns HF's ByteLevel pre-tokenizer applies when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr int32_t kMaxTokenId = 1 << 24;  // far above any real vocabulary

class Loader {
 public:
  explicit Loader(std::filesystem::path source) : source_(std::move(source)) {}

  [[noreturn]] void fail(ErrorCategory category, const std::string& message) const {
    throw Error(category, source_.string() + ": " + message);
  }
  [[noreturn]] void invalid(const std::string& message) const {
    fail(ErrorCategory::kInvalidModel, message);
  }
  [[noreturn]] void unsupported(const std::string& message) const {
    fail(ErrorCategory::kUnsupported, message + " is not supported");
  }

  json read_json(const std::filesystem::path& path) const { return parse_json(read_text_file(path), path.string()); }

  bool flag(const json& object, const char* key, bool fallback, const std::string& where) const {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) invalid(where + "." + key + " must be true or false");
    return it->get<bool>();
  }

  std::string type_of(const json& object, const std::string& where) const {
    if (!object.is_object()) invalid(where + " must be an object");
    const auto it = object.find("type");
    if (it == object.end() || !it->is_string()) invalid(where + ".type is missing");
    return it->get<std::string>();
  }

  // A "Sequence" component's steps (under `list_key`), or the component itself as one step.
  std::vector<const json*> steps_of(const json& component, const std::string& where,
                                    const char* list_key) const {
    std::vector<const json*> steps;
    if (type_of(component, where) == "Sequence") {
      const auto list = component.find(list_key);
      if (list == component.end() || !list->is_array()) invalid(where + "." + list_key + " must be a list");
      for (const json& step : *list) steps.push_back(&step);
    } else {
      steps.push_back(&component);
    }
    return steps;
  }

  // The matching flags of an added token entry (normalized defaults to !special, as HF).
  void read_flags(const json& entry, const std::string& where, AddedToken& token) const {
    token.special = flag(entry, "special", false, where);
    token.single_word = flag(entry, "single_word", false, where);
    token.lstrip = flag(entry, "lstrip", false, where);
    token.rstrip = flag(entry, "rstrip", false, where);
    token.normalized = flag(entry, "normalized", !token.special, where);
  }

  std::string text_of(const json& value, const std::string& where) const {
    if (!value.is_string()) invalid(where + " must be a string");
    std::string text = value.get<std::string>();
    if (tok::utf8_valid_prefix(text) != text.size()) invalid(where + " is not valid UTF-8");
    return text;
  }

  void load(Tokenizer::Impl& impl);

 private:
  void load_normalizer(const json& root, Tokenizer::Impl& impl);
  void load_pre_tokenizer(const json& root, Tokenizer::Impl& impl);
  void check_decoder_and_post_processor(const json& root);
  void load_model(const json& model, tok::TokenizerJson& lists, Tokenizer::Impl& impl);
  void load_added_tokens(const json& root, Tokenizer::Impl& impl);
  static void add_token(Tokenizer::Impl& impl, AddedToken token);
  void load_config(Tokenizer::Impl& impl);

  std::filesystem::path source_;
  std::filesystem::path config_path_;
};

void Loader::load_normalizer(const json& root, Tokenizer::Impl& impl) {
  const auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return;
  for (const json* step : steps_of(*it, "normalizer", "normalizers")) {
    const std::string type = type_of(*step, "normalizer");
    if (type != "NFC") unsupported("normalizer \"" + type + "\"");
    if (!impl.nfc) impl.nfc.emplace();  // NFC twice is NFC once
  }
}

void Loader::load_pre_tokenizer(const json& root, Tokenizer::Impl& impl) {
  const auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null()) {
    unsupported("a tokenizer without the ByteLevel pre-tokenizer (not byte-level BPE)");
  }
  const std::vector<const json*> steps = steps_of(*it, "pre_tokenizer", "pretokenizers");
  bool byte_level = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& step = *steps[i];
    const std::string where = "pre_tokenizer[" + std::to_string(i) + "]";
    const std::string type = type_of(step, where);
    if (byte_level) unsupported(where + ": a pre-tokenizer after ByteLevel");
    if (type == "Split") {
      const auto behavior = step.find("behavior");
      if (behavior == step.end() || *behavior != "Isolated") {
        unsupported(where + ": Split behavior other than \"Isolated\"");
      }
      if (flag(step, "invert", false, where)) unsupported(where + ": Split with invert=true");
      const auto pattern = step.find("pattern");
      if (pattern == step.end() || !pattern->is_object())
        invalid(where + ".pattern must be an object");
      if (const auto regex = pattern->find("Regex"); regex != pattern->end()) {
        const std::string what = source_.string() + ": " + where + " regex";
        impl.splitters.emplace_back(
            tok::onig_to_pcre2(text_of(*regex, where + ".pattern.Regex"), what), false, what);
      } else if (const auto literal = pattern->find("String"); literal != pattern->end()) {
        impl.splitters.emplace_back(text_of(*literal, where + ".pattern.String"), true,
                                    source_.string() + ": " + where + " string");
      } else {
        invalid(where + ".pattern needs \"Regex\" or \"String\"");
      }
    } else if (type == "ByteLevel") {
      // HF's defaults for a ByteLevel pre-tokenizer: add_prefix_space and use_regex true.
      if (flag(step, "add_prefix_space", true, where))
        unsupported(where + ": ByteLevel add_prefix_space=true");
      if (flag(step, "use_regex", true, where)) {
        const std::string what = source_.string() + ": " + where + " (GPT-2 regex)";
        impl.splitters.emplace_back(tok::onig_to_pcre2(kGpt2Pattern, what), false, what);
      }
      byte_level = true;
    } else {
      unsupported(where + ": pre-tokenizer \"" + type + "\"");
    }
  }
  if (!byte_level)
    unsupported("a pre-tokenizer that does not end with ByteLevel (not byte-level BPE)");
}

void Loader::check_decoder_and_post_processor(const json& root) {
  const auto decoder = root.find("decoder");
  if (decoder == root.end() || decoder->is_null()) unsupported("a tokenizer without a decoder");
  const std::vector<const json*> steps = steps_of(*decoder, "decoder", "decoders");
  if (steps.size() != 1 || type_of(*steps[0], "decoder") != "ByteLevel") {
    unsupported("a decoder other than ByteLevel");
  }
  // The ByteLevel post-processor only adjusts offsets; anything else adds tokens.
  const auto post = root.find("post_processor");
  if (post != root.end() && !post->is_null()) {
    const std::string type = type_of(*post, "post_processor");
    if (type != "ByteLevel") unsupported("post_processor \"" + type + "\"");
  }
  for (const char* key : {"truncation", "padding"}) {
    const auto it = root.find(key);
    if (it != root.end() && !it->is_null()) unsupported(std::string("\"") + key + "\" settings");
  }
}

void Loader::load_model(const json& model, tok::TokenizerJson& lists, Tokenizer::Impl& impl) {
  if (!model.is_object()) invalid("model must be an object");
  if (const auto type = model.find("type"); type != model.end() && *type != "BPE") {
    unsupported("model type " + type->dump());
  }
  if (const auto dropout = model.find("dropout");
      dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    unsupported("BPE dropout");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && *it != "") unsupported(std::string("model.") + key);
  }
  if (!lists.has_vocab) invalid("model.vocab must be an object");
  int32_t max_id = -1;
  impl.bpe_vocab.reserve(lists.vocab.size());
  for (auto& [token, id] : lists.vocab) {
    if (id < 0 || id >= kMaxTokenId) {
      invalid("model.vocab[" + json(token).dump() + "] must be a token id in [0, " +
              std::to_string(kMaxTokenId) + ")");
    }
    max_id = std::max(max_id, static_cast<int32_t>(id));
    impl.bpe_vocab.insert_or_assign(std::move(token), static_cast<int32_t>(id));  // last wins
  }
  lists.vocab = {};
  impl.token_text.assign(static_cast<size_t>(max_id + 1), std::string());
  impl.kind.assign(static_cast<size_t>(max_id + 1), Tokenizer::Impl::Kind::kNone);
  for (const auto& [token, id] : impl.bpe_vocab) {
    const auto index = static_cast<size_t>(id);
    if (impl.kind[index] != Tokenizer::Impl::Kind::kNone && impl.token_text[index] < token)
      continue;
    impl.token_text[index] = token;
    impl.kind[index] = Tokenizer::Impl::Kind::kBpe;
  }

  tok::ByteLevelAlphabet alphabet;
  std::array<int32_t, 256> byte_ids{};
  for (int byte = 0; byte < 256; ++byte) {
    const std::string text = alphabet.to_chars(std::string(1, static_cast<char>(byte)));
    const auto it = impl.bpe_vocab.find(text);
    if (it == impl.bpe_vocab.end()) {
      unsupported("a byte-level vocabulary without a token for byte " + std::to_string(byte));
    }
    byte_ids[static_cast<size_t>(byte)] = it->second;
  }

  if (!lists.has_merges) invalid("model.merges must be a list");
  std::vector<tok::MergeRule> rules;
  rules.reserve(lists.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < lists.merges.size(); ++rank) {
    const auto& [left, right] = lists.merges[rank];
    auto where = [rank] { return "model.merges[" + std::to_string(rank) + "]"; };
    joined.assign(left).append(right);
    const auto left_id = impl.bpe_vocab.find(left);
    const auto right_id = impl.bpe_vocab.find(right);
    const auto merged_id = impl.bpe_vocab.find(joined);
    if (left_id == impl.bpe_vocab.end() || right_id == impl.bpe_vocab.end() ||
        merged_id == impl.bpe_vocab.end()) {
      invalid(where() + " names a token that is not in model.vocab");
    }
    rules.push_back({left_id->second, right_id->second, merged_id->second});
  }

  std::function<std::optional<int32_t>(std::string_view)> whole_word;
  if (flag(model, "ignore_merges", false, "model")) {
    const Tokenizer::Impl::TokenMap* words = &impl.bpe_vocab;  // lives as long as the model
    whole_word = [words](std::string_view word) -> std::optional<int32_t> {
      const auto it = words->find(word);
      if (it == words->end()) return std::nullopt;
      return it->second;
    };
  }
  impl.bpe = std::make_unique<tok::BpeModel>(byte_ids, rules, std::move(whole_word));
}

void Loader::load_added_tokens(const json& root, Tokenizer::Impl& impl) {
  const auto list = root.find("added_tokens");
  if (list == root.end() || list->is_null()) return;
  if (!list->is_array()) invalid("added_tokens must be a list");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& entry = (*list)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object()) invalid(where + " must be an object");
    const auto id = entry.find("id");
    const auto content = entry.find("content");
    if (id == entry.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= kMaxTokenId) {
      invalid(where + ".id must be a token id");
    }
    if (content == entry.end()) invalid(where + ".content is missing");
    AddedToken token;
    token.id = id->get<int32_t>();
    token.content = text_of(*content, where + ".content");
    read_flags(entry, where, token);
    add_token(impl, std::move(token));
  }
}

// HF (AddedVocabulary::add_tokens, in file order) gives an added token the id its text has
// among the added tokens or in the vocabulary, else the next id past both; the "id" written
// in tokenizer.json is not used (HF only warns when it differs). Files HF wrote agree.
void Loader::add_token(Tokenizer::Impl& impl, AddedToken token) {
  if (token.content.empty()) return;  // HF ignores empty added tokens
  if (const auto known = impl.added_ids.find(token.content); known != impl.added_ids.end()) {
    for (AddedToken& existing : impl.added) {
      if (existing.content == token.content) {
        token.id = existing.id;
        existing = std::move(token);  // a later entry updates the flags
        return;
      }
    }
  }
  if (const auto in_vocab = impl.bpe_vocab.find(token.content); in_vocab != impl.bpe_vocab.end()) {
    token.id = in_vocab->second;
  } else {
    const auto vocab_entries = static_cast<int32_t>(impl.bpe_vocab.size());
    int32_t largest = -1;
    for (const AddedToken& existing : impl.added) largest = std::max(largest, existing.id);
    token.id = largest >= vocab_entries ? largest + 1 : vocab_entries;
  }
  if (token.id >= kMaxTokenId) throw Error(ErrorCategory::kInvalidModel, "too many added tokens");
  impl.added_ids.emplace(token.content, token.id);
  impl.added.push_back(std::move(token));
}

// tokenizer_config.json (transformers' file): the names of the eos/bos/pad tokens, and
// added tokens that tokenizer.json lacks (transformers adds those when it loads, through the
// same HF call, so they get ids the same way).
void Loader::load_config(Tokenizer::Impl& impl) {
  if (config_path_.empty() || !std::filesystem::exists(config_path_)) return;
  const json config = read_json(config_path_);
  if (!config.is_object())
    throw Error(ErrorCategory::kInvalidModel, config_path_.string() + ": must be a JSON object");
  if (const auto decoder = config.find("added_tokens_decoder");
      decoder != config.end() && decoder->is_object()) {
    for (const auto& [key, entry] : decoder->items()) {
      int32_t id = -1;
      try {
        id = std::stoi(key);
      } catch (const std::exception&) {
        throw Error(
            ErrorCategory::kInvalidModel,
            config_path_.string() + ": added_tokens_decoder key \"" + key + "\" is not a token id");
      }
      if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string())
        continue;
      const std::string content = entry["content"].get<std::string>();
      if (impl.added_ids.count(content) || id < 0 || id >= kMaxTokenId || content.empty()) continue;
      if (tok::utf8_valid_prefix(content) != content.size()) continue;
      AddedToken token;
      token.content = content;
      read_flags(entry, "added_tokens_decoder", token);
      add_token(impl, std::move(token));
    }
  }
  auto named = [&](const char* key) -> std::optional<int32_t> {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) return std::nullopt;
    std::string content;
    if (it->is_string()) {
      content = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      content = (*it)["content"].get<std::string>();
    } else {
      return std::nullopt;
    }
    if (const auto added = impl.added_ids.find(content); added != impl.added_ids.end())
      return added->second;
    if (const auto bpe = impl.bpe_vocab.find(content); bpe != impl.bpe_vocab.end())
      return bpe->second;
    return std::nullopt;
  };
  impl.eos = named("eos_token");
  impl.bos = named("bos_token");
  impl.pad = named("pad_token");
}

}  // namespace

void finish_vocabulary(Tokenizer::Impl& impl) {
  using Kind = Tokenizer::Impl::Kind;
  int32_t max_id = static_cast<int32_t>(impl.kind.size()) - 1;
  for (const AddedToken& token : impl.added) max_id = std::max(max_id, token.id);
  impl.token_text.resize(static_cast<size_t>(max_id + 1));
  impl.kind.resize(static_cast<size_t>(max_id + 1), Kind::kNone);
  std::vector<tok::AddedTokenRule> raw_rules;
  std::vector<tok::AddedTokenRule> normalized_rules;
  // HF puts special tokens first; the order only matters for identical contents.
  for (int pass = 0; pass < 2; ++pass) {
    for (const AddedToken& token : impl.added) {
      if (token.special != (pass == 0)) continue;
      const auto index = static_cast<size_t>(token.id);
      impl.token_text[index] = token.content;
      impl.kind[index] = token.special ? Kind::kSpecial : Kind::kAdded;
      tok::AddedTokenRule rule{token.content,     token.id,     token.special,
                               token.single_word, token.lstrip, token.rstrip};
      if (token.normalized) {
        // Matched against normalised text, so the token's text is normalised too.
        if (impl.nfc) impl.nfc->normalize(token.content, rule.content);
        normalized_rules.push_back(std::move(rule));
      } else {
        raw_rules.push_back(std::move(rule));
      }
    }
  }
  impl.raw_matcher = std::make_unique<tok::AddedTokenMatcher>(std::move(raw_rules));
  impl.normalized_matcher = std::make_unique<tok::AddedTokenMatcher>(std::move(normalized_rules));

  // What decode produces per token: the bytes behind byte-level characters, or, for a token
  // with characters outside that alphabet (some added tokens), its UTF-8 text, as HF's
  // ByteLevel decoder does.
  tok::ByteLevelAlphabet alphabet;
  impl.token_bytes.clear();
  impl.token_bytes_at.assign(impl.kind.size() + 1, 0);
  for (size_t id = 0; id < impl.kind.size(); ++id) {
    impl.token_bytes_at[id] = static_cast<uint32_t>(impl.token_bytes.size());
    if (impl.kind[id] == Kind::kNone) continue;
    const std::string& text = impl.token_text[id];
    const size_t before = impl.token_bytes.size();
    if (!alphabet.to_bytes(text, impl.token_bytes)) {
      impl.token_bytes.resize(before);
      impl.token_bytes.append(text);
    }
  }
  impl.token_bytes_at[impl.kind.size()] = static_cast<uint32_t>(impl.token_bytes.size());
}

namespace {

void Loader::load(Tokenizer::Impl& impl) {
  std::filesystem::path json_path = source_;
  if (std::filesystem::is_directory(source_)) json_path = source_ / kJsonFile;
  if (!std::filesystem::exists(json_path)) {
    if (json_path != source_ && !std::filesystem::exists(source_ / "config.json")) {
      // Nothing of a model here at all: say so, not only that the first file looked for is missing.
      throw Error(ErrorCategory::kIo, source_.string() +
                                          " is not a model folder: it has no config.json and no tokenizer.json "
                                          "(a Hugging Face model folder holds config.json, tokenizer.json and "
                                          "*.safetensors)");
    }
    throw Error(ErrorCategory::kIo,
                json_path.string() + ": no such file (a model folder needs tokenizer.json)");
  }
  source_ = json_path;
  config_path_ = json_path.parent_path() / "tokenizer_config.json";
  tok::TokenizerJson parsed = tok::parse_tokenizer_json(read_text_file(json_path), json_path.string());
  const json& root = parsed.root;
  if (!root.is_object()) invalid("must be a JSON object");
  const auto model = root.find("model");
  if (model == root.end()) invalid("\"model\" is missing");
  load_normalizer(root, impl);
  load_pre_tokenizer(root, impl);
  check_decoder_and_post_processor(root);
  load_model(*model, parsed, impl);
  load_added_tokens(root, impl);
  load_config(impl);
  finish_vocabulary(impl);
}

}  // namespace

bool names_qwen_v1_tokenizer(const std::filesystem::path& dir) {
  for (const char* name : {"tokenizer_config.json", "config.json"}) {
    const std::filesystem::path file = dir / name;
    if (!std::filesystem::exists(file)) continue;
    try {
      const json config = read_json_file(file);
      const auto found = config.find("tokenizer_class");
      if (found != config.end() && *found == "QWenTokenizer") return true;
    } catch (const Error&) {
      // Reported by whatever reads the file for its own purpose.
    }
  }
  return false;
}

bool Tokenizer::present_in(const std::filesystem::path& model_dir) {
  std::error_code ignored;
  return std::filesystem::exists(model_dir / kJsonFile, ignored) ||
         std::filesystem::exists(model_dir / kTiktokenFile, ignored);
}

std::string Tokenizer::file_names() { return std::string(kJsonFile) + " or " + kTiktokenFile; }

std::unique_ptr<Tokenizer::Impl> load_tokenizer_impl(const std::filesystem::path& path) {
  // The original Qwen's folders carry qwen.tiktoken (and a tokenizer_config.json naming
  // QWenTokenizer) instead of tokenizer.json.
  if (path.extension() == ".tiktoken") return load_tiktoken_impl(path);
  if (std::filesystem::is_directory(path) && !std::filesystem::exists(path / kJsonFile) &&
      (std::filesystem::exists(path / kTiktokenFile) || names_qwen_v1_tokenizer(path))) {
    return load_tiktoken_impl(path / kTiktokenFile);
  }
  auto impl = std::make_unique<Tokenizer::Impl>();
  Loader(path).load(*impl);
  return impl;
}

}  // namespace qwenrt
