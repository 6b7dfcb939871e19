#include "core/json.h"

#include <limits>
#include <memory>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/mapped_file.h"

namespace qwenrt {
namespace {

// Objects up to this many keys find duplicates by a linear scan; wider ones get a hash table.
constexpr size_t kLinearKeyScan = 16;

// Key equality that counts its calls (JsonParseStats::key_comparisons).
struct CountingEqual {
  size_t* count;
  bool operator()(const std::string& a, const std::string& b) const {
    ++*count;
    return a == b;
  }
};

// Where an object's entries live: ordered_map is a vector of pairs, used directly (its own
// insert searches); std::map as it is.
template <typename Object, bool kOrdered>
struct EntriesOf {
  using type = Object;
};
template <typename Object>
struct EntriesOf<Object, true> {
  using type = typename Object::Container;
};

// SAX handler building a Json tree (nlohmann::json or ordered_json) with a depth limit and
// linear-time duplicate-key detection. Final, so the parser's calls to it are direct.
template <typename Json>
class TreeBuilder final : public nlohmann::json_sax<Json> {
  using Base = nlohmann::json_sax<Json>;
  using Array = typename Json::array_t;
  using Object = typename Json::object_t;
  static constexpr bool kOrdered = std::is_same_v<Json, nlohmann::ordered_json>;
  using Entries = typename EntriesOf<Object, kOrdered>::type;

 public:
  TreeBuilder(const JsonParseOptions& options, JsonParseStats& stats) : options_(options), stats_(stats) {}

  Json root;
  std::string error;

  bool null() override { return place(nullptr); }
  bool boolean(bool v) override { return place(v); }
  bool number_integer(typename Base::number_integer_t v) override { return place(v); }
  bool number_unsigned(typename Base::number_unsigned_t v) override {
    if (options_.exact_big_integers && v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return place_big_integer(std::to_string(v));
    }
    return place(v);
  }
  bool number_float(typename Base::number_float_t v, const typename Base::string_t& text) override {
    // An integer past 2^64 reaches here as a double; its text is exact.
    if (options_.exact_big_integers && text.find_first_of(".eE") == std::string::npos) return place_big_integer(text);
    return place(v);
  }
  // Copied, not moved: the lexer's buffer keeps its capacity for the strings that follow.
  bool string(typename Base::string_t& v) override { return place(static_cast<const typename Base::string_t&>(v)); }
  bool binary(typename Base::binary_t&) override { return fail("unexpected binary value"); }

  bool start_object(std::size_t) override { return open(nlohmann::detail::value_t::object); }
  bool key(typename Base::string_t& k) override;
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(nlohmann::detail::value_t::array); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    if (error.empty()) error = "not valid JSON: " + json_error_text(e);
    return false;
  }

 private:
  using Keys = std::unordered_map<std::string, size_t, std::hash<std::string>, CountingEqual>;
  struct Frame {
    Array* array = nullptr;           // an open array's items
    Entries* entries = nullptr;       // an open object's entries
    Json* slot = nullptr;             // objects: where the value of the key just read goes
    std::unique_ptr<Keys> key_index;  // wide ordered objects: key -> entry index
  };

  bool fail(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }

  // Index of `key` among the entries of the ordered object of `frame`, or npos.
  size_t find_key(const Frame& frame, const std::string& key) {
    if (frame.key_index) {
      const auto it = frame.key_index->find(key);
      return it == frame.key_index->end() ? std::string::npos : it->second;
    }
    const Entries& entries = *frame.entries;
    for (size_t i = 0; i < entries.size(); ++i) {
      ++stats_.key_comparisons;
      if (entries[i].first == key) return i;
    }
    return std::string::npos;
  }

  // The value's place: the root, the end of the innermost open array, or the slot of the
  // key just read. Containers stay where they are while they are open.
  Json* next_slot() {
    if (frames_.empty()) return &root;
    Frame& frame = frames_.back();
    if (frame.array != nullptr) return &frame.array->emplace_back();
    return frame.slot;
  }

  template <typename T>
  bool place(T&& value) {
    *next_slot() = Json(std::forward<T>(value));
    return true;
  }

  bool place_big_integer(const std::string& digits) {
    return place(Json::binary(typename Json::binary_t::container_type(digits.begin(), digits.end()), kJsonBigIntegerSubtype));
  }

  bool refuse_duplicates() const { return options_.reject_top_level_duplicate_keys && frames_.size() == 1; }

  bool open(nlohmann::detail::value_t type) {
    if (static_cast<int>(frames_.size()) >= options_.max_depth) {
      return fail("nested deeper than " + std::to_string(options_.max_depth) + " levels");
    }
    Json* slot = next_slot();
    *slot = Json(type);
    Frame frame;
    if (type == nlohmann::detail::value_t::array) {
      frame.array = slot->template get_ptr<Array*>();
    } else {
      frame.entries = static_cast<Entries*>(slot->template get_ptr<Object*>());
    }
    frames_.push_back(std::move(frame));
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  bool duplicate(const std::string& key) { return fail("duplicate key '" + quote_for_message(key) + "'"); }

  const JsonParseOptions& options_;
  JsonParseStats& stats_;
  std::vector<Frame> frames_;  // open containers
};

// A key names the slot of the value that follows. A key seen before in the same object
// keeps its first place and takes the last value, as Python's dict does.
template <typename Json>
bool TreeBuilder<Json>::key(typename Base::string_t& k) {
  ++stats_.keys;
  Frame& frame = frames_.back();
  Entries& entries = *frame.entries;
  if constexpr (kOrdered) {
    const size_t existing = find_key(frame, k);
    if (existing != std::string::npos) {
      if (refuse_duplicates()) return duplicate(k);
      frame.slot = &entries[existing].second;
      return true;
    }
    entries.emplace_back(k, Json());  // the vector's: no linear search
    if (frame.key_index) {
      frame.key_index->emplace(k, entries.size() - 1);
    } else if (entries.size() > kLinearKeyScan) {
      frame.key_index = std::make_unique<Keys>(entries.size() * 2, std::hash<std::string>(),
                                               CountingEqual{&stats_.key_comparisons});
      for (size_t i = 0; i < entries.size(); ++i) frame.key_index->emplace(entries[i].first, i);
    }
    frame.slot = &entries.back().second;
  } else {
    auto [it, inserted] = entries.try_emplace(k);
    if (!inserted && refuse_duplicates()) return duplicate(k);
    frame.slot = &it->second;
  }
  return true;
}

template <typename Json>
Json parse_with(std::string_view text, const std::string& name, const JsonParseOptions& options,
                JsonParseStats* stats) {
  refuse_nul_bytes(text, name, options.category);
  JsonParseStats local;
  TreeBuilder<Json> builder(options, stats ? *stats : local);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &builder, Json::input_format_t::json, /*strict=*/true);
  } catch (const std::bad_alloc&) {
    throw Error(options.category, name + ": too large to parse (out of memory)");
  } catch (const std::exception& e) {  // the library reports through parse_error; be sure
    throw Error(options.category, name + ": not valid JSON: " + json_error_text(e));
  }
  if (!ok || !builder.error.empty()) {
    throw Error(options.category, name + ": " + (builder.error.empty() ? "not valid JSON" : builder.error));
  }
  return std::move(builder.root);
}

}  // namespace

void refuse_nul_bytes(std::string_view text, const std::string& name, ErrorCategory category) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw Error(category, name + ": not valid JSON: a NUL byte at offset " + std::to_string(nul));
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& name, const JsonParseOptions& options,
                          JsonParseStats* stats) {
  return parse_with<nlohmann::json>(text, name, options, stats);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& name,
                                          const JsonParseOptions& options, JsonParseStats* stats) {
  return parse_with<nlohmann::ordered_json>(text, name, options, stats);
}

nlohmann::json read_json_file(const std::filesystem::path& path, const JsonParseOptions& options) {
  return parse_json(read_text_file(path), path.string(), options);
}

nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path, const JsonParseOptions& options) {
  return parse_ordered_json(read_text_file(path), path.string(), options);
}

std::string json_error_text(const std::exception& error) {
  std::string_view text = error.what();
  // "[json.exception.parse_error.101] parse error at line 1, ...": the id means nothing to users.
  if (text.rfind("[json.exception.", 0) == 0) {
    const size_t end = text.find("] ");
    if (end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  return quote_for_message(text, 240);
}

void append_byte_escape(std::string& out, unsigned char byte) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out.push_back(kHex[byte >> 4]);
  out.push_back(kHex[byte & 15]);
}

std::string quote_for_message(std::string_view text, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max_bytes) {
      // Do not cut inside a UTF-8 sequence.
      while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
      if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
      return out + "...";
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      append_byte_escape(out, c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

void throw_json_field_error(const std::string& where, std::string_view key, const std::string& problem,
                            ErrorCategory category) {
  throw Error(category, where + ": '" + quote_for_message(key) + "' " + problem);
}

}  // namespace qwenrt
