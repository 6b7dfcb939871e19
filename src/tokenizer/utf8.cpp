#include "tokenizer/utf8.h"

namespace qwenrt::tok {
namespace {

// Length of the sequence a lead byte announces; 0 for bytes that cannot start one.
int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `byte` may follow `lead` as the second byte: the ranges of Unicode's Table 3-7 that
// exclude overlong forms, surrogates and code points past U+10FFFF.
bool valid_second(uint8_t lead, uint8_t byte) {
  switch (lead) {
    case 0xE0:
      return byte >= 0xA0 && byte <= 0xBF;
    case 0xED:
      return byte >= 0x80 && byte <= 0x9F;
    case 0xF0:
      return byte >= 0x90 && byte <= 0xBF;
    case 0xF4:
      return byte >= 0x80 && byte <= 0x8F;
    default:
      return byte >= 0x80 && byte <= 0xBF;
  }
}

bool is_continuation(uint8_t byte) {
  return byte >= 0x80 && byte <= 0xBF;
}

// Examines the sequence starting at `pos`: returns its length when well-formed, otherwise
// stores in `bad` the length of the maximal invalid subpart (>= 1) and returns 0.
size_t check_sequence(std::string_view bytes, size_t pos, size_t& bad) {
  const auto lead = static_cast<uint8_t>(bytes[pos]);
  const int length = sequence_length(lead);
  if (length == 1) return 1;
  bad = 1;
  if (length == 0) return 0;
  for (int i = 1; i < length; ++i) {
    if (pos + i >= bytes.size()) return 0;
    const auto byte = static_cast<uint8_t>(bytes[pos + i]);
    const bool ok = i == 1 ? valid_second(lead, byte) : is_continuation(byte);
    if (!ok) return 0;
    bad = static_cast<size_t>(i) + 1;
  }
  return static_cast<size_t>(length);
}

}  // namespace

size_t utf8_valid_prefix(std::string_view bytes) {
  size_t pos = 0;
  const size_t size = bytes.size();
  while (pos < size) {
    // ASCII runs dominate most text: skip them eight bytes at a time.
    while (pos + 8 <= size) {
      uint64_t word = 0;
      for (int i = 0; i < 8; ++i)
        word |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[pos + i])) << (8 * i);
      if (word & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= size) break;
    size_t bad = 0;
    const size_t length = check_sequence(bytes, pos, bad);
    if (length == 0) return pos;
    pos += length;
  }
  return size;
}

void append_utf8_lossy(std::string_view bytes, std::string& out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t pos = 0;
  size_t run_start = 0;
  while (pos < bytes.size()) {
    size_t bad = 0;
    const size_t length = check_sequence(bytes, pos, bad);
    if (length > 0) {
      pos += length;
      continue;
    }
    out.append(bytes.substr(run_start, pos - run_start));
    out.append(kReplacement);
    pos += bad;
    run_start = pos;
  }
  out.append(bytes.substr(run_start));
}

std::string take_finished_utf8(std::string& pending) {
  const size_t hold = utf8_unfinished_tail(pending);
  std::string text;
  append_utf8_lossy(std::string_view(pending).substr(0, pending.size() - hold), text);
  pending.erase(0, pending.size() - hold);
  return text;
}

size_t utf8_unfinished_tail(std::string_view bytes) {
  const size_t size = bytes.size();
  // The lead byte of the last sequence is at most 3 bytes back; lead bytes are never
  // continuation bytes, so the lossy decoder starts a sequence exactly there.
  for (size_t back = 1; back <= 3 && back <= size; ++back) {
    const auto byte = static_cast<uint8_t>(bytes[size - back]);
    if (is_continuation(byte)) continue;
    const int length = sequence_length(byte);
    if (length <= static_cast<int>(back)) return 0;  // complete, ASCII or invalid lead
    if (back >= 2 && !valid_second(byte, static_cast<uint8_t>(bytes[size - back + 1]))) return 0;
    return back;
  }
  return 0;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace qwenrt::tok
