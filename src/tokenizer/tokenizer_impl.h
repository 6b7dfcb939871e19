// Internal state of qwenrt::Tokenizer, shared by the loader (tokenizer_load.cpp) and the
// encode/decode paths (tokenizer.cpp).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt {

struct Tokenizer::Impl {
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  enum class Kind : uint8_t { kNone, kBpe, kAdded, kSpecial };


  // Vocabulary by id: text as in tokenizer.json, kind, and the bytes decode produces.
  std::vector<std::string> token_text;
  std::vector<Kind> kind;
  std::string token_bytes;               // all tokens' bytes, back to back
  std::vector<uint32_t> token_bytes_at;  // size vocab_size + 1
  using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  TokenMap bpe_vocab;  // model.vocab
  TokenMap added_ids;  // added token content -> id (looked up first, as in HF)
  std::vector<AddedToken> added;

  // Encoding pipeline.
  std::optional<tok::NfcNormalizer> nfc;                       // absent: no normalizer
  bool nfc_whole_text = false;  // NFC before added tokens are found (tiktoken), not between
  std::vector<tok::RegexSplitter> splitters;                   // applied in order to each piece
  std::unique_ptr<tok::AddedTokenMatcher> raw_matcher;         // tokens with normalized=false
  std::unique_ptr<tok::AddedTokenMatcher> normalized_matcher;  // tokens with normalized=true
  std::unique_ptr<tok::BpeModel> bpe;

  std::optional<int32_t> eos;
  std::optional<int32_t> bos;
  std::optional<int32_t> pad;

  void encode(std::string_view text, bool allow_special, std::vector<int32_t>& ids) const;
};

// Builds the tokenizer from tokenizer.json (tokenizer_load.cpp), or from the original Qwen's
// qwen.tiktoken when a model folder has that instead.
std::unique_ptr<Tokenizer::Impl> load_tokenizer_impl(const std::filesystem::path& path);
// Whether tokenizer_config.json or config.json in `dir` names the original Qwen's tokenizer
// (QWenTokenizer): its folders carry qwen.tiktoken and no chat template. An unreadable file
// counts as not naming it.
bool names_qwen_v1_tokenizer(const std::filesystem::path& dir);

// The original Qwen's tokenizer from qwen.tiktoken (tiktoken_load.cpp).
std::unique_ptr<Tokenizer::Impl> load_tiktoken_impl(const std::filesystem::path& file);

// Completes the vocabulary once the BPE tokens and impl.added are known: ids of added tokens,
// their matchers and every token's decoded bytes (shared by both loaders).
void finish_vocabulary(Tokenizer::Impl& impl);

}  // namespace qwenrt
