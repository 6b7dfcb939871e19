#include "tokenizer/line_editor.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace qwenrt {
namespace {

constexpr size_t kMaxEscape = 32;  // longer "sequences" are noise: dropped

struct Decoded {
  char32_t code_point;
  size_t length;
};

// The code point at `at` and its length in bytes. The editor's text and prompt are
// well-formed UTF-8: the editor inserts only characters that are.
Decoded decode(std::string_view text, size_t at) {
  size_t next = at;
  const char32_t code_point = tok::next_code_point(text, next);
  return {code_point, next - at};
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

// The first byte of the character that ends at `at` (> 0).
size_t start_of_character_before(std::string_view text, size_t at) {
  size_t start = at - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
  return start;
}

bool is_space(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == 0x3000;
}

bool blank(const std::string& text) {
  return text.find_first_not_of(" \t\n") == std::string::npos;
}

}  // namespace

int LineEditor::code_point_width(char32_t c) {
  if (c == '\t' || c == '\n') return 1;  // shown as ⇥ and as ⏎
  // Hangul's medial and final jamo join the initial before them into one syllable's cell.
  if ((c >= 0x1160 && c <= 0x11ff) || (c >= 0xd7b0 && c <= 0xd7ff)) return 0;
  // Unicode's East Asian widths and marks (utf8proc, as the tokenizer's text rules): 0 for
  // combining and enclosing marks, 2 for wide characters.
  return utf8proc_charwidth(static_cast<utf8proc_int32_t>(c));
}

void LineEditor::start() {
  text_.clear();
  cursor_ = 0;
  escape_.clear();
  utf8_.clear();
  recalled_ = history_.size();
  typed_.clear();
  first_shown_ = 0;
  pasting_ = false;
  searching_ = false;
  search_escape_ = false;
  killing_ = after_kill_ = false;
}

bool LineEditor::remember(std::string line) {
  if (blank(line) || (!history_.empty() && history_.back() == line)) return false;
  history_.push_back(std::move(line));
  if (history_.size() > kMaxHistory) history_.erase(history_.begin());
  recalled_ = history_.size();
  return true;
}

std::string LineEditor::take_line() {
  std::string line = std::move(text_);
  remembered_ = remember(line);
  start();
  return line;
}

LineEditor::Key LineEditor::feed(unsigned char byte) {
  const Key key = take(byte);
  if (escape_.empty() && utf8_.empty()) {  // a whole key: did it cut? (the next cut joins it)
    after_kill_ = killing_;
    killing_ = false;
  }
  // Every edit is at the cursor: with the shown part starting at or before it, text put in
  // or taken out never moves that start off a character's first byte.
  first_shown_ = std::min(first_shown_, cursor_);
  return key;
}

LineEditor::Key LineEditor::take(unsigned char byte) {
  // A CR LF pair (a pasted Windows line) ends one line, not two.
  const bool after_cr = after_cr_;
  after_cr_ = byte == '\r';
  if (byte == '\n' && after_cr) return Key::kEdited;
  if (pasting_ || discarding_) return pasted(byte);
  // A control key or Backspace inside an escape sequence (Enter after a lone Esc, or after
  // half an arrow's sequence typed during an answer) ends the sequence and counts itself.
  // (Esc then Backspace is Alt-Backspace.)
  const bool alt_backspace = escape_.size() == 1 && (byte == 0x7f || byte == 0x08);
  if (!escape_.empty() && !alt_backspace && ((byte < 0x20 && byte != 0x1b) || byte == 0x7f))
    escape_.clear();
  if (search_escape_) {
    // The Esc that ended a search stands alone, as readline's does: the key after it is
    // itself, not Alt and the key (an arrow's or Home's sequence is still one).
    search_escape_ = false;
    if (escape_.size() == 1 && byte != '[' && byte != 'O') escape_.clear();
  }
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
  if (searching_) {
    if (byte >= 0x80 || (byte >= 0x20 && byte != 0x7f)) {
      if (!utf8_byte(byte)) insert(std::string_view(reinterpret_cast<const char*>(&byte), 1));
      return Key::kEdited;  // the query grows (insert, while searching)
    }
    switch (byte) {
      case 0x12:  // Ctrl-R: an older line with the query
        if (query_.empty()) {
          query_ = last_query_;  // as readline: the last search's text again
          if (!query_.empty()) search(history_.size());
        } else if (match_ < history_.size()) {
          search(match_, /*other_text=*/true);  // a line alike the one shown would show nothing new
        }
        return Key::kEdited;
      case 0x7f:
      case 0x08:  // Backspace: the query's last character off, searched again from the newest line
        if (!query_.empty()) query_.erase(start_of_character_before(query_, query_.size()));
        match_ = history_.size();
        failed_ = false;
        if (query_.empty()) {
          show_searched_line();
        } else {
          search(history_.size());
        }
        return Key::kEdited;
      case 0x07:  // Ctrl-G: the line as it was before the search
        end_search(false);
        return Key::kEdited;
      case 0x1b:  // Esc: the line found taken, or the start of an arrow's sequence
        end_search(true);
        escape_.assign(1, '\x1b');
        search_escape_ = true;
        return Key::kEdited;
      default:  // any other key takes the line found and then acts on it (Enter sends it)
        end_search(true);
        break;
    }
  }
  if (utf8_byte(byte)) return Key::kEdited;
  return key(byte);
}

void LineEditor::search(size_t below, bool other_text) {
  for (size_t i = below; i-- > 0;) {
    const size_t at = history_[i].rfind(query_);
    if (at == std::string::npos || (other_text && history_[i] == text_)) continue;
    text_ = history_[i];
    // On the character the match starts in (a query may start with a combining mark).
    cursor_ = at < text_.size() && code_point_width(decode(text_, at).code_point) == 0 ? previous_stop(at) : at;
    first_shown_ = 0;
    match_ = i;
    failed_ = false;
    return;
  }
  failed_ = true;  // the line shown stays; the query is kept, as typed
}

void LineEditor::end_search(bool accept) {
  searching_ = false;
  if (!query_.empty()) last_query_ = query_;
  if (accept && match_ < history_.size()) {
    recalled_ = match_;  // Up and Down go on from the line found
    return;
  }
  show_searched_line();
}

void LineEditor::show_searched_line() {
  text_ = searched_text_;
  cursor_ = searched_cursor_;
  first_shown_ = 0;
}

// Inside a bracketed paste everything is text: a line end is a newline of the message, a
// tab a tab; other control bytes and escape sequences are dropped, never run as keys (a
// pasted Ctrl-D, Ctrl-U or arrow). Only the paste's end, ESC[201~, means something.
LineEditor::Key LineEditor::pasted(unsigned char byte) {
  static constexpr std::string_view kEnd = "\x1b[201~";
  if (byte == 0x1b || !escape_.empty()) {
    if (byte == 0x1b) escape_.clear();
    escape_ += static_cast<char>(byte);
    if (escape_ == kEnd) {
      escape_.clear();
      pasting_ = discarding_ = false;
    } else if (!kEnd.starts_with(escape_)) {
      escape_.clear();
    }
    utf8_.clear();
    return Key::kEdited;
  }
  if (discarding_) return Key::kEdited;
  if (utf8_byte(byte)) return Key::kEdited;
  if (byte == '\r' || byte == '\n') {
    insert_byte('\n');
  } else if (byte == '\t' || (byte >= 0x20 && byte != 0x7f)) {
    insert_byte(static_cast<char>(byte));
  }
  return Key::kEdited;
}

bool LineEditor::utf8_byte(unsigned char byte) {
  if (!utf8_.empty()) {
    if ((byte & 0xc0) == 0x80) {
      utf8_ += static_cast<char>(byte);
      if (utf8_.size() < sequence_length(static_cast<unsigned char>(utf8_[0]))) return true;
      // Well-formed (no overlong form, surrogate or code point past U+10FFFF), and no C1
      // control (U+0080-U+009F): a terminal may act on those.
      if (tok::utf8_valid_prefix(utf8_) == utf8_.size() && decode(utf8_, 0).code_point > 0x9f) {
        insert(utf8_);
      }
      utf8_.clear();
      return true;
    }
    utf8_.clear();  // a broken character is dropped; this byte is read afresh
  }
  if (byte >= 0x80) {
    if (sequence_length(byte) != 0) utf8_ = static_cast<char>(byte);
    return true;
  }
  return false;
}

void LineEditor::interrupt() {
  const bool was_pasting = pasting_;
  start();
  discarding_ = was_pasting;
}

LineEditor::Key LineEditor::key(unsigned char byte) {
  switch (byte) {
    case '\r':
    case '\n':
      // A backslash at the end continues the message on a new line.
      if (!text_.empty() && text_.back() == '\\' && cursor_ == text_.size()) {
        text_.back() = '\n';
        return Key::kEdited;
      }
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
    case 0x08:    // Ctrl-H
    case 0x7f: {  // Backspace
      const size_t from = previous_stop(cursor_);
      text_.erase(from, cursor_ - from);
      cursor_ = from;
      break;
    }
    case 0x0b:  // Ctrl-K
      kill(cursor_, text_.size());
      break;
    case 0x15:  // Ctrl-U
      kill(0, cursor_);
      break;
    case 0x17:  // Ctrl-W
      kill(previous_word(cursor_), cursor_);
      break;
    case 0x19:  // Ctrl-Y
      insert(killed_);
      break;
    case 0x14:  // Ctrl-T
      transpose();
      break;
    case 0x12:  // Ctrl-R: search the earlier lines, newest first
      searching_ = true;
      query_.clear();
      match_ = history_.size();
      failed_ = false;
      searched_text_ = text_;
      searched_cursor_ = cursor_;
      if (recalled_ == history_.size()) typed_ = text_;
      break;
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
      // A tab is text (shown as ⇥); other control keys mean nothing here.
      if (byte >= 0x20 || byte == '\t') insert_byte(static_cast<char>(byte));
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
    if (number == "200") pasting_ = true;  // a paste begins (bracketed paste mode)
    if (number == "201") pasting_ = false;
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
        break;  // keys with no meaning here (F1, Insert): swallowed
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
        kill(cursor_, next_word(cursor_));
        break;
      case 0x7f:
      case 0x08:
        kill(previous_word(cursor_), cursor_);
        break;
      default:
        break;
    }
  }
  return Key::kEdited;
}

void LineEditor::kill(size_t from, size_t to) {
  if (to <= from) return;  // nothing cut: what Ctrl-Y brings back stays
  std::string cut = text_.substr(from, to - from);
  // Cuts in a row make one piece to put back, in the order they stood (as readline's): a cut
  // before the cursor goes in front, one after it behind.
  if (!after_kill_) {
    killed_ = std::move(cut);
  } else if (from < cursor_) {
    killed_.insert(0, cut);
  } else {
    killed_ += cut;
  }
  killing_ = true;
  text_.erase(from, to - from);
  cursor_ = from;
}

void LineEditor::transpose() {
  // The character before the cursor and the one at it change places and the cursor moves
  // past both; at the end of the line, the last two (as readline's Ctrl-T).
  const size_t at = cursor_ == text_.size() ? previous_stop(cursor_) : cursor_;
  if (at == 0) return;
  const size_t before = previous_stop(at);
  const size_t after = next_stop(at);
  text_.replace(before, after - before, text_.substr(at, after - at) + text_.substr(before, at - before));
  cursor_ = after;
}

void LineEditor::insert_byte(char byte) {
  text_.insert(text_.begin() + static_cast<std::ptrdiff_t>(cursor_), byte);
  ++cursor_;
}

void LineEditor::insert(std::string_view bytes) {
  if (searching_) {  // typed while searching: the query's
    query_ += bytes;
    search(match_ < history_.size() ? match_ + 1 : history_.size());  // the line found still, if it has it
    return;
  }
  text_.insert(cursor_, bytes);
  cursor_ += bytes.size();
}

size_t LineEditor::previous_stop(size_t at) const {
  while (at > 0) {
    const size_t start = start_of_character_before(text_, at);
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
  auto width_of = [](std::string_view text, size_t from, size_t to) {
    int width = 0;
    for (size_t at = from; at < to;) {
      const Decoded character = decode(text, at);
      width += code_point_width(character.code_point);  // a tab is shown as ⇥, one column
      at += character.length;
    }
    return width;
  };
  std::string search_prompt;
  if (searching_) {
    // The query in place of the prompt, as readline shows it, within two thirds of the row
    // (a row that wrapped could not be drawn again in place): shorter labels, then the
    // query's end alone.
    const int most = std::max(1, columns - std::max(1, columns / 3) - 1);
    const std::string_view labels[] = {failed_ ? "(failed reverse-i-search)" : "(reverse-i-search)",
                                       failed_ ? "(failed)" : "", ""};
    size_t from = 0;  // where the query's shown end starts
    for (const std::string_view label : labels) {
      search_prompt = std::string(label) + "`" + query_ + "': ";
      if (width_of(search_prompt, 0, search_prompt.size()) <= most) break;
    }
    while (width_of(search_prompt, 0, search_prompt.size()) > most && from < query_.size()) {
      from += decode(query_, from).length;
      search_prompt = "`\u2026" + query_.substr(from) + "': ";  // `…end':
    }
    prompt = search_prompt;
  }
  const int prompt_width = width_of(prompt, 0, prompt.size());
  // The last column stays empty: a character there would wrap the cursor to the next row.
  const int room = std::max(1, columns - prompt_width - 1);
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
  out += prompt;
  int shown = 0;
  for (size_t at = first_shown_; at < text_.size();) {
    const size_t next = next_stop(at);
    const int width = width_of(text_, at, next);
    if (shown + width > room) break;
    if (text_[at] == '\t') {
      out += "\u21e5";  // ⇥, one column: a tab kept as typed or pasted, not a space
    } else if (text_[at] == '\n') {
      out += "\u23ce";  // ⏎, one column
    } else {
      out.append(text_, at, next - at);
    }
    shown += width;
    at = next;
  }
  out += "\x1b[K";
  cursor_column_ = prompt_width + before_cursor;
  if (shown > before_cursor) {
    out += "\x1b[";
    out += std::to_string(shown - before_cursor);
    out += 'D';
  }
  return out;
}

std::string terminal_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (tok::c1_control_at(text, i)) {
      out += "^[";
      out += static_cast<char>(static_cast<unsigned char>(text[++i]) - 0x40);
    } else if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) {
      out += '^';
      out += static_cast<char>(byte ^ 0x40);
    } else {
      out += static_cast<char>(byte);
    }
  }
  return out;
}

}  // namespace qwenrt
