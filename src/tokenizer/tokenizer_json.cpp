#include "tokenizer/tokenizer_json.h"

#include "core/error.h"
#include "core/json.h"

namespace qwenrt::tok {
namespace {

using nlohmann::json;

// SAX handler: builds the JSON tree, except inside model.vocab and model.merges.
class Reader : public nlohmann::json_sax<json> {
 public:
  explicit Reader(TokenizerJson& out) : out_(out) {}
  std::string error;

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return vocab_entry(v);
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      return vocab_entry(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1
                                                                       : static_cast<int64_t>(v));
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) {  // "left right"
      const size_t space = v.find(' ');
      if (space == std::string::npos || v.find(' ', space + 1) != std::string::npos) {
        return fail(merge_name() + " must be two tokens separated by one space");
      }
      out_.merges.emplace_back(v.substr(0, space), v.substr(space + 1));
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      pair_.push_back(std::move(v));
      return true;
    }
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return fail("unexpected binary value"); }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kTree) return fail(in_list() + " holds an unexpected object");
    if (at_model_field("vocab")) {
      mode_ = Mode::kVocab;
      out_.has_vocab = true;
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    keys_.back() = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kTree;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::kTree) return fail(in_list() + " holds an unexpected list");
    if (at_model_field("merges")) {
      mode_ = Mode::kMerges;
      out_.has_merges = true;
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_.size() != 2) return fail(merge_name() + " must be \"a b\" or [\"a\", \"b\"]");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kTree;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    if (error.empty()) error = "not valid JSON: " + json_error_text(e);
    return false;
  }

 private:
  enum class Mode { kTree, kVocab, kMerges, kMergePair };

  bool fail(const std::string& message) {
    error = message;
    return false;
  }
  std::string merge_name() const {
    return "model.merges[" + std::to_string(out_.merges.size()) + "]";
  }
  std::string in_list() const { return mode_ == Mode::kVocab ? "model.vocab" : merge_name(); }

  // Whether the container about to open is the value of `field` in the top-level "model".
  bool at_model_field(const char* field) const {
    return stack_.size() == 2 && keys_[0] == "model" && keys_[1] == field && stack_[1]->is_object();
  }

  bool vocab_entry(int64_t id) {
    out_.vocab.emplace_back(std::move(vocab_key_), id);
    return true;
  }

  // Places a value in the innermost open container (or as the root).
  json* place(json&& v) {
    if (stack_.empty()) {
      out_.root = std::move(v);
      return &out_.root;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[keys_.back()];
    slot = std::move(v);
    return &slot;
  }
  bool value(json&& v) {
    if (mode_ == Mode::kVocab) return fail("model.vocab values must be token ids");
    if (mode_ != Mode::kTree) return fail(merge_name() + " must be \"a b\" or [\"a\", \"b\"]");
    place(std::move(v));
    return true;
  }
  bool open(json&& container) {
    if (static_cast<int>(stack_.size()) >= JsonParseOptions().max_depth) {
      return fail("nested deeper than " + std::to_string(JsonParseOptions().max_depth) + " levels");
    }
    stack_.push_back(place(std::move(container)));
    keys_.emplace_back();
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  TokenizerJson& out_;
  Mode mode_ = Mode::kTree;
  std::vector<json*> stack_;       // open containers; pointers stay valid while open
  std::vector<std::string> keys_;  // current key of each open container
  std::string vocab_key_;
  std::vector<std::string> pair_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(const std::string& text, const std::string& what) {
  TokenizerJson out;
  out.vocab.reserve(1 << 17);
  out.merges.reserve(1 << 17);
  refuse_nul_bytes(text, what, ErrorCategory::kInvalidModel);
  Reader reader(out);
  const bool ok = json::sax_parse(text, &reader, json::input_format_t::json, /*strict=*/true);
  if (!ok || !reader.error.empty()) {
    throw Error(
        ErrorCategory::kInvalidModel,
        what + ": " + (reader.error.empty() ? std::string("not valid JSON") : reader.error));
  }
  return out;
}

}  // namespace qwenrt::tok
