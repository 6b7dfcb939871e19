#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace qwenrt::tok {

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_.fill(-1);
  char32_t next_extra = 0x100;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) ||
                           (byte >= 0xAE && byte <= 0xFF);
    const char32_t c = printable ? static_cast<char32_t>(byte) : next_extra++;
    char_of_[byte] = c;
    byte_of_[c] = static_cast<int16_t>(byte);
  }
}

std::string ByteLevelAlphabet::to_chars(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(char_of_[static_cast<uint8_t>(b)], out);
  return out;
}

bool ByteLevelAlphabet::to_bytes(std::string_view token, std::string& out) const {
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t c = next_code_point(token, pos);
    if (c >= byte_of_.size() || byte_of_[c] < 0) return false;
    out.push_back(static_cast<char>(byte_of_[c]));
  }
  return true;
}

}  // namespace qwenrt::tok
