// qwenrt chat: interactive multi-turn chat with the model's own chat template, streamed.
// Ctrl-C stops the answer being written (not the program); at the prompt it drops the line
// being typed (Ctrl-D or /exit leaves); the line is edited with tokenizer/line_editor. Works with
// piped stdin: prompts, editing and decorations are only for a terminal, and Ctrl-C ends the
// program (exit 130) after stopping the answer.
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/history_file.h"
#include "core/error.h"
#include "tokenizer/line_editor.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::cli {
namespace {

// Set by SIGINT, which also writes a byte to the wake pipe: the prompt waits on the pipe
// next to stdin, so a Ctrl-C is seen however soon after the prompt it comes and whichever
// thread the signal lands on (a flag checked before a blocking read misses one that comes
// between the check and the read). `g_redraw`: the line being edited must be drawn again
// (the program was continued after Ctrl-Z, or the terminal changed size). The terminal
// modes: the one the program was started in, and the one a line is edited in, put back
// around a stop. The only globals, as signals need them.
std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_redraw{false};
std::atomic<bool> g_keys_mode{false};
std::atomic<bool> g_started_saved{false};  // g_started_mode holds the mode: written once, before this
termios g_started_mode{}, g_edit_mode{};
int g_wake[2] = {-1, -1};

// Bracketed paste: while a line is edited the terminal marks what is pasted, so a pasted
// block of lines is one message (terminals without it ignore this).
void paste_marks(bool on) {
  const char* sequence = on ? "\x1b[?2004h" : "\x1b[?2004l";
  [[maybe_unused]] const ssize_t written = write(STDOUT_FILENO, sequence, std::strlen(sequence));
}

void wake_prompt() {
  if (g_wake[1] >= 0) {
    [[maybe_unused]] const ssize_t written = write(g_wake[1], "!", 1);  // a full pipe wakes the prompt already
  }
}

extern "C" void on_sigint(int) {
  const int saved = errno;
  g_interrupted.store(true);
  wake_prompt();
  errno = saved;
}

// The terminal as the shell had it, before a stop or the end. Outside a line's editing the
// terminal is in that mode already, so it is set whenever it is known: a signal that lands
// while KeysMode switches modes still leaves the shell its own.
void shell_mode() {
  if (g_keys_mode.load()) paste_marks(false);
  if (g_started_saved.load()) tcsetattr(STDIN_FILENO, TCSANOW, &g_started_mode);
}

// Back from a stop: editing's mode again, and the line drawn again.
void resume_editing() {
  if (g_keys_mode.load()) {
    tcsetattr(STDIN_FILENO, TCSANOW, &g_edit_mode);
    paste_marks(true);
  }
  g_redraw.store(true);
  wake_prompt();
}

// From inside its handler, the signal's default action now (stop or end); when the process
// goes on (continued after a stop), the handler is put back.
void take_default_action(int signal_number) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  struct sigaction ours {};
  sigaction(signal_number, &default_action, &ours);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal_number);
  raise(signal_number);                      // pending: blocked while the handler runs
  sigprocmask(SIG_UNBLOCK, &only, nullptr);  // taken here
  sigaction(signal_number, &ours, nullptr);
}

// Ctrl-Z while a line is edited: the terminal gets its own mode back for the shell, then the
// program stops as it would have. Continued, or never stopped (the kernel does not stop an
// orphaned process group): editing goes on either way.
extern "C" void on_sigtstp(int signal_number) {
  const int saved = errno;
  shell_mode();
  take_default_action(signal_number);
  resume_editing();
  errno = saved;
}

// SIGTERM, SIGHUP or SIGQUIT (Ctrl-\) while a line is edited: the terminal gets its mode
// back, then the signal ends the program as it would have.
extern "C" void on_ending_signal(int signal_number) {
  if (g_keys_mode.load()) {
    [[maybe_unused]] const ssize_t written = write(STDOUT_FILENO, "\r\n", 2);  // the shell's prompt on a row of its own
  }
  shell_mode();
  take_default_action(signal_number);
}

extern "C" void on_sigcont(int) {
  const int saved = errno;
  resume_editing();
  errno = saved;
}

extern "C" void on_sigwinch(int) {
  const int saved = errno;
  g_redraw.store(true);
  wake_prompt();
  errno = saved;
}

// Empties the wake pipe (it is non-blocking).
void drain_wake() {
  char bytes[64];
  while (read(g_wake[0], bytes, sizeof bytes) > 0) {
  }
}

// Forgets Ctrl-C pressed before now (the one that stopped an answer, say), and the error it
// left on stdout if it cut a write short (EINTR: the handler does not restart calls).
void forget_interrupts() {
  drain_wake();
  if (g_interrupted.exchange(false)) std::clearerr(stdout);
  g_redraw.store(false);  // the prompt is drawn anew
}

enum class PromptInput { kLine, kInterrupted, kEnd };

// Puts the terminal in a mode where keys come one at a time, unechoed, while a line is
// edited; Ctrl-C and Ctrl-Z keep their signals. The terminal's own mode comes back when the
// object goes (before an answer is written, before the program ends).
class KeysMode {
 public:
  KeysMode() {
    termios started{};
    if (tcgetattr(STDIN_FILENO, &started) != 0) return;
    termios keys = started;
    keys.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    // Enter comes as CR and a pasted line end as LF: a pasted CR LF is one line end, not two.
    keys.c_iflag &= ~static_cast<tcflag_t>(ICRNL);
    keys.c_cc[VMIN] = 1;
    keys.c_cc[VTIME] = 0;
    // The shell's mode is taken once (the terminal is in it between lines); the handlers
    // read it, so it is not written again while they may.
    if (!g_started_saved.load()) {
      g_started_mode = started;
      g_started_saved.store(true);
    }
    g_edit_mode = keys;
    // Marked before the switch: a stop that lands between the two then finds editing's mode
    // to give back after it (an end finds the shell's mode to restore either way).
    g_keys_mode.store(true);
    // TCSANOW: what was typed ahead (during an answer) stays to be read.
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &keys) == 0;
    if (!active_) g_keys_mode.store(false);
  }
  ~KeysMode() {
    if (!active_) return;
    g_keys_mode.store(false);
    std::fflush(stdout);
    paste_marks(false);
    tcsetattr(STDIN_FILENO, TCSANOW, &g_started_mode);
  }
  KeysMode(const KeysMode&) = delete;
  KeysMode& operator=(const KeysMode&) = delete;
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

// Lines typed at the terminal, read with Ctrl-C in view. With a terminal that takes escape
// sequences (TERM other than "dumb") the line is edited here (tokenizer/line_editor.h: arrows,
// history, Ctrl-A/E/K/U/W, ...); otherwise the terminal's canonical mode hands over a line
// at a time. Text past a finished line (a paste of several lines) is kept for the next call.
class TerminalLines {
 public:
  TerminalLines() {
    const char* term = std::getenv("TERM");
    edit_ = term == nullptr || std::strcmp(term, "dumb") != 0;
  }

  bool edits() const { return edit_; }  // escape sequences are understood (not TERM=dumb)

  // Up/Down and Ctrl-R also reach the messages `file` holds, and each new one is added to it.
  void keep_history(HistoryFile* file) {
    history_ = file;
    for (std::string& message : file->load(LineEditor::kMaxHistory)) editor_.remember(std::move(message));
  }

  // Forgets what was read and not used (the rest of a paste), and what the terminal holds
  // unread: after Ctrl-C stopped an answer, the lines queued behind it are not sent.
  void drop_unread() {
    pending_.clear();
    tcflush(STDIN_FILENO, TCIFLUSH);
  }

  // Shows `prompt` and returns a line, Ctrl-C (which drops what was typed), or the end of
  // input (Ctrl-D on an empty line, or the terminal gone).
  PromptInput next(const std::string& prompt, std::string& line) {
    if (edit_) {
      KeysMode keys;
      if (keys.active()) return edited(prompt, line);
    }
    show(prompt);
    return canonical(line);
  }

 private:
  static void show(const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }

  static int columns() {
    winsize size{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
    return 80;
  }

  enum class Wait { kInput, kInterrupted, kRedraw };

  // Waits for stdin, a Ctrl-C (the typed line and the unread input gone) or a redraw.
  Wait wait_for_input() {
    while (true) {
      pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {g_wake[0], POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return Wait::kInput;  // the read says what is wrong
      }
      if (fds[1].revents & POLLIN) {
        drain_wake();
        if (g_interrupted.load()) {
          // A Ctrl-C typed flushes the terminal's unread input; a SIGINT sent from elsewhere
          // does not, and the line it drops must go too.
          drop_unread();
          return Wait::kInterrupted;
        }
        if (g_redraw.exchange(false)) return Wait::kRedraw;
        continue;
      }
      if (fds[0].revents != 0) return Wait::kInput;
    }
  }

  // Ctrl-C at the prompt: ^C after the line's text, on a row of its own where the row is
  // full; the line, the unread input and the rest of a paste it cut are dropped.
  PromptInput interrupted(const std::string& prompt) {
    const int width = columns();
    editor_.feed(0x05);  // to the line's end, so ^C does not cover the text
    std::string shown = editor_.render(prompt, width);
    shown += editor_.cursor_column() + 2 >= width ? "\n^C\n" : "^C\n";
    show(shown);
    editor_.interrupt();
    drain_wake();
    drop_unread();
    return PromptInput::kInterrupted;
  }

  PromptInput edited(const std::string& prompt, std::string& line) {
    editor_.start();
    show(editor_.render(prompt, columns(), /*first=*/true));
    paste_marks(true);  // after the prompt; KeysMode turns them off
    while (true) {
      // A Ctrl-C that came while keys already read were being used (one read of "abc",
      // Ctrl-C, "def", Enter): the line goes, and the answer does not start stopped.
      if (g_interrupted.load()) return interrupted(prompt);
      if (pending_.empty()) {
        const Wait wait = wait_for_input();
        if (wait == Wait::kInterrupted) return interrupted(prompt);
        if (wait == Wait::kRedraw) {
          show(editor_.render(prompt, columns()));
          continue;
        }
        char buffer[4096];
        const ssize_t n = read(STDIN_FILENO, buffer, sizeof buffer);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return PromptInput::kEnd;  // the terminal is gone
        pending_.assign(buffer, static_cast<size_t>(n));
      }
      // The keys read so far, then one redraw (a paste is drawn once, not once a key).
      size_t used = 0;
      while (used < pending_.size()) {
        const LineEditor::Key key = editor_.feed(static_cast<unsigned char>(pending_[used++]));
        if (key == LineEditor::Key::kEdited) continue;
        if (key == LineEditor::Key::kClearScreen) {
          show("\x1b[H\x1b[2J");
          continue;
        }
        pending_.erase(0, used);
        if (g_interrupted.load()) return interrupted(prompt);
        if (key == LineEditor::Key::kEnd) return PromptInput::kEnd;
        // The whole message stays on the screen, its lines and wraps the terminal's, over
        // the row the editor drew.
        show("\r\x1b[K" + prompt + editor_.text() + "\n");
        line = editor_.take_line();
        if (history_ != nullptr && editor_.remembered() && !history_->append(line)) {
          show("[--history " + history_->path() + ": a write failed; later messages are not kept]\n");
        }
        return PromptInput::kLine;
      }
      pending_.clear();
      show(editor_.render(prompt, columns()));
    }
  }

  PromptInput canonical(std::string& line) {
    while (true) {
      const size_t newline = pending_.find('\n');
      if (newline != std::string::npos) {
        line = pending_.substr(0, newline);
        pending_.erase(0, newline + 1);
        return PromptInput::kLine;
      }
      const Wait wait = wait_for_input();
      if (wait == Wait::kInterrupted) return PromptInput::kInterrupted;
      if (wait == Wait::kRedraw) continue;
      char buffer[4096];
      const ssize_t n = read(STDIN_FILENO, buffer, sizeof buffer);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return PromptInput::kEnd;
      }
      // Ctrl-D on an empty line ends the input (n == 0). After text it hands that text over
      // (n > 0, no newline), and a second Ctrl-D then ends the line.
      if (n == 0) {
        if (pending_.empty()) return PromptInput::kEnd;
        line.swap(pending_);
        pending_.clear();
        return PromptInput::kLine;
      }
      pending_.append(buffer, static_cast<size_t>(n));
    }
  }

  bool edit_ = true;
  LineEditor editor_;    // keeps the history of the lines sent
  HistoryFile* history_ = nullptr;  // --history: where that history is kept between sessions
  std::string pending_;  // read and not yet used
};

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;
  bool think = false;
  bool no_think = false;
  bool hide_thinking = false;
  bool verbose = false;
  int max_new_tokens = 2048;
  std::string chat_template;  // a file replacing the folder's template
  std::string history;        // --history FILE
};

const char* kHelp =
    "commands: /reset (forget the conversation), /system TEXT (set the system prompt and reset),\n"
    "          /stats (speed and context of the last answer), /exit (or Ctrl-D)\n"
    "Editing the line: Left/Right, Home/End (Ctrl-A/Ctrl-E), Alt-B/Alt-F or Ctrl-Left/Right by\n"
    "words, Up/Down (Ctrl-P/Ctrl-N) for earlier messages, Ctrl-R to search them (again: an\n"
    "older one; Ctrl-G: back), Backspace, Delete, Ctrl-K/Ctrl-U (cut to the end/start), Ctrl-W\n"
    "and Alt-Backspace/Alt-D (cut the word before/after), Ctrl-Y (put back the last cut; cuts\n"
    "in a row go back as one), Ctrl-T (swap the two characters at the cursor), Ctrl-L (clear\n"
    "the screen). A message of several lines: paste it (one message, its line ends shown as\n"
    "\u23ce, tabs as \u21e5), or end a line with \\ to go on.\n"
    "With TERM=dumb the terminal's own line mode is used (a line a message).\n"
    "Earlier turns stay in the KV cache, so only each new message is prefilled. When the\n"
    "conversation outgrows --max-context, its oldest turns are dropped so the answer keeps\n"
    "room (the smaller of -n and a quarter of the context).\n";

const char* kExitCodes =
    "Exit codes: 0 success (/exit, Ctrl-D, the end of piped input); 1 a runtime error, or with piped\n"
    "input a message that was not answered (too long, or not UTF-8); 2 bad arguments; 130 interrupted\n"
    "(with piped input, Ctrl-C).\n";

class ChatSession {
 public:
  ChatSession(const ChatArgs& args, const CLI::App& cmd)
      : args_(args),
        tokenizer_(Tokenizer::load(args.model.tokenizer_folder())),
        template_(ChatTemplate::load(args.model.tokenizer_folder(), args.chat_template)),
        history_file_(args.history.empty() ? nullptr : std::make_unique<HistoryFile>(args.history)),
        engine_(args.model.model_dir, engine_options(args.model)),
        session_(engine_.new_session()),
        interactive_(isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)),
        system_(args.system),
        has_system_(cmd.count("--system") > 0) {
    options_.max_new_tokens = args.max_new_tokens;
    options_.sampling = effective_sampling(args.sampling, cmd, engine_.config());
    prepare_chat(engine_.config(), tokenizer_, options_);
    if (args.verbose) {
      print_sampling(options_.sampling, engine_.config());
      print_memory_report(engine_);
    }
    think_open_ = tokenizer_.token_to_id("<think>").value_or(-1);
    think_close_ = tokenizer_.token_to_id("</think>").value_or(-1);
    // Lines typed at a terminal only: piped input is a script's, not kept.
    if (history_file_ && interactive_) terminal_.keep_history(history_file_.get());
  }

  int run() {
    if (interactive_) {
      std::printf("qwenrt chat: %s on %s. Type /help for commands, Ctrl-C stops an answer.\n",
                  engine_.config().architecture_name.c_str(), engine_.backend().name().c_str());
    }
    std::string line;
    while (true) {
      forget_interrupts();
      if (interactive_) {
        std::printf("\n");
        const PromptInput input = terminal_.next("> ", line);
        if (input == PromptInput::kInterrupted) {
          // Ctrl-C at the prompt drops the line being typed, not the conversation.
          note("Ctrl-C: type /exit or press Ctrl-D to leave");
          continue;
        }
        if (input == PromptInput::kEnd) {
          std::printf("\n");
          return finish();  // Ctrl-D
        }
      } else if (!std::getline(std::cin, line)) {
        // The end of piped input, or a Ctrl-C while waiting for it (the read is not restarted).
        return g_interrupted.load() ? kExitInterrupted : finish();
      } else if (!line.empty() && line.back() == '\r') {
        line.pop_back();  // a file written with CR LF line ends
      }
      if (line.find_first_not_of(" \t\n") == std::string::npos) continue;  // nothing to send
      if (const std::string problem = utf8_problem(line); !problem.empty()) {
        // Only piped input can carry such bytes (the editor drops a broken character): this
        // message is left out and the rest still read, as one too long for the context.
        note("this " + std::string(line[0] == '/' ? "command" : "message") + " is " + problem + ": not sent");
        ++unanswered_;
        continue;
      }
      if (line[0] == '/') {
        if (!command(line)) return finish();
        continue;
      }
      answer(line);
      // Piped input is a script's: Ctrl-C stops it as it stops other programs (the answer
      // already ended and told so), not only the answer as at a terminal.
      if (!interactive_ && g_interrupted.load()) return kExitInterrupted;
      if (std::ferror(stdout)) return kExitError;  // main says the output failed
    }
  }

 private:
  // The exit code at the end: for piped input (a script), 1 when a message was not answered.
  int finish() const {
    if (interactive_ || unanswered_ == 0) return kExitOk;
    std::fprintf(stderr, "qwenrt: chat: %d message%s not answered (see the notes above)\n", unanswered_,
                 unanswered_ == 1 ? " was" : "s were");
    return kExitError;
  }

  // Returns false to leave the chat.
  bool command(const std::string& line) {
    std::string name = line.substr(0, line.find(' '));
    std::string rest = line.size() > name.size() ? line.substr(name.size() + 1) : "";
    if (name == "/exit" || name == "/quit") return false;
    if (name == "/reset") {
      clear_conversation();
      note("conversation cleared");
    } else if (name == "/system") {
      has_system_ = rest.find_first_not_of(" \t") != std::string::npos;
      system_ = has_system_ ? rest : "";
      clear_conversation();
      note(has_system_ ? "system prompt set; conversation cleared" : "system prompt removed; conversation cleared");
    } else if (name == "/stats") {
      note(stats());
    } else if (name == "/help") {
      std::printf("%s", kHelp);
    } else {
      note("unknown command " + name + "; /help lists them");
    }
    return true;
  }

  void clear_conversation() {
    messages_ = nlohmann::ordered_json::array();
    session_->reset();
    last_ = {};
    last_context_ = 0;
  }

  // /stats: the last answer's speed and the context it left.
  std::string stats() const {
    const int context = engine_.memory_plan().max_context;
    if (last_.ids.empty()) return "no answer yet in this conversation; context 0 of " + std::to_string(context) + " tokens";
    const size_t tokens = last_.ids.size();
    char text[320];
    // The first token comes with the prompt; the rate is over the ones after it.
    char rate[48] = "";
    if (tokens > 1 && last_.decode_seconds > 0) {
      std::snprintf(rate, sizeof(rate), ", %.1f tokens/s", static_cast<double>(tokens - 1) / last_.decode_seconds);
    }
    std::snprintf(text, sizeof(text),
                  "last answer: %zu token%s%s, first token after %.1f ms; prompt %d tokens, %d of them cached from "
                  "earlier turns; context %d of %d tokens",
                  tokens, tokens == 1 ? "" : "s", rate, last_.time_to_first_token * 1e3, last_.prompt_tokens,
                  last_.reused_tokens, last_context_, context);
    return text;
  }

  // The model's text; on a terminal its control characters are shown, not acted on.
  void write_text(const std::string& text) {
    const std::string shown = interactive_ ? terminal_text(text) : text;
    std::fwrite(shown.data(), 1, shown.size(), stdout);
  }

  void note(const std::string& text) { std::fprintf(interactive_ ? stdout : stderr, "[%s]\n", text.c_str()); }

  // The prompt for `user_text` after the conversation so far. When that would leave the
  // answer less than -n tokens or a quarter of the context (the smaller), the oldest turns
  // are dropped, a user message and its answer at a time, and the user is told.
  std::vector<int32_t> build_prompt(const std::string& user_text) {
    const int context = engine_.memory_plan().max_context;
    const size_t room = static_cast<size_t>(std::min(options_.max_new_tokens, std::max(1, context / 4)));
    nlohmann::ordered_json vars = nlohmann::ordered_json::object();
    if (args_.think || args_.no_think) vars["enable_thinking"] = args_.think;
    size_t dropped = 0;
    std::vector<int32_t> prompt;
    while (true) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (has_system_) messages.push_back({{"role", "system"}, {"content", system_}});
      for (size_t i = dropped; i < messages_.size(); ++i) messages.push_back(messages_[i]);
      messages.push_back({{"role", "user"}, {"content", user_text}});
      prompt = encode_chat_prompt(tokenizer_, template_, messages, nullptr, true, vars);
      if (prompt.size() + room <= static_cast<size_t>(context) || dropped >= messages_.size()) break;
      dropped += 2;
    }
    if (dropped > 0) {
      messages_.erase(messages_.begin(), messages_.begin() + static_cast<std::ptrdiff_t>(dropped));
      note((dropped == 2 ? std::string("dropped the oldest turn")
                         : "dropped the " + std::to_string(dropped / 2) + " oldest turns") +
           " to keep the conversation within the " + std::to_string(context) + "-token context");
    }
    return prompt;
  }

  void answer(const std::string& user_text) {
    std::vector<int32_t> prompt = build_prompt(user_text);
    if (static_cast<int>(prompt.size()) >= engine_.memory_plan().max_context) {
      note("this message (" + std::to_string(prompt.size()) + " tokens with the chat template) does not fit the " +
           std::to_string(engine_.memory_plan().max_context) +
           "-token context: shorten it, or restart with a larger --max-context");
      ++unanswered_;
      return;
    }
    GenerateOptions options = options_;
    options.max_new_tokens = std::min(options.max_new_tokens,
                                      engine_.memory_plan().max_context - static_cast<int>(prompt.size()));
    StreamDecoder decoder(tokenizer_, /*skip_special=*/true);
    std::string reply;
    bool thinking = false;
    const bool dim = interactive_ && terminal_.edits();  // thinking dimmed, where escapes are understood
    // The session keeps the KV cache of earlier turns: only the new part of the prompt runs.
    last_ = engine_.generate(*session_, prompt, options, [&](int32_t id) {
      if (g_interrupted.load()) return false;
      if (id == think_open_ && !thinking) {
        thinking = true;
        if (dim && !args_.hide_thinking) std::printf("\x1b[2m");
      }
      std::string piece = decoder.push(id);
      reply += piece;
      if (!(thinking && args_.hide_thinking)) write_text(piece);
      if (id == think_close_) {
        thinking = false;
        if (dim && !args_.hide_thinking) std::printf("\x1b[0m");
      }
      std::fflush(stdout);
      return stdout_ok();  // nobody takes the output (or Ctrl-C cut a write): stop
    });
    // Ctrl-C may have cut a write to the terminal short (EINTR: the handler does not restart
    // calls, so that it also ends a wait for piped input): that is the stop asked for, not an
    // output that failed.
    if (g_interrupted.load()) std::clearerr(stdout);
    std::string rest = decoder.flush();
    reply += rest;
    write_text(rest);
    if (dim && thinking) std::printf("\x1b[0m");
    std::printf("\n");
    if (g_interrupted.load()) {
      note("stopped");
      if (interactive_) terminal_.drop_unread();
    }
    std::fflush(stdout);
    last_context_ = static_cast<int>(prompt.size() + last_.ids.size());
    messages_.push_back({{"role", "user"}, {"content", user_text}});
    messages_.push_back({{"role", "assistant"}, {"content", reply}});
  }

  const ChatArgs& args_;
  // The tokenizer, template and history file first: a mistake there is told before the
  // weights load.
  Tokenizer tokenizer_;
  ChatTemplate template_;
  std::unique_ptr<HistoryFile> history_file_;
  Engine engine_;
  std::unique_ptr<Session> session_;  // after engine_: destroyed first
  int unanswered_ = 0;                 // messages refused (too long): a script sees exit code 1
  bool interactive_;
  TerminalLines terminal_;  // where interactive_ reads its lines
  std::string system_;
  bool has_system_;
  GenerateOptions options_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  GenerateResult last_;
  int last_context_ = 0;
  int32_t think_open_ = -1, think_close_ = -1;
};

int run_chat(const ChatArgs& args, const CLI::App& cmd) {
  if (args.think && args.no_think) throw Error(ErrorCategory::kInvalidArgument, "give --think or --no-think, not both");
  // Loaded first: a Ctrl-C while the weights load ends the program, as it would anywhere.
  ChatSession session(args, cmd);
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: Ctrl-C also ends a wait for piped input
  if (pipe2(g_wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw Error(ErrorCategory::kIo, std::string("chat: cannot make a pipe to notice Ctrl-C: ") + std::strerror(errno));
  }
  sigaction(SIGINT, &action, nullptr);
  // Stops, size changes and the ends below must not cut an answer's writes short: these
  // restart calls.
  using Handler = void (*)(int);
  for (const auto& [signal_number, handler] : {std::pair<int, Handler>{SIGTSTP, on_sigtstp},
                                               std::pair<int, Handler>{SIGCONT, on_sigcont},
                                               std::pair<int, Handler>{SIGWINCH, on_sigwinch},
                                               std::pair<int, Handler>{SIGTERM, on_ending_signal},
                                               std::pair<int, Handler>{SIGHUP, on_ending_signal},
                                               std::pair<int, Handler>{SIGQUIT, on_ending_signal}}) {
    struct sigaction restart {};
    // A signal ignored from the start (nohup's SIGHUP) stays ignored.
    if (handler == on_ending_signal && sigaction(signal_number, nullptr, &restart) == 0 &&
        restart.sa_handler == SIG_IGN) {
      continue;
    }
    restart = {};
    restart.sa_handler = handler;
    sigemptyset(&restart.sa_mask);
    restart.sa_flags = SA_RESTART;
    sigaction(signal_number, &restart, nullptr);
  }
  return session.run();
}

}  // namespace

void add_chat_command(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = root.add_subcommand("chat", "Interactive chat with the model's own chat template, streamed");
  cmd->footer(std::string(kHelp) + kExitCodes);
  add_model_options(cmd, args->model);
  add_tokenizer_option(cmd, args->model);
  add_sampling_options(cmd, args->sampling);
  cmd->add_option("--system", args->system, "system prompt (default: the template's own)")->check(utf8_text());
  cmd->add_option("--history", args->history,
                  "keep the messages typed at the terminal in FILE (created with mode 0600; the newest 1,000), "
                  "for Up/Down and Ctrl-R in later sessions. Default: none kept (what you type may be private)");
  cmd->add_option("--chat-template", args->chat_template,
                  "file with the chat template to use instead of the folder's: a Jinja template or a "
                  "tokenizer_config.json whose chat_template is taken")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--think", args->think, "Qwen3: think before answering (enable_thinking=true)");
  cmd->add_flag("--no-think", args->no_think, "Qwen3: answer without thinking (enable_thinking=false)");
  cmd->add_flag("--hide-thinking", args->hide_thinking, "do not print the <think> part (on a terminal it is shown dimmed)");
  cmd->add_option("-n,--max-new-tokens", args->max_new_tokens, "tokens per answer at most")
      ->check(more_than(0))
      ->capture_default_str();
  cmd->add_flag("-v,--verbose", args->verbose, "print the sampling settings in effect and the memory plan (stderr)");
  cmd->callback([args, cmd, &exit_code]() { exit_code = run_chat(*args, *cmd); });
}

}  // namespace qwenrt::cli
