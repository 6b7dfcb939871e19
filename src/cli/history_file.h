// chat --history FILE: the lines typed in earlier sessions, kept in a file of the user's
// (mode 0600: what one types to a model may be private). One line of the file a message,
// its line ends written as \n and its backslashes as \\ (a message may hold several lines).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qwenrt::cli {

std::string escape_history_line(std::string_view message);
std::string unescape_history_line(std::string_view line);

class HistoryFile {
 public:
  // Opens (creating) `path` for appending; throws Error (kIo) when that fails, naming why.
  explicit HistoryFile(std::string path);

  // The messages the file holds, oldest first, at most `keep` of the newest (lines that are
  // not UTF-8 passed over). A file past twice that is written again with those alone.
  std::vector<std::string> load(size_t keep);

  // Adds a message at the end. False (and nothing more is written) after a write failed:
  // the chat goes on, told once.
  bool append(std::string_view message);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool failed_ = false;
};

}  // namespace qwenrt::cli
