// Normalisation and pre-tokenisation: NFC (utf8proc) with a quick check that skips text
// NFC cannot change, and the regex split of tokenizer.json's `Split` pre-tokenizer, run by
// PCRE2 with JIT. HF runs these patterns with Oniguruma; onig_to_pcre2() rewrites the
// constructs whose meaning differs between the two engines and refuses the ones it cannot.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

namespace qwenrt::tok {

class NfcNormalizer {
 public:
  NfcNormalizer();
  // Writes NFC(text) to `out` and returns true, or returns false when NFC leaves `text` as
  // it is (then `out` is untouched). `text` must be valid UTF-8.
  bool normalize(std::string_view text, std::string& out) const;

 private:
  bool may_change(char32_t cp) const { return (maybe_[cp >> 6] >> (cp & 63)) & 1; }
  std::vector<uint64_t> maybe_;  // one bit per code point: NFC may change text around it
};

// Rewrites an Oniguruma pattern (HF `tokenizers` syntax) into PCRE2 syntax with the same
// meaning under PCRE2_UTF | PCRE2_UCP. Throws qwenrt::Error (kUnsupported) for constructs
// whose meaning it does not reproduce. `what` names the pattern in messages.
std::string onig_to_pcre2(std::string_view pattern, const std::string& what);

// A piece of text by byte offsets [begin, end).
using Span = std::pair<uint32_t, uint32_t>;

class RegexSplitter {
 public:
  // `pattern` is PCRE2 syntax (see onig_to_pcre2); literal: match the text as is.
  RegexSplitter(const std::string& pattern, bool literal, const std::string& what);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&& other) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) = delete;
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Match state for one caller at a time (encode creates one per call).
  class MatchState {
   public:
    explicit MatchState(const RegexSplitter& splitter);
    ~MatchState();
    MatchState(const MatchState&) = delete;
    MatchState& operator=(const MatchState&) = delete;

   private:
    friend class RegexSplitter;
    pcre2_real_match_data_8* data_ = nullptr;
  };

  // Appends to `pieces` the non-empty pieces of `text` (valid UTF-8) under HF's "Isolated"
  // behaviour: every match is a piece and so is every gap between matches.
  void split(std::string_view text, MatchState& state, std::vector<Span>& pieces) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
  std::string what_;
};

}  // namespace qwenrt::tok
