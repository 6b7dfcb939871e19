// GPT-2's byte-level alphabet: every byte is shown as one printable character so that BPE
// vocabularies can be stored as text. Bytes that are printable Latin-1 map to themselves;
// the rest (controls, space, DEL, NBSP, soft hyphen) map to U+0100 onwards in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace qwenrt::tok {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();

  char32_t char_of(uint8_t byte) const { return char_of_[byte]; }

  // The alphabet's characters of `bytes`, as UTF-8.
  std::string to_chars(std::string_view bytes) const;

  // The bytes behind a token's text; false (out untouched past its old size is not
  // guaranteed) when a character is outside the alphabet. `token` must be valid UTF-8.
  bool to_bytes(std::string_view token, std::string& out) const;

 private:
  std::array<char32_t, 256> char_of_{};
  std::array<int16_t, 512> byte_of_{};  // indexed by code point (< 0x144); -1 outside
};

}  // namespace qwenrt::tok
