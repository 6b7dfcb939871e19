#include "tokenizer/pretokenize.h"

#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace qwenrt::tok {
namespace {

constexpr char32_t kCodePoints = 0x110000;

// Oniguruma's Unicode \s: U+0009-000D, U+0085 and the Zs, Zl, Zp categories (= Unicode
// White_Space). PCRE2's \s would add U+180E, so the class is spelled out.
constexpr std::string_view kSpaceItems = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Zs}\\x{2028}\\x{2029}";
// Oniguruma's Unicode \w: Letter, Mark, Decimal_Number, Connector_Punctuation.
constexpr std::string_view kWordItems = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
constexpr std::string_view kHexItems = "0-9a-fA-F";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// NFC of valid UTF-8 text by utf8proc.
std::string nfc_full(std::string_view text) {
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (length < 0) {
    throw Error(ErrorCategory::kInternal,
                std::string("NFC normalisation failed: ") + utf8proc_errmsg(length));
  }
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
  std::free(result);
  return out;
}

}  // namespace

NfcNormalizer::NfcNormalizer() : maybe_(kCodePoints / 64, 0) {
  auto mark = [this](char32_t cp) { maybe_[cp >> 6] |= uint64_t{1} << (cp & 63); };
  // Every code point below U+0300 is a starter that NFC keeps and that composes with
  // nothing before it, so only the rest needs a look.
  for (char32_t cp = 0x300; cp < kCodePoints; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const auto code_point = static_cast<utf8proc_int32_t>(cp);
    const utf8proc_property_t* property = utf8proc_get_property(code_point);
    // Combining marks may be reordered or composed with what precedes them.
    if (property->combining_class != 0) mark(cp);
    if (property->decomp_seqindex == UINT16_MAX || property->decomp_type != 0) continue;
    // A canonical decomposition: every part but the first may compose with a preceding
    // character, and the character itself changes when NFC does not recompose it
    // (singletons, composition exclusions).
    utf8proc_int32_t parts[8];
    int last_boundclass = 0;
    const utf8proc_ssize_t count =
        utf8proc_decompose_char(code_point, parts, 8, UTF8PROC_DECOMPOSE, &last_boundclass);
    for (utf8proc_ssize_t i = 1; i < count && i < 8; ++i) mark(static_cast<char32_t>(parts[i]));
    std::string single;
    append_utf8(cp, single);
    if (nfc_full(single) != single) mark(cp);
  }
  // Hangul vowel and trailing jamo compose algorithmically with what precedes them.
  for (char32_t cp = 0x1161; cp <= 0x1175; ++cp) mark(cp);
  for (char32_t cp = 0x11A8; cp <= 0x11C2; ++cp) mark(cp);
}

bool NfcNormalizer::normalize(std::string_view text, std::string& out) const {
  // NFC works on stretches that start at a code point it can neither change nor join to
  // what precedes it (an unflagged one); only stretches with a flagged code point are given
  // to utf8proc, the rest is copied as is.
  const size_t size = text.size();
  auto unflagged_at = [&](size_t at, size_t& after) {
    const auto lead = static_cast<uint8_t>(text[at]);
    if (lead < 0xCC) {  // below U+0300 (the first code point that starts with 0xCC)
      after = at + 1;
      while (after < size && (static_cast<uint8_t>(text[after]) & 0xC0) == 0x80) ++after;
      return true;
    }
    after = at;
    return !may_change(next_code_point(text, after));
  };
  std::string result;
  bool changed = false;
  size_t copied = 0;    // text[0, copied) is in `result`
  size_t boundary = 0;  // start of the last unflagged code point
  size_t pos = 0;
  while (pos < size) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      boundary = pos++;
      continue;
    }
    size_t after = 0;
    if (unflagged_at(pos, after)) {
      boundary = pos;
      pos = after;
      continue;
    }
    size_t end = after;
    while (end < size && !unflagged_at(end, after)) end = after;
    const std::string_view stretch = text.substr(boundary, end - boundary);
    const std::string normalized = nfc_full(stretch);
    if (normalized != stretch) {
      if (!changed) result.reserve(size + size / 8);
      changed = true;
      result.append(text.substr(copied, boundary - copied)).append(normalized);
      copied = end;
    }
    pos = end;
    boundary = end;
  }
  if (!changed) return false;
  result.append(text.substr(copied));
  out = std::move(result);
  return true;
}

std::string onig_to_pcre2(std::string_view pattern, const std::string& what) {
  auto refuse = [&](const std::string& construct) -> void {
    throw Error(ErrorCategory::kUnsupported,
                what + ": the regex construct " + construct +
                    " is not supported (its meaning differs between Oniguruma and PCRE2)");
  };
  std::string out;
  out.reserve(pattern.size() * 2);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      if (i + 1 >= pattern.size()) refuse("trailing '\\'");
      const char e = pattern[++i];
      auto item_class = [&](std::string_view items, bool negated) {
        if (in_class) {
          if (negated) refuse(std::string("\\") + e + " inside a character class");
          out.append(items);
        } else {
          out.append(negated ? "[^" : "[").append(items).append("]");
        }
      };
      switch (e) {
        case 's':
          item_class(kSpaceItems, false);
          break;
        case 'S':
          item_class(kSpaceItems, true);
          break;
        case 'w':
          item_class(kWordItems, false);
          break;
        case 'W':
          item_class(kWordItems, true);
          break;
        case 'h':
          item_class(kHexItems, false);
          break;  // Oniguruma: hexadecimal digit
        case 'H':
          item_class(kHexItems, true);
          break;
        case 'd':
          out.append("\\p{Nd}");
          break;
        case 'D':
          out.append("\\P{Nd}");
          break;
        case 'v':
          out.append("\\x0B");
          break;     // Oniguruma: vertical tab; PCRE2: a class
        case 'u': {  // Oniguruma \uHHHH
          if (i + 4 >= pattern.size()) refuse("a short \\u escape");
          out.append("\\x{").append(pattern.substr(i + 1, 4)).append("}");
          i += 4;
          break;
        }
        case 'b':
        case 'B':
        case 'R':
        case 'X':
        case 'K':
        case 'N':
        case 'O':
        case 'y':
        case 'Y':
          refuse(std::string("\\") + e);
          break;
        default:
          out.push_back('\\');
          out.push_back(e);
      }
      continue;
    }
    if (in_class) {
      if (c == '[') refuse("'[' inside a character class (nested class or POSIX bracket)");
      if (c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&') refuse("'&&'");
      if (c == ']') in_class = false;
      out.push_back(c);
      continue;
    }
    switch (c) {
      case '[':
        in_class = true;
        out.push_back(c);
        // A ']' right after '[' or '[^' is a literal in both engines.
        if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
        if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
        break;
      case '.':
        out.append("[^\\n]");
        break;  // Oniguruma's '.' excludes only '\n'
      case '^':
      case '$':
        refuse(std::string("'") + c + "' (line anchors)");
        break;
      case '(':
        out.push_back(c);
        if (i + 1 < pattern.size() && pattern[i + 1] == '?') {
          // Inline options: Oniguruma's (?m) is PCRE2's (?s).
          size_t j = i + 2;
          while (j < pattern.size() &&
                 (std::isalpha(static_cast<unsigned char>(pattern[j])) || pattern[j] == '-')) {
            if (pattern[j] == 'm' || pattern[j] == 's' || pattern[j] == 'x')
              refuse(std::string("(?") + pattern[j] + ")");
            ++j;
          }
        }
        break;
      default:
        out.push_back(c);
    }
  }
  if (in_class) refuse("an unterminated character class");
  return out;
}

RegexSplitter::RegexSplitter(const std::string& pattern, bool literal, const std::string& what)
    : what_(what) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL allows no UCP (which only matters for classes anyway).
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                        &error_code, &error_offset, nullptr);
  if (!code_) {
    throw Error(ErrorCategory::kInvalidModel, what + ": cannot compile the pattern at offset " +
                                                  std::to_string(error_offset) + ": " +
                                                  pcre2_message(error_code));
  }
  // JIT makes the split several times faster; without it (an unusual PCRE2 build) the
  // interpreter gives the same results.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() {
  if (code_) pcre2_code_free(code_);
}

RegexSplitter::RegexSplitter(RegexSplitter&& other) noexcept
    : code_(other.code_), what_(std::move(other.what_)) {
  other.code_ = nullptr;
}

RegexSplitter::MatchState::MatchState(const RegexSplitter& splitter)
    : data_(pcre2_match_data_create_from_pattern(splitter.code_, nullptr)) {
  if (!data_) throw Error(ErrorCategory::kOutOfMemory, "cannot allocate regex match data");
}

RegexSplitter::MatchState::~MatchState() {
  pcre2_match_data_free(data_);
}

void RegexSplitter::split(std::string_view text, MatchState& state,
                          std::vector<Span>& pieces) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t size = text.size();
  size_t start = 0;      // where the next search begins
  size_t piece_end = 0;  // end of what has been emitted
  while (start <= size) {
    int rc = pcre2_match(code_, subject, size, start, PCRE2_NO_UTF_CHECK, state.data_, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's default stack is small; the interpreter keeps its frames on the heap.
      rc = pcre2_match(code_, subject, size, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, state.data_,
                       nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw Error(ErrorCategory::kInternal, what_ + ": regex match failed: " + pcre2_message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data_);
    const size_t match_begin = ovector[0];
    const size_t match_end = ovector[1];
    if (match_begin > piece_end) pieces.emplace_back(piece_end, match_begin);
    if (match_end > match_begin) pieces.emplace_back(match_begin, match_end);
    piece_end = std::max(piece_end, match_end);
    if (match_end > match_begin) {
      start = match_end;
    } else {
      // An empty match splits here; the search resumes one character later.
      if (match_end >= size) break;
      start = match_end + 1;
      while (start < size && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  if (piece_end < size) pieces.emplace_back(piece_end, size);
}

}  // namespace qwenrt::tok
