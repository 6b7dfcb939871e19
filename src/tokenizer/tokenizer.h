// qwenrt's tokenizer: byte-level BPE that reproduces Hugging Face `tokenizers` on the
// tokenizer.json files of Qwen2, Qwen2.5 and Qwen3 (and others built the same way).
//
// Encoding follows HF's pipeline: added tokens are found in the raw text; the text between
// them is normalised (NFC), split by the pre-tokenizer's regex, mapped to GPT-2's byte
// alphabet and merged by BPE rank. Decoding maps tokens back to bytes and turns invalid
// UTF-8 into U+FFFD as HF does. tokenizer.json features outside this are refused at load
// with an error that names them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qwenrt {

// A token added on top of the BPE vocabulary (tokenizer.json "added_tokens").
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // control token: skipped by decode(skip_special = true)
  bool single_word = false;  // matched only when not inside a word
  bool lstrip = false;       // takes the whitespace before it
  bool rstrip = false;       // takes the whitespace after it
  bool normalized = false;   // matched in normalised rather than raw text
};

class Tokenizer {
 public:
  // Loads `path`/tokenizer.json (and tokenizer_config.json beside it, when present, for
  // the eos/bos/pad tokens and added tokens it declares), or `path` itself when it is a
  // file. Throws qwenrt::Error: kIo (missing/unreadable), kInvalidModel (malformed),
  // kUnsupported (a tokenizer.json feature this implementation does not reproduce).
  static Tokenizer load(const std::filesystem::path& model_dir_or_tokenizer_json);
  // Whether the folder holds a tokenizer file load() reads (tokenizer.json, or the original
  // Qwen's qwen.tiktoken); without one, load() fails with kIo.
  static bool present_in(const std::filesystem::path& model_dir);
  // The names of those files, for messages ("tokenizer.json or qwen.tiktoken").
  static std::string file_names();

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (UTF-8; invalid UTF-8 throws kInvalidArgument). With
  // allow_special, special-token strings in the text become their tokens, like HF's
  // encode(text); without, they are encoded as plain text, like HF with
  // encode_special_tokens = True (transformers' split_special_tokens=True) — use this for
  // untrusted content such as chat messages. Added tokens that are not special (<think>,
  // <tool_call>) are recognised in both modes, as in HF. Adds no BOS/EOS. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // The same, appending to `ids`.
  void encode_into(std::string_view text, bool allow_special, std::vector<int32_t>& ids) const;

  // Text of `ids`, as HF's decode: unknown ids are skipped; with skip_special, special
  // tokens are left out; bytes that do not form valid UTF-8 become U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes a token stands for (empty for unknown ids).
  std::string_view token_bytes(int32_t id) const;
  // Token text as stored in tokenizer.json (byte-level alphabet for BPE tokens).
  std::optional<std::string> id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;

  // One more than the largest token id (BPE vocabulary and added tokens).
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;

  // Whether this is the original Qwen's tokenizer (qwen.tiktoken).
  bool qwen_v1() const;

  // Tokens named by tokenizer_config.json (eos_token, bos_token, pad_token), if any.
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> pad_id() const;

  struct Impl;  // opaque: the internals (tokenizer_impl.h)

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for streamed generation: push() returns the text that the new token
// completes, holding back the bytes of a character that is not finished yet; flush()
// returns what is left (an unfinished character becomes U+FFFD). The concatenated output
// equals Tokenizer::decode of all pushed ids.
class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  std::string flush();
  // Whether special tokens add nothing to the text.
  bool skips_special() const { return skip_special_; }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an unfinished character
};

}  // namespace qwenrt
