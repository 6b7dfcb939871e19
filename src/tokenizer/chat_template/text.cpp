#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include "tokenizer/chat_template/text.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace qwenrt::chat_template::text {

std::u32string decode(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  size_t i = 0;
  while (i < utf8.size()) {
    const auto lead = static_cast<unsigned char>(utf8[i]);
    int extra = 0;
    char32_t c = 0;
    if (lead < 0x80) {
      c = lead;
    } else if ((lead & 0xE0) == 0xC0) {
      c = lead & 0x1F;
      extra = 1;
    } else if ((lead & 0xF0) == 0xE0) {
      c = lead & 0x0F;
      extra = 2;
    } else if ((lead & 0xF8) == 0xF0) {
      c = lead & 0x07;
      extra = 3;
    } else {
      throw std::invalid_argument("invalid UTF-8 byte at offset " + std::to_string(i));
    }
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= utf8.size()) throw std::invalid_argument("truncated UTF-8 sequence at offset " + std::to_string(i));
      const auto cont = static_cast<unsigned char>(utf8[i + k]);
      if ((cont & 0xC0) != 0x80) throw std::invalid_argument("invalid UTF-8 sequence at offset " + std::to_string(i));
      c = (c << 6) | (cont & 0x3F);
    }
    out.push_back(c);
    i += 1 + extra;
  }
  return out;
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) tok::append_utf8(c, out);
  return out;
}

size_t length(std::string_view utf8) { return tok::utf8_length(utf8); }

bool is_space(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D:
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x20:
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
      return false;
    default:
      return true;
  }
}

namespace {

struct CodeRange {
  char32_t first, last;
};

#include "tokenizer/chat_template/numeric_ranges.inc"

template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], char32_t c) {
  const CodeRange* end = ranges + N;
  const CodeRange* at = std::upper_bound(ranges, end, c, [](char32_t v, const CodeRange& r) { return v < r.first; });
  return at != ranges && c <= (at - 1)->last;
}

}  // namespace

bool is_alpha(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool is_decimal(char32_t c) { return in_ranges(kDecimalRanges, c); }
bool is_digit(char32_t c) { return in_ranges(kDigitRanges, c); }
bool is_numeric(char32_t c) { return in_ranges(kNumericRanges, c); }
bool is_alnum(char32_t c) { return is_alpha(c) || is_numeric(c); }

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::u32string cps = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t begin = 0;
  size_t end = cps.size();
  if (left) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  return encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit,
                               bool from_right) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    if (!from_right) {
      size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t at = s.find(*sep, start);
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      parts.emplace_back(s.substr(start));
      return parts;
    }
    size_t end = s.size();
    std::vector<std::string> reversed;
    while (maxsplit < 0 || static_cast<int64_t>(reversed.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      reversed.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    reversed.emplace_back(s.substr(0, end));
    return {reversed.rbegin(), reversed.rend()};
  }
  // Whitespace split: runs of whitespace separate, leading/trailing whitespace is dropped.
  const std::u32string cps = decode(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        // The rest as it is, its trailing whitespace kept: 'a b  '.split(None, 1) is ['a', 'b  '].
        parts.push_back(encode(std::u32string_view(cps).substr(i)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_space(cps[j])) ++j;
      parts.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  std::vector<std::string> reversed;
  size_t end = cps.size();
  while (true) {
    while (end > 0 && is_space(cps[end - 1])) --end;
    if (end == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(reversed.size()) == maxsplit) {
      reversed.push_back(encode(std::u32string_view(cps).substr(0, end)));  // leading whitespace kept
      break;
    }
    size_t begin = end;
    while (begin > 0 && !is_space(cps[begin - 1])) --begin;
    reversed.push_back(encode(std::u32string_view(cps).substr(begin, end - begin)));
    end = begin;
  }
  return {reversed.rbegin(), reversed.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t boundary = 0;  // bytes of the line boundary at i
    if (c == '\r') {
      boundary = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    } else if (c == '\n' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) {
      boundary = 1;
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      boundary = 2;  // U+0085
    } else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      boundary = 3;  // U+2028, U+2029
    }
    if (boundary == 0) {
      ++i;
      continue;
    }
    lines.emplace_back(s.substr(start, (keepends ? i + boundary : i) - start));
    i += boundary;
    start = i;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                    int64_t count, uint64_t max_bytes) {
  std::string out;
  auto check = [&](size_t more) {
    if (out.size() + more > max_bytes) {
      throw std::length_error("replace: the result is larger than max_value_bytes (" +
                              std::to_string(max_bytes) + " bytes)");
    }
  };
  if (old_text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::u32string cps = decode(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        check(new_text.size() + 4);
        out += new_text;
        ++done;
      }
      tok::append_utf8(c, out);
    }
    check(new_text.size());
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old_text, start);
    if (at == std::string_view::npos) break;
    check(at - start + new_text.size());
    out += s.substr(start, at - start);
    out += new_text;
    start = at + old_text.size();
    ++done;
  }
  check(s.size() - start);
  out += s.substr(start);
  return out;
}

namespace {

// Case mappings as Python's str methods make them (transformers renders templates with
// them): a character's full mapping where it is more than one character (ß upper is "SS"),
// else its simple one; and a capital sigma at the end of a word lower-cased to ς.
struct SpecialCase {
  char32_t from;
  char32_t to[3];
};
#include "tokenizer/chat_template/special_casing.inc"

bool is_cased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

// Unicode's Case_Ignorable: marks, format characters, modifiers, and the apostrophes, dots
// and colons that may sit inside a word.
bool is_case_ignorable(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK: return true;
    default: break;
  }
  for (char32_t inside : {0x0027, 0x002E, 0x003A, 0x00B7, 0x0387, 0x055F, 0x05F4, 0x2018, 0x2019, 0x2024, 0x2027,
                          0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A}) {
    if (c == inside) return true;
  }
  return false;
}

template <size_t N>
void append_mapped(std::u32string& out, char32_t c, const SpecialCase (&special)[N], int32_t (*simple)(int32_t)) {
  const auto found = std::lower_bound(std::begin(special), std::end(special), c,
                                      [](const SpecialCase& entry, char32_t key) { return entry.from < key; });
  if (found != std::end(special) && found->from == c) {
    for (char32_t m : found->to) {
      if (m != 0) out.push_back(m);
    }
    return;
  }
  out.push_back(static_cast<char32_t>(simple(static_cast<int32_t>(c))));
}

// cps[i] lower-cased, as Python does it in its context (Final_Sigma).
void append_lower(std::u32string& out, const std::u32string& cps, size_t i) {
  if (cps[i] == U'\u03A3') {
    size_t before = i;
    while (before > 0 && is_case_ignorable(cps[before - 1])) --before;
    bool final = before > 0 && is_cased(cps[before - 1]);
    if (final) {
      size_t after = i + 1;
      while (after < cps.size() && is_case_ignorable(cps[after])) ++after;
      final = after == cps.size() || !is_cased(cps[after]);
    }
    out.push_back(final ? U'\u03C2' : U'\u03C3');
    return;
  }
  append_mapped(out, cps[i], kLowerSpecial, utf8proc_tolower);
}

}  // namespace

std::string upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) append_mapped(out, c, kUpperSpecial, utf8proc_toupper);
  return encode(out);
}

std::string lower(std::string_view s) {
  const std::u32string cps = decode(s);
  std::u32string out;
  for (size_t i = 0; i < cps.size(); ++i) append_lower(out, cps, i);
  return encode(out);
}

std::string title(std::string_view s) {
  const std::u32string cps = decode(s);
  std::u32string out;
  bool previous_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (previous_cased) {
      append_lower(out, cps, i);
    } else {
      append_mapped(out, cps[i], kTitleSpecial, utf8proc_totitle);
    }
    previous_cased = is_cased(cps[i]);
  }
  return encode(out);
}

std::string capitalize(std::string_view s) {
  const std::u32string cps = decode(s);
  std::u32string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      append_mapped(out, cps[i], kTitleSpecial, utf8proc_totitle);
    } else {
      append_lower(out, cps, i);
    }
  }
  return encode(out);
}

namespace {

void append_hex(std::string& out, uint32_t value, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out.push_back(kHex[(value >> shift) & 0xF]);
}

}  // namespace

std::string repr(std::string_view s) {
  const std::u32string cps = decode(s);
  const bool has_single = cps.find(U'\'') != std::u32string::npos;
  const bool has_double = cps.find(U'"') != std::u32string::npos;
  const char32_t quote = has_single && !has_double ? U'"' : U'\'';
  std::string out;
  out.push_back(static_cast<char>(quote));
  for (char32_t c : cps) {
    if (c == quote || c == U'\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      append_hex(out, c, 2);
    } else if (c < 0x7F || is_printable(c)) {
      tok::append_utf8(c, out);
    } else if (c <= 0xFF) {
      out += "\\x";
      append_hex(out, c, 2);
    } else if (c <= 0xFFFF) {
      out += "\\u";
      append_hex(out, c, 4);
    } else {
      out += "\\U";
      append_hex(out, c, 8);
    }
  }
  out.push_back(static_cast<char>(quote));
  return out;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  auto escape_unit = [&out](uint32_t unit) {
    out += "\\u";
    append_hex(out, unit, 4);
  };
  for (char32_t c : decode(s)) {
    switch (c) {
      case U'"': out += "\\\""; break;
      case U'\\': out += "\\\\"; break;
      case U'\n': out += "\\n"; break;
      case U'\r': out += "\\r"; break;
      case U'\t': out += "\\t"; break;
      case U'\b': out += "\\b"; break;
      case U'\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          escape_unit(c);
        } else if (ensure_ascii && c >= 0x7F) {  // DEL too: Python escapes all but space to ~
          if (c >= 0x10000) {
            const uint32_t v = c - 0x10000;
            escape_unit(0xD800 | (v >> 10));
            escape_unit(0xDC00 | (v & 0x3FF));
          } else {
            escape_unit(c);
          }
        } else {
          tok::append_utf8(c, out);
        }
    }
  }
  out.push_back('"');
}

}  // namespace qwenrt::chat_template::text
