#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <cstring>

#include "tokenizer/utf8.h"

namespace qwenrt::tok {
namespace {

// Unicode White_Space, which is what HF's `\s` (Rust regex) means for lstrip/rstrip.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust regex's `\w`: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
bool is_word_char(char32_t c) {
  if (c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
    return true;
  }
  if (c < 0x80) return false;
  if (c == 0x200C || c == 0x200D) return true;
  // Other_Alphabetic symbols: circled and squared Latin letters.
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
      (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189)) {
    return true;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends text[0, end).
char32_t last_code_point(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
  return next_code_point(text, begin);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedTokenRule> rules) {
  for (auto& rule : rules) {
    if (!rule.content.empty()) rules_.push_back(std::move(rule));
  }
  for (size_t i = 0; i < rules_.size(); ++i) {
    const auto first = static_cast<uint8_t>(rules_[i].content[0]);
    if (by_first_byte_[first].empty()) first_bytes_.push_back(static_cast<char>(first));
    by_first_byte_[first].push_back(static_cast<int>(i));
  }
}

int AddedTokenMatcher::find(std::string_view text, size_t from, size_t& match_begin) const {
  const size_t size = text.size();
  for (size_t pos = from; pos < size; ++pos) {
    if (first_bytes_.size() == 1) {
      // The common case (every token starts with '<'): let memchr skip ahead.
      const void* hit = std::memchr(text.data() + pos, first_bytes_[0], size - pos);
      if (!hit) return -1;
      pos = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
    }
    const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[pos])];
    int best = -1;
    for (int index : candidates) {
      const std::string& content = rules_[static_cast<size_t>(index)].content;
      if (content.size() <= size - pos && text.compare(pos, content.size(), content) == 0 &&
          (best < 0 || content.size() > rules_[static_cast<size_t>(best)].content.size())) {
        best = index;
      }
    }
    if (best >= 0) {
      match_begin = pos;
      return best;
    }
  }
  return -1;
}

void AddedTokenMatcher::split(std::string_view text, bool special_as_text,
                              std::vector<Segment>& out) const {
  const size_t size = text.size();
  size_t done = 0;    // text before this is in `out`
  size_t search = 0;  // matching resumes here (after the last match, even a skipped one)
  while (!rules_.empty() && search < size) {
    size_t begin = 0;
    const int index = find(text, search, begin);
    if (index < 0) break;
    const AddedTokenRule& rule = rules_[static_cast<size_t>(index)];
    size_t end = begin + rule.content.size();
    search = end;
    if (special_as_text && rule.special) continue;
    if (rule.single_word) {
      const bool word_before = begin > 0 && is_word_char(last_code_point(text, begin));
      size_t after = end;
      const bool word_after = end < size && is_word_char(next_code_point(text, after));
      if (word_before || word_after) continue;
    }
    if (rule.lstrip) {
      size_t stripped = begin;
      while (stripped > 0) {
        size_t cp_begin = stripped - 1;
        while (cp_begin > 0 && (static_cast<uint8_t>(text[cp_begin]) & 0xC0) == 0x80) --cp_begin;
        size_t cursor = cp_begin;
        if (!is_white_space(next_code_point(text, cursor))) break;
        stripped = cp_begin;
      }
      // Whitespace already taken by the previous match stays with it.
      begin = std::max(stripped, done);
    }
    if (rule.rstrip) {
      while (end < size) {
        size_t cursor = end;
        if (!is_white_space(next_code_point(text, cursor))) break;
        end = cursor;
      }
    }
    if (done < begin)
      out.push_back({static_cast<uint32_t>(done), static_cast<uint32_t>(begin), -1});
    out.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(end), rule.id});
    done = end;
  }
  if (done < size) out.push_back({static_cast<uint32_t>(done), static_cast<uint32_t>(size), -1});
}

}  // namespace qwenrt::tok
