// A line being typed at a terminal: its text, the cursor, earlier lines to recall, and
// what the terminal must be sent to show it. No input or output of its own: keys come in
// as the bytes a terminal sends (UTF-8 text, control keys, escape sequences, in any
// pieces), the screen goes out as text to write (`render`). chat uses it where stdin and
// stdout are a terminal; tests feed it bytes.
//
// Keys: the arrows, Home/End (also Ctrl-A/Ctrl-E), Ctrl-B/Ctrl-F, word moves with Alt-B/
// Alt-F or Ctrl-arrows, Backspace, Delete (also Ctrl-D on a non-empty line), Ctrl-K and
// Ctrl-U (delete to the end, to the start), Ctrl-W (the word before the cursor), Alt-D and
// Alt-Backspace (the word after, before), Ctrl-Y (the text the last of those cut, cuts in a
// row together), Ctrl-T (swap the two characters at the cursor), Up/Down
// and Ctrl-P/Ctrl-N (earlier lines), Ctrl-R (search the earlier lines as typed, newest
// first: Ctrl-R again for an older one, Ctrl-G back to the line as it was, Esc or any other
// key takes the line found, the other key then acting on it), Ctrl-L (clear the screen),
// Enter (the line is done),
// Ctrl-D on an empty line (the end of input). Unknown escape sequences are swallowed whole.
// Lines too wide for the terminal scroll sideways around the cursor. A message of several
// lines: pasted with the terminal's bracketed paste (ESC[200~ … ESC[201~, whose line ends
// are text), or typed with a backslash before Enter; its line ends are shown as ⏎ (and tabs as ⇥).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qwenrt {

class LineEditor {
 public:
  enum class Key {
    kEdited,       // the text or the cursor may have changed: render again
    kLine,         // Enter: take_line() has the line
    kEnd,          // Ctrl-D on an empty line
    kClearScreen,  // Ctrl-L: clear the screen, then render
  };

  // Starts a new line (the last line's text, cursor and pending bytes gone; history kept).
  void start();

  // Ctrl-C: the line is dropped as start() drops it, and so is the rest of a paste it cut
  // short (up to the paste's end), which must not arrive as typed keys.
  void interrupt();

  // One byte from the terminal. Bytes of an escape sequence or of a UTF-8 character are
  // kept until it is whole.
  Key feed(unsigned char byte);

  // The finished line (after kLine), added to the history when it is not blank and not the
  // same as the newest entry (remembered() then says so).
  std::string take_line();
  bool remembered() const { return remembered_; }  // the last take_line() added to the history

  // Adds an earlier line to the history as take_line() would (lines of an earlier session);
  // false when it was not added (blank, or the same as the newest entry).
  bool remember(std::string line);
  static constexpr size_t kMaxHistory = 1000;  // the oldest lines go past this

  // What to write to redraw the line at the cursor's row: a carriage return, the prompt, the
  // part of the text that fits in `columns`, erase to the end of the row, and the cursor put
  // where it belongs. `first` leaves out the carriage return (the prompt's first showing).
  std::string render(std::string_view prompt, int columns, bool first = false);

  const std::string& text() const { return text_; }
  int cursor_column() const { return cursor_column_; }  // where the last render left it
  size_t cursor() const { return cursor_; }             // a byte offset into text()
  const std::vector<std::string>& history() const { return history_; }

  // Columns a code point takes in a terminal: 0 for combining marks and zero-width ones, 2
  // for East Asian wide and fullwidth characters and emoji, 1 otherwise (a tab: 1, it is
  // shown as ⇥).
  static int code_point_width(char32_t c);

 private:
  Key take(unsigned char byte);
  Key pasted(unsigned char byte);
  bool utf8_byte(unsigned char byte);  // true when it was part of a UTF-8 character
  Key key(unsigned char byte);
  Key escape_sequence(std::string_view sequence);
  void insert(std::string_view bytes);
  void insert_byte(char byte);
  void kill(size_t from, size_t to);  // cuts text_[from, to) into killed_; the cursor to `from`
  void transpose();                   // Ctrl-T
  size_t previous_stop(size_t at) const;  // the start of the character before `at`
  size_t next_stop(size_t at) const;      // the end of the character at `at`
  size_t previous_word(size_t at) const;
  size_t next_word(size_t at) const;
  void recall(int step);  // through the history: -1 older, +1 newer
  // Ctrl-R's search: the newest line before history_[below] that has query_ (cursor at it);
  // with `other_text`, lines alike the one shown are passed over.
  void search(size_t below, bool other_text = false);
  void end_search(bool accept);  // accept: keep the line found; else the line as it was
  void show_searched_line();     // the line and cursor as they were when the search began

  std::string text_;
  size_t cursor_ = 0;
  std::string escape_;       // an escape sequence being received
  std::string utf8_;         // a UTF-8 character being received
  bool after_cr_ = false;    // the byte before was a CR: a LF now completes a CR LF pair
  bool pasting_ = false;     // between a bracketed paste's ESC[200~ and ESC[201~
  bool discarding_ = false;  // the rest of a paste cut short by Ctrl-C
  bool remembered_ = false;  // the last take_line() added to the history
  std::string killed_;       // what Ctrl-K, Ctrl-U, Ctrl-W, Alt-D or Alt-Backspace cut last
  bool killing_ = false;     // the key being read cut something
  bool after_kill_ = false;  // the key before cut something: a cut now joins what it cut
  std::vector<std::string> history_;
  size_t recalled_ = 0;     // history_.size(): the line being typed, not a recalled one
  std::string typed_;       // the line being typed while an older one is shown
  size_t first_shown_ = 0;  // the byte where the shown part of a wide line starts
  int cursor_column_ = 0;
  // Ctrl-R: the query, the line found (history_.size(): none yet), whether the last search
  // failed, the line and cursor as they were, the query of the search before.
  bool searching_ = false;
  std::string query_;
  size_t match_ = 0;
  bool failed_ = false;
  std::string searched_text_;
  size_t searched_cursor_ = 0;
  std::string last_query_;
  bool search_escape_ = false;  // escape_ holds the Esc that ended a search
};

// A model's text for a terminal: control characters other than newline and tab (escape
// sequences that would move the cursor, retitle the window, write the clipboard) in caret
// notation, as `cat -v` shows them: ESC as ^[, DEL as ^?, a C1 control as ^[ and its 7-bit
// letter. `text` is whole UTF-8 characters (a stream decoder's pieces).
std::string terminal_text(std::string_view text);

}  // namespace qwenrt
