// UTF-8 helpers shared by the tokenizer: strict validation of input text, the lossy decoding
// that Hugging Face's byte-level decoder applies to decoded bytes (Rust's
// String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD), and the test for
// an unfinished character at the end of a byte stream used by the streaming decoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qwenrt::tok {

// Length of the longest prefix of `bytes` that is well-formed UTF-8 (== bytes.size() when all
// of it is).
size_t utf8_valid_prefix(std::string_view bytes);

// Appends `bytes` to `out`, replacing each maximal invalid subpart with U+FFFD.
void append_utf8_lossy(std::string_view bytes, std::string& out);

// Number of bytes at the end of `bytes` that start a character but do not finish it yet
// (0-3): holding them back until more bytes arrive changes nothing in the lossy decoding.
size_t utf8_unfinished_tail(std::string_view bytes);

// Decodes (lossily) what of `pending` is finished and leaves in it only the bytes of a
// character not finished yet: the step of a decoder fed bytes a token at a time.
std::string take_finished_utf8(std::string& pending);

// Number of code points in well-formed UTF-8 (Python's len()).
inline size_t utf8_length(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

// Whether a C1 control character (U+0080–U+009F, which some terminals act on as they do on
// ESC sequences) starts at `pos`: its encoding is C2 80 to C2 9F.
inline bool c1_control_at(std::string_view text, size_t pos) {
  return pos + 1 < text.size() && static_cast<uint8_t>(text[pos]) == 0xC2 &&
         static_cast<uint8_t>(text[pos + 1]) >= 0x80 && static_cast<uint8_t>(text[pos + 1]) <= 0x9F;
}

// Appends the UTF-8 encoding of a code point (< 0x110000, not a surrogate).
void append_utf8(char32_t code_point, std::string& out);

// Decodes the code point starting at `pos` of well-formed UTF-8 text and advances `pos`.
inline char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  auto cont = [&](size_t i) {
    return static_cast<char32_t>(static_cast<uint8_t>(text[pos + i]) & 0x3F);
  };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    pos += 2;
  } else if (b0 < 0xF0) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    pos += 3;
  } else {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    pos += 4;
  }
  return cp;
}

}  // namespace qwenrt::tok
