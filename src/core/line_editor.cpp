#include "core/line_editor.h"

#include <algorithm>

namespace qwenrt {
namespace {

constexpr size_t kMaxHistory = 1000;
constexpr size_t kMaxEscape = 32;  // longer "sequences" are noise: dropped

struct Decoded {
  char32_t code_point;
  size_t length;
};

// The code point at `at` of valid UTF-8 (what the editor inserts); a stray byte reads as
// one character.
Decoded decode(const std::string& text, size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  size_t length = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
  if (lead >= 0x80 && lead < 0xc0) length = 1;
  if (at + length > text.size()) return {0xfffd, 1};
  char32_t value = length == 1 ? lead : length == 2 ? (lead & 0x1f) : length == 3 ? (lead & 0x0f) : (lead & 0x07);
  for (size_t i = 1; i < length; ++i) value = (value << 6) | (static_cast<unsigned char>(text[at + i]) & 0x3f);
  return {value, length};
}

// The byte length of a UTF-8 character from its first byte; 0 for a byte no character
// starts with.
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) return 2;
  if (lead >= 0xe0 && lead <= 0xef) return 3;
  if (lead >= 0xf0 && lead <= 0xf4) return 4;
  return 0;
}

bool is_space(char32_t c) { return c == ' ' || c == '\t' || c == 0x3000; }

struct Range {
  char32_t first, last;
};

bool in(const Range* ranges, size_t count, char32_t c) {
  for (size_t i = 0; i < count; ++i) {
    if (c >= ranges[i].first && c <= ranges[i].last) return true;
  }
  return false;
}

// Combining marks, joiners, variation selectors: drawn on the character before.
constexpr Range kZeroWidth[] = {
    {0x0300, 0x036f}, {0x0483, 0x0489}, {0x0591, 0x05bd}, {0x05bf, 0x05bf}, {0x05c1, 0x05c2},
    {0x05c4, 0x05c5}, {0x05c7, 0x05c7}, {0x0610, 0x061a}, {0x064b, 0x065f}, {0x0670, 0x0670},
    {0x06d6, 0x06dc}, {0x06df, 0x06e4}, {0x0e31, 0x0e31}, {0x0e34, 0x0e3a}, {0x0e47, 0x0e4e},
    {0x1ab0, 0x1aff}, {0x1dc0, 0x1dff}, {0x200b, 0x200f}, {0x202a, 0x202e}, {0x2060, 0x2064},
    {0x20d0, 0x20ff}, {0x302a, 0x302f}, {0x3099, 0x309a}, {0xfe00, 0xfe0f}, {0xfe20, 0xfe2f},
    {0xfeff, 0xfeff}, {0x1f3fb, 0x1f3ff}, {0xe0001, 0xe007f}, {0xe0100, 0xe01ef},
};

// East Asian wide and fullwidth characters and the emoji drawn two columns wide.
constexpr Range kWide[] = {
    {0x1100, 0x115f},   {0x231a, 0x231b},   {0x2329, 0x232a},   {0x23e9, 0x23ec},   {0x23f0, 0x23f0},
    {0x23f3, 0x23f3},   {0x25fd, 0x25fe},   {0x2614, 0x2615},   {0x2648, 0x2653},   {0x267f, 0x267f},
    {0x2693, 0x2693},   {0x26a1, 0x26a1},   {0x26aa, 0x26ab},   {0x26bd, 0x26be},   {0x26c4, 0x26c5},
    {0x26ce, 0x26ce},   {0x26d4, 0x26d4},   {0x26ea, 0x26ea},   {0x26f2, 0x26f3},   {0x26f5, 0x26f5},
    {0x26fa, 0x26fa},   {0x26fd, 0x26fd},   {0x2705, 0x2705},   {0x270a, 0x270b},   {0x2728, 0x2728},
    {0x274c, 0x274c},   {0x274e, 0x274e},   {0x2753, 0x2755},   {0x2757, 0x2757},   {0x2795, 0x2797},
    {0x27b0, 0x27b0},   {0x27bf, 0x27bf},   {0x2b1b, 0x2b1c},   {0x2b50, 0x2b50},   {0x2b55, 0x2b55},
    {0x2e80, 0x3029},   {0x3030, 0x303e},   {0x3041, 0x3098},   {0x309b, 0x33ff},   {0x3400, 0x4dbf},
    {0x4e00, 0x9fff},   {0xa000, 0xa4cf},   {0xa960, 0xa97f},   {0xac00, 0xd7a3},   {0xf900, 0xfaff},
    {0xfe10, 0xfe19},   {0xfe30, 0xfe6f},   {0xff00, 0xff60},   {0xffe0, 0xffe6},   {0x16fe0, 0x16fe4},
    {0x17000, 0x18aff}, {0x1b000, 0x1b2ff}, {0x1f004, 0x1f004}, {0x1f0cf, 0x1f0cf}, {0x1f18e, 0x1f18e},
    {0x1f191, 0x1f19a}, {0x1f200, 0x1f251}, {0x1f300, 0x1f320}, {0x1f32d, 0x1f335}, {0x1f337, 0x1f37c},
    {0x1f37e, 0x1f393}, {0x1f3a0, 0x1f3ca}, {0x1f3cf, 0x1f3d3}, {0x1f3e0, 0x1f3f0}, {0x1f3f4, 0x1f3f4},
    {0x1f3f8, 0x1f3fa}, {0x1f400, 0x1f43e}, {0x1f440, 0x1f440}, {0x1f442, 0x1f4fc}, {0x1f4ff, 0x1f53d},
    {0x1f54b, 0x1f54e}, {0x1f550, 0x1f567}, {0x1f57a, 0x1f57a}, {0x1f595, 0x1f596}, {0x1f5a4, 0x1f5a4},
    {0x1f5fb, 0x1f64f}, {0x1f680, 0x1f6c5}, {0x1f6cc, 0x1f6cc}, {0x1f6d0, 0x1f6d2}, {0x1f6d5, 0x1f6d7},
    {0x1f6eb, 0x1f6ec}, {0x1f6f4, 0x1f6fc}, {0x1f7e0, 0x1f7eb}, {0x1f90c, 0x1f93a}, {0x1f93c, 0x1f945},
    {0x1f947, 0x1f9ff}, {0x1fa70, 0x1faff}, {0x20000, 0x2fffd}, {0x30000, 0x3fffd},
};

}  // namespace

int LineEditor::code_point_width(char32_t c) {
  if (c < 0x300) return 1;
  if (in(kZeroWidth, std::size(kZeroWidth), c)) return 0;
  return in(kWide, std::size(kWide), c) ? 2 : 1;
}

void LineEditor::start() {
  text_.clear();
  cursor_ = 0;
  escape_.clear();
  utf8_.clear();
  recalled_ = history_.size();
  typed_.clear();
  first_shown_ = 0;
}

std::string LineEditor::take_line() {
  std::string line = std::move(text_);
  if (!line.empty() && (history_.empty() || history_.back() != line)) {
    history_.push_back(line);
    if (history_.size() > kMaxHistory) history_.erase(history_.begin());
  }
  start();
  return line;
}

LineEditor::Key LineEditor::feed(unsigned char byte) {
  if (!escape_.empty()) {
    if (escape_.size() == 1) {
      if (byte == 0x1b) return Key::kEdited;  // ESC ESC: the first one stood alone
      escape_ += static_cast<char>(byte);
      if (byte == '[' || byte == 'O') return Key::kEdited;
      std::string sequence;
      sequence.swap(escape_);
      return escape_sequence(sequence);  // Alt and a key
    }
    escape_ += static_cast<char>(byte);
    const bool whole = escape_[1] == 'O' ? escape_.size() >= 3 : (byte >= 0x40 && byte <= 0x7e);
    if (!whole) {
      if (escape_.size() >= kMaxEscape) escape_.clear();
      return Key::kEdited;
    }
    std::string sequence;
    sequence.swap(escape_);
    return escape_sequence(sequence);
  }
  if (!utf8_.empty()) {
    if ((byte & 0xc0) == 0x80) {
      utf8_ += static_cast<char>(byte);
      if (utf8_.size() < sequence_length(static_cast<unsigned char>(utf8_[0]))) return Key::kEdited;
      const Decoded character = decode(utf8_, 0);
      static constexpr char32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
      const bool valid = character.code_point >= kLeast[utf8_.size()] && character.code_point <= 0x10ffff &&
                         (character.code_point < 0xd800 || character.code_point > 0xdfff);
      if (valid) insert(utf8_);
      utf8_.clear();
      return Key::kEdited;
    }
    utf8_.clear();  // a broken character is dropped; this byte is read afresh
  }
  if (byte >= 0x80) {
    if (sequence_length(byte) != 0) utf8_ = static_cast<char>(byte);
    return Key::kEdited;
  }
  return key(byte);
}

LineEditor::Key LineEditor::key(unsigned char byte) {
  switch (byte) {
    case '\r':
    case '\n':
      return Key::kLine;
    case 0x01:  // Ctrl-A
      cursor_ = 0;
      break;
    case 0x05:  // Ctrl-E
      cursor_ = text_.size();
      break;
    case 0x02:  // Ctrl-B
      cursor_ = previous_stop(cursor_);
      break;
    case 0x06:  // Ctrl-F
      cursor_ = next_stop(cursor_);
      break;
    case 0x04:  // Ctrl-D
      if (text_.empty()) return Key::kEnd;
      text_.erase(cursor_, next_stop(cursor_) - cursor_);
      break;
    case 0x08:  // Ctrl-H
    case 0x7f: {  // Backspace
      const size_t from = previous_stop(cursor_);
      text_.erase(from, cursor_ - from);
      cursor_ = from;
      break;
    }
    case 0x0b:  // Ctrl-K
      text_.erase(cursor_);
      break;
    case 0x15:  // Ctrl-U
      text_.erase(0, cursor_);
      cursor_ = 0;
      break;
    case 0x17: {  // Ctrl-W
      const size_t from = previous_word(cursor_);
      text_.erase(from, cursor_ - from);
      cursor_ = from;
      break;
    }
    case 0x0c:  // Ctrl-L
      return Key::kClearScreen;
    case 0x10:  // Ctrl-P
      recall(-1);
      break;
    case 0x0e:  // Ctrl-N
      recall(+1);
      break;
    case 0x1b:
      escape_.assign(1, '\x1b');
      break;
    default:
      // A tab is text (shown as a space); other control keys mean nothing here.
      if (byte >= 0x20 || byte == '\t') {
        text_.insert(text_.begin() + static_cast<std::ptrdiff_t>(cursor_), static_cast<char>(byte));
        ++cursor_;
      }
      break;
  }
  return Key::kEdited;
}

LineEditor::Key LineEditor::escape_sequence(std::string_view sequence) {
  // CSI sequences carry modifiers as ";N" (Ctrl-Right: ESC [ 1 ; 5 C); the final byte says
  // which key.
  const char last = sequence.back();
  const bool csi = sequence.size() >= 3 && sequence[1] == '[';
  const bool ss3 = sequence.size() == 3 && sequence[1] == 'O';
  const bool modified = csi && sequence.find(';') != std::string_view::npos;
  if (csi && last == '~') {
    const std::string_view number = sequence.substr(2, sequence.find_first_of(";~") - 2);
    if (number == "1" || number == "7") cursor_ = 0;
    if (number == "4" || number == "8") cursor_ = text_.size();
    if (number == "3") text_.erase(cursor_, next_stop(cursor_) - cursor_);
    return Key::kEdited;
  }
  if (csi || ss3) {
    switch (last) {
      case 'A':
        recall(-1);
        break;
      case 'B':
        recall(+1);
        break;
      case 'C':
        cursor_ = modified ? next_word(cursor_) : next_stop(cursor_);
        break;
      case 'D':
        cursor_ = modified ? previous_word(cursor_) : previous_stop(cursor_);
        break;
      case 'H':
        cursor_ = 0;
        break;
      case 'F':
        cursor_ = text_.size();
        break;
      default:
        break;  // keys with no meaning here (F1, Insert, a paste's brackets): swallowed
    }
    return Key::kEdited;
  }
  if (sequence.size() == 2) {  // Alt and a key
    switch (sequence[1]) {
      case 'b':
        cursor_ = previous_word(cursor_);
        break;
      case 'f':
        cursor_ = next_word(cursor_);
        break;
      case 'd':
        text_.erase(cursor_, next_word(cursor_) - cursor_);
        break;
      case 0x7f:
      case 0x08: {
        const size_t from = previous_word(cursor_);
        text_.erase(from, cursor_ - from);
        cursor_ = from;
        break;
      }
      default:
        break;
    }
  }
  return Key::kEdited;
}

void LineEditor::insert(std::string_view bytes) {
  text_.insert(cursor_, bytes);
  cursor_ += bytes.size();
}

size_t LineEditor::previous_stop(size_t at) const {
  while (at > 0) {
    size_t start = at - 1;
    while (start > 0 && (static_cast<unsigned char>(text_[start]) & 0xc0) == 0x80) --start;
    const bool mark = code_point_width(decode(text_, start).code_point) == 0;
    at = start;
    if (!mark) break;  // a mark goes with the character before it
  }
  return at;
}

size_t LineEditor::next_stop(size_t at) const {
  if (at >= text_.size()) return text_.size();
  at += decode(text_, at).length;
  while (at < text_.size()) {
    const Decoded next = decode(text_, at);
    if (code_point_width(next.code_point) != 0) break;
    at += next.length;
  }
  return at;
}

size_t LineEditor::previous_word(size_t at) const {
  while (at > 0) {
    const size_t before = previous_stop(at);
    if (!is_space(decode(text_, before).code_point)) break;
    at = before;
  }
  while (at > 0) {
    const size_t before = previous_stop(at);
    if (is_space(decode(text_, before).code_point)) break;
    at = before;
  }
  return at;
}

size_t LineEditor::next_word(size_t at) const {
  while (at < text_.size() && is_space(decode(text_, at).code_point)) at = next_stop(at);
  while (at < text_.size() && !is_space(decode(text_, at).code_point)) at = next_stop(at);
  return at;
}

void LineEditor::recall(int step) {
  if (step < 0) {
    if (recalled_ == 0) return;
    if (recalled_ == history_.size()) typed_ = text_;
    --recalled_;
    text_ = history_[recalled_];
  } else {
    if (recalled_ >= history_.size()) return;
    ++recalled_;
    text_ = recalled_ == history_.size() ? typed_ : history_[recalled_];
  }
  cursor_ = text_.size();
  first_shown_ = 0;
}

std::string LineEditor::render(std::string_view prompt, int columns, bool first) {
  auto width_of = [](const std::string& text, size_t from, size_t to) {
    int width = 0;
    for (size_t at = from; at < to;) {
      const Decoded character = decode(text, at);
      width += code_point_width(character.code_point);  // a tab is shown as one space
      at += character.length;
    }
    return width;
  };
  const std::string prompt_text(prompt);
  const int prompt_width = width_of(prompt_text, 0, prompt_text.size());
  // The last column stays empty: a character there would wrap the cursor to the next row.
  const int room = std::max(1, columns - prompt_width - 1);
  if (first_shown_ > cursor_ || first_shown_ > text_.size()) first_shown_ = cursor_;
  if (width_of(text_, 0, text_.size()) <= room) first_shown_ = 0;
  // The cursor's cell is shown with the character in it: the text up to that character's
  // end must fit (at the end of the text, up to the cursor: its cell is the spare column).
  const size_t shown_to = cursor_ < text_.size() ? next_stop(cursor_) : cursor_;
  int needed = width_of(text_, first_shown_, shown_to);
  while (needed > room && first_shown_ < cursor_) {
    const size_t next = next_stop(first_shown_);
    needed -= width_of(text_, first_shown_, next);
    first_shown_ = next;
  }
  const int before_cursor = width_of(text_, first_shown_, cursor_);
  std::string out;
  if (!first) out += '\r';
  out += prompt_text;
  int shown = 0;
  for (size_t at = first_shown_; at < text_.size();) {
    const size_t next = next_stop(at);
    const int width = width_of(text_, at, next);
    if (shown + width > room) break;
    if (text_[at] == '\t') {
      out += ' ';
    } else {
      out.append(text_, at, next - at);
    }
    shown += width;
    at = next;
  }
  out += "\x1b[K";
  if (shown > before_cursor) {
    out += "\x1b[";
    out += std::to_string(shown - before_cursor);
    out += 'D';
  }
  return out;
}

}  // namespace qwenrt
