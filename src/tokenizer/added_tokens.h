// Added tokens (special tokens such as <|im_start|> and plain added ones such as <think>)
// are found in the text before normalisation and pre-tokenisation, as HF's AddedVocabulary
// does: leftmost-longest matches, each honouring its token's single_word, lstrip and rstrip
// flags; tokens flagged special can be switched off so their text is encoded as plain text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qwenrt::tok {

// A part of the text: an added token (id >= 0) or text to tokenise (id == -1), by byte
// offsets [begin, end).
struct Segment {
  uint32_t begin;
  uint32_t end;
  int32_t id;
};

struct AddedTokenRule {
  std::string content;  // what is matched (for normalized tokens: its normalised form)
  int32_t id;
  bool special;
  bool single_word;
  bool lstrip;
  bool rstrip;
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedTokenRule> rules);

  bool empty() const { return rules_.empty(); }

  // Splits `text` (valid UTF-8) into segments that cover it; with `special_as_text`, tokens
  // flagged special are not matched (HF's encode_special_tokens).
  void split(std::string_view text, bool special_as_text, std::vector<Segment>& out) const;

 private:
  // Leftmost-longest match at or after `from`: index into rules_, or -1.
  int find(std::string_view text, size_t from, size_t& match_begin) const;

  std::vector<AddedTokenRule> rules_;
  std::array<std::vector<int>, 256> by_first_byte_;  // rules starting with each byte
  std::string first_bytes_;                          // the distinct first bytes
};

}  // namespace qwenrt::tok
