// The original Qwen's tokenizer (tokenization_qwen.py): tiktoken over qwen.tiktoken, whose
// lines are `base64(token bytes) rank`. tiktoken has no merges list: two adjacent parts merge
// when their concatenation is a token, lowest rank first, leftmost on ties. That is the
// existing BPE model with one rule per way of writing a token as two tokens, ranked by the
// token, so both tokenizers share one BPE, one pre-tokenizer and one added-token matcher.
// The specials follow the ranks; text is NFC-normalised as a whole before anything else.
#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer_impl.h"

namespace qwenrt {
namespace {

// tokenization_qwen.py's PAT_STR (the same split as Qwen2's tokenizer.json).
constexpr std::string_view kQwenV1Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr int kExtraSpecials = 205;  // <|extra_0|> ... <|extra_204|>

// Standard base64 with padding, as Python's base64.b64decode accepts it; false if malformed.
bool decode_base64(std::string_view text, std::string& out) {
  static const std::array<int8_t, 256> kValues = [] {
    std::array<int8_t, 256> values{};
    values.fill(-1);
    const std::string_view alphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i)
      values[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return values;
  }();
  out.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  size_t padding = 0;
  while (padding < 2 && text[text.size() - 1 - padding] == '=') ++padding;
  const size_t data = text.size() - padding;
  uint32_t buffer = 0;
  int bits = 0;
  for (size_t i = 0; i < data; ++i) {
    const int8_t value = kValues[static_cast<uint8_t>(text[i])];
    if (value < 0) return false;
    buffer = (buffer << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  // Leftover bits must be zero, as in canonical base64.
  return (buffer & ((1u << bits) - 1)) == 0;
}

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& message) {
  throw Error(ErrorCategory::kInvalidModel, file.string() + ": " + message);
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> load_tiktoken_impl(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) {
    throw Error(ErrorCategory::kIo, file.string() +
                                        ": no such file (the original Qwen's tokenizer; token-id "
                                        "commands work without it)");
  }
  const std::string contents = read_text_file(file);
  // Token bytes by rank, from lines `base64 rank` (blank lines skipped, as tiktoken does).
  std::vector<std::string> by_rank;
  std::vector<bool> seen;
  std::unordered_map<std::string, int32_t> rank_of;
  size_t line_number = 0;
  std::string bytes;
  for (size_t begin = 0; begin < contents.size();) {
    size_t end = contents.find('\n', begin);
    if (end == std::string::npos) end = contents.size();
    std::string_view line(contents.data() + begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const auto where = [&] { return "line " + std::to_string(line_number); };
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      fail(file, where() + ": expected 'base64-token rank'");
    }
    if (!decode_base64(line.substr(0, space), bytes))
      fail(file, where() + ": the token is not valid base64");
    const std::string_view rank_text = line.substr(space + 1);
    int64_t rank = 0;
    for (char c : rank_text) {
      if (c < '0' || c > '9' || rank > (1 << 20))
        fail(file, where() + ": the rank is not a token id");
      rank = rank * 10 + (c - '0');
    }
    if (rank_text.empty() || rank >= (1 << 20))
      fail(file, where() + ": the rank is not a token id");
    if (!rank_of.emplace(bytes, static_cast<int32_t>(rank)).second) {
      fail(file, where() + ": the token appears twice");
    }
    if (static_cast<size_t>(rank) >= by_rank.size()) {
      by_rank.resize(static_cast<size_t>(rank) + 1);
      seen.resize(static_cast<size_t>(rank) + 1, false);
    }
    if (seen[static_cast<size_t>(rank)])
      fail(file, where() + ": rank " + std::to_string(rank) + " appears twice");
    seen[static_cast<size_t>(rank)] = true;
    by_rank[static_cast<size_t>(rank)] = bytes;
  }
  if (by_rank.empty()) fail(file, "no tokens");
  // The specials are numbered from the number of ranks, so the ranks must leave no gap.
  if (const auto gap = std::find(seen.begin(), seen.end(), false); gap != seen.end()) {
    fail(file, "no token has rank " + std::to_string(gap - seen.begin()) + " (ranks must be 0 .. " +
                   std::to_string(by_rank.size() - 1) + " without gaps)");
  }

  auto impl = std::make_unique<Tokenizer::Impl>();
  using Kind = Tokenizer::Impl::Kind;
  const tok::ByteLevelAlphabet alphabet;
  const auto n_ranks = static_cast<int32_t>(by_rank.size());
  impl->token_text.resize(by_rank.size());
  impl->kind.assign(by_rank.size(), Kind::kBpe);
  impl->bpe_vocab.reserve(by_rank.size());
  std::array<int32_t, 256> byte_ids{};
  byte_ids.fill(-1);
  for (int32_t id = 0; id < n_ranks; ++id) {
    const std::string& token = by_rank[static_cast<size_t>(id)];
    impl->token_text[static_cast<size_t>(id)] = alphabet.to_chars(token);
    impl->bpe_vocab.emplace(impl->token_text[static_cast<size_t>(id)], id);
    if (token.size() == 1) byte_ids[static_cast<uint8_t>(token[0])] = id;
  }
  for (int byte = 0; byte < 256; ++byte) {
    if (byte_ids[static_cast<size_t>(byte)] < 0) {
      fail(file, "no token for the single byte " + std::to_string(byte) +
                     " (not a byte-level vocabulary)");
    }
  }
  // One rule per split of a token into two tokens, all at the token's rank.
  std::vector<tok::MergeRule> rules;
  rules.reserve(by_rank.size() * 2);
  for (int32_t id = 0; id < n_ranks; ++id) {
    const std::string& token = by_rank[static_cast<size_t>(id)];
    for (size_t split = 1; split < token.size(); ++split) {
      const auto left = rank_of.find(token.substr(0, split));
      if (left == rank_of.end()) continue;
      const auto right = rank_of.find(token.substr(split));
      if (right == rank_of.end()) continue;
      rules.push_back({left->second, right->second, id, id});
    }
  }
  // tiktoken returns a piece that is itself a token as that token, merging or not.
  const Tokenizer::Impl::TokenMap* words = &impl->bpe_vocab;
  auto whole_word = [words](std::string_view word) -> std::optional<int32_t> {
    const auto it = words->find(word);
    if (it == words->end()) return std::nullopt;
    return it->second;
  };
  impl->bpe = std::make_unique<tok::BpeModel>(byte_ids, rules, whole_word);

  const std::string what = file.string() + ": the split pattern";
  impl->splitters.emplace_back(tok::onig_to_pcre2(kQwenV1Pattern, what), false, what);
  impl->nfc.emplace();
  impl->nfc_whole_text = true;

  std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < kExtraSpecials; ++i)
    specials.push_back("<|extra_" + std::to_string(i) + "|>");
  for (size_t i = 0; i < specials.size(); ++i) {
    AddedToken token;
    token.id = n_ranks + static_cast<int32_t>(i);
    token.content = specials[i];
    token.special = true;
    impl->added_ids.emplace(token.content, token.id);
    impl->added.push_back(std::move(token));
  }
  impl->eos = n_ranks;  // <|endoftext|>, the base models' end of text
  impl->pad = n_ranks;
  finish_vocabulary(*impl);
  return impl;
}

}  // namespace qwenrt
