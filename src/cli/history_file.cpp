#include "cli/history_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace qwenrt::cli {

std::string escape_history_line(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_history_line(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && (line[i + 1] == 'n' || line[i + 1] == '\\')) {
      out += line[++i] == 'n' ? '\n' : '\\';
    } else {
      out += line[i];  // a lone backslash (a file edited by hand) stays itself
    }
  }
  return out;
}

namespace {

// O_APPEND writes land whole at the end, also with two chats on one file.
int open_for_append(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

HistoryFile::HistoryFile(std::string path) : path_(std::move(path)) {
  if (std::filesystem::is_directory(path_)) {
    throw Error(ErrorCategory::kIo, "--history " + path_ + ": is a folder, not a file");
  }
  const int fd = open_for_append(path_);
  if (fd < 0) throw Error(ErrorCategory::kIo, "--history " + path_ + ": cannot write it: " + std::strerror(errno));
  ::close(fd);
}

std::vector<std::string> HistoryFile::load(size_t keep) {
  std::vector<std::string> lines;
  std::ifstream in(path_, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || tok::utf8_valid_prefix(line) != line.size()) continue;
    lines.push_back(std::move(line));
  }
  if (lines.size() > 2 * keep) {
    // Written again with the newest alone (to a new file moved over the old one, so that a
    // failure leaves the old one whole).
    lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(keep));
    const std::string temporary = path_ + ".new";
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool written = fd >= 0;
    for (size_t i = 0; written && i < lines.size(); ++i) written = write_all(fd, lines[i] + "\n");
    if (fd >= 0) written = ::close(fd) == 0 && written;
    if (!written || std::rename(temporary.c_str(), path_.c_str()) != 0) std::remove(temporary.c_str());
  } else if (lines.size() > keep) {
    lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(keep));
  }
  std::vector<std::string> messages;
  messages.reserve(lines.size());
  for (const std::string& kept : lines) messages.push_back(unescape_history_line(kept));
  return messages;
}

bool HistoryFile::append(std::string_view message) {
  if (failed_) return false;
  const int fd = open_for_append(path_);
  bool written = fd >= 0 && write_all(fd, escape_history_line(message) + "\n");
  if (fd >= 0) written = ::close(fd) == 0 && written;
  failed_ = !written;
  return written;
}

}  // namespace qwenrt::cli
