// The line editor of chat: keys as a terminal sends them, and what it draws.
#include "tokenizer/line_editor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace qwenrt {
namespace {

struct Typed {
  std::vector<std::string> lines;
  bool ended = false;
  int clears = 0;
};

// Feeds the bytes one at a time, taking finished lines.
Typed type(LineEditor& editor, const std::string& bytes) {
  Typed typed;
  for (char byte : bytes) {
    switch (editor.feed(static_cast<unsigned char>(byte))) {
      case LineEditor::Key::kLine:
        typed.lines.push_back(editor.take_line());
        break;
      case LineEditor::Key::kEnd:
        typed.ended = true;
        break;
      case LineEditor::Key::kClearScreen:
        ++typed.clears;
        break;
      case LineEditor::Key::kEdited:
        break;
    }
  }
  return typed;
}

const std::string kLeft = "\x1b[D", kRight = "\x1b[C", kUp = "\x1b[A", kDown = "\x1b[B";
const std::string kHome = "\x1b[H", kEnd = "\x1b[F", kDelete = "\x1b[3~";

TEST(LineEditor, TypedTextAndEnter) {
  LineEditor editor;
  const Typed typed = type(editor, "hello world\r");
  ASSERT_EQ(typed.lines.size(), 1u);
  EXPECT_EQ(typed.lines[0], "hello world");
  EXPECT_EQ(editor.text(), "");
  EXPECT_EQ(type(editor, "a\nb\n").lines, (std::vector<std::string>{"a", "b"}));
}

TEST(LineEditor, ArrowsInsertInTheMiddle) {
  LineEditor editor;
  EXPECT_EQ(type(editor, "helo" + kLeft + "l\r").lines[0], "hello");
  EXPECT_EQ(type(editor, "world" + kHome + "hello " + kEnd + "!\r").lines[0], "hello world!");
  EXPECT_EQ(type(editor, "abc\x01X\x05Y\x02\x02Z\r").lines[0], "XabZcY");  // Ctrl-A, Ctrl-E, Ctrl-B
  EXPECT_EQ(type(editor, "ab" + kLeft + kLeft + kLeft + "<" + kRight + kRight + kRight + kRight + ">\r").lines[0],
            "<ab>");  // the cursor stops at both ends
  // The other spellings of Home and End (xterm's application mode, the console's).
  EXPECT_EQ(type(editor, "b\x1bOHa\x1bOFc\r").lines[0], "abc");
  EXPECT_EQ(type(editor, "b\x1b[1~a\x1b[4~c\r").lines[0], "abc");
}

TEST(LineEditor, Deleting) {
  LineEditor editor;
  EXPECT_EQ(type(editor, "abcd\x7f\x7f" "X\r").lines[0], "abX");  // Backspace
  EXPECT_EQ(type(editor, "abcd" + kHome + kDelete + "\x04" + "\r").lines[0], "cd");  // Delete, Ctrl-D
  EXPECT_EQ(type(editor, "abcd" + kLeft + kLeft + "\x0b\r").lines[0], "ab");          // Ctrl-K
  EXPECT_EQ(type(editor, "abcd" + kLeft + "\x15\r").lines[0], "d");                   // Ctrl-U
  EXPECT_EQ(type(editor, "one two  three  \x17\r").lines[0], "one two  ");            // Ctrl-W
  EXPECT_EQ(type(editor, "one two\x1b\x7f\r").lines[0], "one ");                      // Alt-Backspace
  EXPECT_EQ(type(editor, "one two" + kHome + "\x1b" "d\r").lines[0], " two");         // Alt-D
  EXPECT_EQ(type(editor, "\x7f\x17\x15x\r").lines[0], "x");  // nothing to delete: nothing happens
}

// Ctrl-Y puts back what the last cut took (Ctrl-K, Ctrl-U, Ctrl-W, Alt-D, Alt-Backspace),
// also on a later line; Backspace, Delete and a cut of nothing leave it as it was.
TEST(LineEditor, CtrlYPutsBackTheLastCut) {
  LineEditor editor;
  EXPECT_EQ(type(editor, "hello world\x17" + kHome + "\x19 \r").lines[0], "world hello ");  // Ctrl-W, Ctrl-Y
  EXPECT_EQ(type(editor, "\x19\x19\r").lines[0], "worldworld");  // kept across lines, as often as asked
  EXPECT_EQ(type(editor, "abcd" + kLeft + kLeft + "\x0b" + kHome + "\x19\r").lines[0], "cdab");  // Ctrl-K
  EXPECT_EQ(type(editor, "abcd" + kLeft + "\x15" + kEnd + "\x19\r").lines[0], "dabc");          // Ctrl-U
  EXPECT_EQ(type(editor, "one two" + kHome + "\x1b" "d" + kEnd + "\x19\r").lines[0], " twoone");  // Alt-D
  EXPECT_EQ(type(editor, "one two\x1b\x7f" + kHome + "\x19\r").lines[0], "twoone ");             // Alt-Backspace
  EXPECT_EQ(type(editor, "xy\x7f" + kHome + kDelete + "\x0b\x17\x19\r").lines[0], "two");  // nothing new cut
  LineEditor fresh;
  EXPECT_EQ(type(fresh, "a\x19\r").lines[0], "a");  // nothing cut yet: nothing put back
}

TEST(LineEditor, CutsInARowArePutBackTogether) {
  LineEditor editor;
  // Two Ctrl-W: both words, in their order; Ctrl-K after Ctrl-U: the whole line.
  EXPECT_EQ(type(editor, "one two three\x17\x17" + kHome + "\x19\r").lines[0], "two threeone ");
  EXPECT_EQ(type(editor, "abcdef" + kLeft + kLeft + "\x15\x0b\x19\r").lines[0], "abcdef");
  // Alt-D twice from the start: both words after the cursor, in order.
  EXPECT_EQ(type(editor, "one two three" + kHome + "\x1b" "d\x1b" "d" + kEnd + "\x19\r").lines[0],
            " threeone two");
  // A key between the cuts (a move, a typed letter) starts a new piece.
  EXPECT_EQ(type(editor, "one two three\x17" + kLeft + "\x17" + kEnd + "\x19\r").lines[0], "one  two");
  EXPECT_EQ(type(editor, "ab cd\x17x\x7f\x17\x19\r").lines[0], "ab ");
  // A new line does too.
  EXPECT_EQ(type(editor, "first\x17\rsecond\x17\x19\r").lines[1], "second");
}

TEST(LineEditor, CtrlTSwapsTwoCharacters) {
  LineEditor editor;
  EXPECT_EQ(type(editor, "abcd" + kLeft + "\x14\r").lines[0], "abdc");    // before and at the cursor
  EXPECT_EQ(type(editor, "abcd" + kLeft + kLeft + "\x14X\r").lines[0], "acbXd");  // the cursor moves past both
  EXPECT_EQ(type(editor, "abcd\x14\r").lines[0], "abdc");  // at the end: the last two
  EXPECT_EQ(type(editor, "ab" + kHome + "\x14\r").lines[0], "ab");  // at the start: nothing
  EXPECT_EQ(type(editor, "a\x14\r").lines[0], "a");
  EXPECT_EQ(type(editor, "\x14\r").lines[0], "");
  // Characters, not bytes: two-byte and combined ones change places whole.
  EXPECT_EQ(type(editor, "x\xc3\xa9\x14\r").lines[0], "\xc3\xa9x");
  EXPECT_EQ(type(editor, "ye\xcc\x81\x14\r").lines[0], "e\xcc\x81y");
}

TEST(LineEditor, WordMoves) {
  LineEditor editor;
  EXPECT_EQ(type(editor, "one two three\x1b" "b\x1b" "bX\r").lines[0], "one Xtwo three");  // Alt-B
  EXPECT_EQ(type(editor, "one two three" + kHome + "\x1b" "fX\r").lines[0], "oneX two three");  // Alt-F
  EXPECT_EQ(type(editor, "one two\x1b[1;5DX\r").lines[0], "one Xtwo");  // Ctrl-Left
  EXPECT_EQ(type(editor, "one two" + kHome + "\x1b[1;5CX\r").lines[0], "oneX two");  // Ctrl-Right
}

TEST(LineEditor, CtrlDEndsOnlyAnEmptyLine) {
  LineEditor editor;
  Typed typed = type(editor, "ab\x04");
  EXPECT_FALSE(typed.ended);  // at the end of text: deletes nothing
  EXPECT_EQ(editor.text(), "ab");
  typed = type(editor, "\x15\x04");
  EXPECT_TRUE(typed.ended);
}

TEST(LineEditor, HistoryUpAndDown) {
  LineEditor editor;
  type(editor, "first\rsecond\rsecond\r\r");  // repeats and empty lines are not kept twice
  EXPECT_EQ(editor.history(), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(type(editor, kUp + "\r").lines[0], "second");
  EXPECT_EQ(type(editor, kUp + kUp + "!\r").lines[0], "first!");  // a recalled line can be edited
  EXPECT_EQ(editor.history().back(), "first!");
  // Down past the newest gives back what was being typed; Up stops at the oldest.
  EXPECT_EQ(type(editor, "draft" + kUp + kUp + kDown + kDown + "\r").lines[0], "draft");
  EXPECT_EQ(type(editor, kUp + kUp + kUp + kUp + kUp + kUp + kUp + "\r").lines[0], "first");
  EXPECT_EQ(editor.history(), (std::vector<std::string>{"first", "second", "first!", "draft", "first"}));
  EXPECT_EQ(type(editor, "\x10\x10\x0e\r").lines[0], "first");  // Ctrl-P, Ctrl-P, Ctrl-N
  // Editing a recalled line leaves its entry alone.
  type(editor, kUp + kUp + "\x15gone" + kDown);
  EXPECT_EQ(editor.history()[3], "draft");
  editor.start();
  EXPECT_EQ(editor.text(), "");
}

TEST(LineEditor, Utf8CharactersMoveAndDeleteWhole) {
  LineEditor editor;
  // "你好" (3 bytes each) and "é" as e + a combining acute accent (one character on screen).
  EXPECT_EQ(type(editor, "你好" + kLeft + "们\r").lines[0], "你们好");
  EXPECT_EQ(type(editor, "ae\xcc\x81" + kLeft + "X\r").lines[0], "aXe\xcc\x81");
  EXPECT_EQ(type(editor, "ae\xcc\x81\x7f\r").lines[0], "a");
  EXPECT_EQ(type(editor, "😀x" + kHome + kDelete + "\r").lines[0], "x");
  // A character split between two reads is whole once its last byte comes.
  const std::string ni = "你";
  type(editor, ni.substr(0, 1));
  EXPECT_EQ(editor.text(), "");
  type(editor, ni.substr(1));
  EXPECT_EQ(editor.text(), ni);
  editor.start();
  // Bytes that are no UTF-8 (a stray continuation byte, an overlong form, a surrogate, a
  // character cut short) are dropped; the text stays valid.
  EXPECT_EQ(type(editor, "a\x80" "b\xc0\xaf" "c\xed\xa0\x80" "d\xe4\xbd" "e\r").lines[0], "abcde");
}

TEST(LineEditor, UnknownKeysAreSwallowed) {
  LineEditor editor;
  // F1 (SS3 P), F5 (CSI 15~), Insert (CSI 2~), a paste's brackets, a lone control key.
  EXPECT_EQ(type(editor, "a\x1bOP\x1b[15~\x1b[2~\x1b[200~b\x1b[201~\x07\x1a" "c\r").lines[0], "abc");
  EXPECT_EQ(type(editor, "a\x1b\x1b[Db\r").lines[0], "ba");  // ESC then an arrow: the arrow counts
  EXPECT_EQ(type(editor, "\x0c").clears, 1);
}

// Ctrl-R searches the earlier lines, newest first, as readline's reverse-i-search does.
TEST(LineEditor, CtrlRSearchesEarlierLines) {
  LineEditor editor;
  type(editor, "tell me a story\rwhat is 2+2\rtell me a joke\r");
  // Typing narrows; Enter sends the line found.
  EXPECT_EQ(type(editor, "\x12tell\r").lines, (std::vector<std::string>{"tell me a joke"}));
  // Ctrl-R again: an older line with the same text ("tell me a joke" is newest now too).
  EXPECT_EQ(type(editor, "\x12tell\x12\r").lines[0], "tell me a story");
  // The query is shown in the prompt's place, the cursor at the match.
  type(editor, "\x12" "2+");
  EXPECT_EQ(editor.text(), "what is 2+2");
  EXPECT_EQ(editor.cursor(), 8u);
  EXPECT_EQ(editor.render("> ", 80), "\r(reverse-i-search)`2+': what is 2+2\x1b[K\x1b[3D");
  // Text no line has: said so, the last line found kept; Backspace searches again.
  type(editor, "x");
  EXPECT_EQ(editor.render("> ", 80), "\r(failed reverse-i-search)`2+x': what is 2+2\x1b[K\x1b[3D");
  type(editor, "\x7f");
  EXPECT_EQ(editor.render("> ", 80), "\r(reverse-i-search)`2+': what is 2+2\x1b[K\x1b[3D");
  // Another key takes the line and acts on it: End, then text typed into it.
  EXPECT_EQ(type(editor, kEnd + "=4\r").lines[0], "what is 2+2=4");
  EXPECT_EQ(editor.render("> ", 80), "\r> \x1b[K");
  // Ctrl-G: the line as it was before the search, the search over.
  EXPECT_EQ(type(editor, "draft\x12joke\x07!\r").lines[0], "draft!");
  // Ctrl-R Ctrl-R: the last search's text again ("joke").
  EXPECT_EQ(type(editor, "\x12\x12\r").lines[0], "tell me a joke");
  // Up and Down go on from the line found; Down past the newest gives back the line typed
  // before the search.
  EXPECT_EQ(type(editor, "typed\x12story" + kEnd + kDown + kDown + kDown + kDown + kDown + "\r").lines[0], "typed");
  EXPECT_EQ(type(editor, "\x12story" + kDown + "\r").lines[0], "what is 2+2=4");  // the line sent after it
  // Ctrl-C (interrupt) ends a search with the line.
  type(editor, "\x12joke");
  editor.interrupt();
  EXPECT_EQ(editor.render("> ", 80), "\r> \x1b[K");
  EXPECT_EQ(type(editor, "ok\r").lines[0], "ok");
  // No earlier lines: every search fails, and Enter sends the line as it was.
  LineEditor fresh;
  type(fresh, "mine\x12z");
  EXPECT_EQ(fresh.render("> ", 80), "\r(failed reverse-i-search)`z': mine\x1b[K");
  EXPECT_EQ(type(fresh, "\r").lines[0], "mine");
  // UTF-8 in the query.
  type(fresh, "日本語の文\r");
  EXPECT_EQ(type(fresh, "\x12本語\x7f\r").lines[0], "日本語の文");
}

// Esc takes the line found and stands alone, as readline's does: the key after it is itself
// (not Alt-D, Alt-Backspace); an arrow after a search is still an arrow.
TEST(LineEditor, EscEndsASearchAlone) {
  LineEditor editor;
  type(editor, "tell me a story\rtell me a joke\r");
  EXPECT_EQ(type(editor, "\x12story\x1b" "d\r").lines[0], "tell me a dstory");
  EXPECT_EQ(type(editor, "\x12" "dstory\x1b\x7f\r").lines[0], "tell me adstory");
  EXPECT_EQ(type(editor, "\x12joke" + kLeft + "!\r").lines[0], "tell me a! joke");
  EXPECT_EQ(type(editor, "\x12joke\x1b\x1b" "d\r").lines[0], "tell me a! ");  // Esc, then Alt-D
}

TEST(LineEditor, CtrlRPassesOverLinesAlikeAndKeepsItsPromptInTheRow) {
  LineEditor editor;
  type(editor, "say xa\rsay b\rsay xa\rsay xa!\r");
  // "say xa" twice in the history: Ctrl-R again goes past the older copy of the line shown.
  type(editor, "\x12xa\x12");
  EXPECT_EQ(editor.text(), "say xa");
  EXPECT_EQ(type(editor, "\x12\x07\r").lines[0], "");  // no other line: failed, and Ctrl-G
  // A narrow terminal: the prompt keeps to two thirds of the row (13 of 20 columns here),
  // with a shorter label, then the query's end alone; the row never wraps.
  type(editor, "\x12say");
  EXPECT_EQ(editor.render("> ", 40), "\r(reverse-i-search)`say': say xa!\x1b[K\x1b[7D");
  EXPECT_EQ(editor.render("> ", 20), "\r`say': say xa!\x1b[K\x1b[7D");
  type(editor, "zz");  // failed: the line found before stays, its cursor where it was
  EXPECT_EQ(editor.render("> ", 40), "\r(failed)`sayzz': say xa!\x1b[K\x1b[7D");
  EXPECT_EQ(editor.render("> ", 20), "\r`sayzz': say xa!\x1b[K\x1b[7D");
  type(editor, "zzzzz");
  EXPECT_EQ(editor.render("> ", 20), "\r`\u2026yzzzzzzz': say xa\x1b[K\x1b[6D");
  editor.interrupt();
  // A query that starts with a combining mark: the cursor on the character it belongs to.
  type(editor, "e\xcc\x81" "cole\r");
  type(editor, "\x12\xcc\x81");
  EXPECT_EQ(editor.cursor(), 0u);
}

TEST(LineEditor, RenderPutsTheCursorAfterThePrompt) {
  LineEditor editor;
  EXPECT_EQ(editor.render("> ", 80, true), "> \x1b[K");
  type(editor, "hello");
  EXPECT_EQ(editor.render("> ", 80), "\r> hello\x1b[K");
  type(editor, kLeft + kLeft);
  EXPECT_EQ(editor.render("> ", 80), "\r> hello\x1b[K\x1b[2D");
  type(editor, "\x01\x0b" "你好" + kLeft);  // two columns a character
  EXPECT_EQ(editor.render("> ", 80), "\r> 你好\x1b[K\x1b[2D");
  type(editor, "\x01\x0b" "a\tb");  // a tab is shown as ⇥, one column: the columns stay known
  EXPECT_EQ(editor.render("> ", 80), "\r> a\u21e5b\x1b[K");
}

TEST(LineEditor, AWideLineScrollsAroundTheCursor) {
  LineEditor editor;
  type(editor, "0123456789abcdefghij");  // 20 columns; 10 columns leave 7 for text
  std::string shown = editor.render("> ", 10);
  EXPECT_EQ(shown, "\r> defghij\x1b[K");  // the end, where the cursor is
  type(editor, kHome);
  EXPECT_EQ(editor.render("> ", 10), "\r> 0123456\x1b[K\x1b[7D");
  type(editor, kRight + kRight + kRight);
  EXPECT_EQ(editor.render("> ", 10), "\r> 0123456\x1b[K\x1b[4D");  // no scroll while it fits
  type(editor, kEnd + kLeft + kLeft);
  EXPECT_EQ(editor.render("> ", 10), "\r> cdefghi\x1b[K\x1b[1D");  // the character under the cursor shows
  // Wide characters never straddle the edge.
  editor.start();
  type(editor, "你好世界你好");  // 12 columns
  EXPECT_EQ(editor.render("> ", 10), "\r> 界你好\x1b[K");
  type(editor, kHome);
  EXPECT_EQ(editor.render("> ", 10), "\r> 你好世\x1b[K\x1b[6D");
}

// A control key ends an escape sequence left open (a lone Esc, or half an arrow's sequence
// typed while an answer was written) and counts itself: Enter is never swallowed.
TEST(LineEditor, AControlKeyEndsAnOpenEscapeSequence) {
  LineEditor editor;
  EXPECT_EQ(type(editor, "/abc\x1b[\r").lines, (std::vector<std::string>{"/abc"}));
  EXPECT_EQ(type(editor, "x\x1b\r").lines, (std::vector<std::string>{"x"}));
  EXPECT_EQ(type(editor, "ab\x1b[1;\x7f" "c\r").lines[0], "ac");  // Backspace cancels, then deletes
}

// A pasted CR LF ends one line; a LF alone (a Unix paste) ends one too; CR CR is two.
TEST(LineEditor, LineEnds) {
  LineEditor editor;
  EXPECT_EQ(type(editor, "a\r\nb\r\n").lines, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(type(editor, "a\nb\n").lines, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(type(editor, "a\r\rb\r").lines, (std::vector<std::string>{"a", "", "b"}));
}

// Blank lines are not kept to be recalled; C1 controls are no text.
TEST(LineEditor, BlankLinesAndC1ControlsAreNotKept) {
  LineEditor editor;
  type(editor, "one\r   \r\t\r");
  EXPECT_EQ(editor.history(), (std::vector<std::string>{"one"}));
  EXPECT_EQ(type(editor, "a\xc2\x9b" "2J\xc2\x85" "b\r").lines[0], "a2Jb");  // U+009B (CSI), U+0085 (NEL)
}

// Keys that arrive together (one read, one redraw) may put text before the part shown of a
// wide line: the part shown still starts on a character.
TEST(LineEditor, TextPutBeforeTheShownPartKeepsItWhole) {
  LineEditor editor;
  type(editor, std::string(100, 'a'));
  editor.render("> ", 40);
  std::string keys = "\x01";
  for (int i = 0; i < 32; ++i) keys += "é";
  type(editor, keys);
  const std::string shown = editor.render("> ", 40);
  EXPECT_EQ(shown.substr(0, 5), "\r> \xc3\xa9") << shown;  // starts with a whole é
  EXPECT_EQ(shown.find("\xa9" "\xa9"), std::string::npos);  // no stray continuation byte
}

// A bracketed paste's line ends are text: the block is one message. A backslash before
// Enter continues the message on a new line. Line ends are shown as ⏎, one column.
TEST(LineEditor, MessagesOfSeveralLines) {
  LineEditor editor;
  EXPECT_EQ(type(editor, "\x1b[200~def f():\r\n\treturn 1\nend\x1b[201~\r").lines,
            (std::vector<std::string>{"def f():\n\treturn 1\nend"}));
  EXPECT_EQ(type(editor, "first\\\rsecond\r").lines, (std::vector<std::string>{"first\nsecond"}));
  EXPECT_EQ(type(editor, "a\\b" "\x1b[D\r").lines, (std::vector<std::string>{"a\\b"}));  // only at the end
  type(editor, "\x1b[200~x\ny\x1b[201~");
  EXPECT_EQ(editor.render("> ", 80), "\r> x\u23cey\x1b[K");
  type(editor, "\r");
  // Inside a paste, control bytes and escape sequences are text or nothing, never keys.
  type(editor, "h1\r");
  EXPECT_EQ(type(editor, "/q\x1b[200~keep\x15" "ab\x7f" "c\td\x1b[Ax\x04\x1b[201~\r").lines,
            (std::vector<std::string>{"/qkeepabc\tdx"}));
  // A paste cut short by Ctrl-C: its rest, up to the paste's end, is dropped, not typed.
  type(editor, "\x1b[200~half\rline");
  editor.interrupt();
  EXPECT_EQ(editor.text(), "");
  editor.start();
  EXPECT_EQ(type(editor, "baz\r/tail2\r/ta\x1b[201~" "a\rb\r").lines, (std::vector<std::string>{"a", "b"}));
  // Without a paste in progress, Ctrl-C drops the line only.
  type(editor, "typed");
  editor.interrupt();
  EXPECT_EQ(type(editor, "c\r").lines, (std::vector<std::string>{"c"}));
}

TEST(LineEditor, Widths) {
  EXPECT_EQ(LineEditor::code_point_width(U'a'), 1);
  EXPECT_EQ(LineEditor::code_point_width(U'é'), 1);
  EXPECT_EQ(LineEditor::code_point_width(0x0301), 0);  // combining acute
  EXPECT_EQ(LineEditor::code_point_width(0x200d), 0);  // zero-width joiner
  EXPECT_EQ(LineEditor::code_point_width(U'你'), 2);
  EXPECT_EQ(LineEditor::code_point_width(U'가'), 2);
  EXPECT_EQ(LineEditor::code_point_width(0xff21), 2);   // fullwidth A
  EXPECT_EQ(LineEditor::code_point_width(0x1f600), 2);  // 😀
  EXPECT_EQ(LineEditor::code_point_width(0x3000), 2);   // ideographic space
  EXPECT_EQ(LineEditor::code_point_width(U'→'), 1);
  EXPECT_EQ(LineEditor::code_point_width(0x094d), 0);   // Devanagari virama
  EXPECT_EQ(LineEditor::code_point_width(0x0947), 0);   // Devanagari vowel sign E
  EXPECT_EQ(LineEditor::code_point_width(0x1161), 0);   // Hangul medial vowel (a conjoining jamo)
  EXPECT_EQ(LineEditor::code_point_width(0x1f7f0), 2);  // 🟰
  EXPECT_EQ(LineEditor::code_point_width(U'\t'), 1);    // shown as ⇥
}

// A model's text reaches a terminal with its control characters shown, not acted on.
TEST(TerminalText, ControlCharactersInCaretNotation) {
  EXPECT_EQ(terminal_text("plain text, 你好\n\tnext line"), "plain text, 你好\n\tnext line");
  EXPECT_EQ(terminal_text("\x1b[2J\x1b]52;c;aGk=\x07"), "^[[2J^[]52;c;aGk=^G");  // clear; clipboard write
  EXPECT_EQ(terminal_text(std::string_view("a\rb\x7f\x08\x00", 6)), "a^Mb^?^H^@");
  EXPECT_EQ(terminal_text("\xc2\x9b" "31m \xc2\x85 \xc2\xa0"), "^[[31m ^[E \xc2\xa0");  // C1 CSI, NEL; NBSP stays
}

}  // namespace
}  // namespace qwenrt
