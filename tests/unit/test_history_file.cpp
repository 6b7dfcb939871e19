// chat --history: messages of several lines and backslashes survive the file; the newest
// are kept; a file far past its bound is written again shorter; the file is the owner's.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/history_file.h"
#include "core/error.h"

namespace qwenrt::cli {
namespace {

namespace fs = std::filesystem;

fs::path temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("qwenrt_history_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::remove(dir / name);
  return dir / name;
}

TEST(HistoryFile, EscapesRoundTrip) {
  for (const std::string message : {"plain", "two\nlines", "back\\slash", "\\n literally", "end\\", "\n\n\\\\"}) {
    const std::string line = escape_history_line(message);
    EXPECT_EQ(line.find('\n'), std::string::npos) << message;
    EXPECT_EQ(unescape_history_line(line), message) << line;
  }
  EXPECT_EQ(unescape_history_line("a\\qb\\"), "a\\qb\\");  // a lone backslash stays
}

TEST(HistoryFile, KeepsTheNewestAndWritesALongFileAgain) {
  const fs::path path = temp_file("h.txt");
  HistoryFile file(path.string());
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(file.append("m" + std::to_string(i) + (i == 3 ? "\nsecond" : "")));
  EXPECT_EQ(file.load(10), (std::vector<std::string>{"m0", "m1", "m2", "m3\nsecond", "m4", "m5", "m6"}));
  EXPECT_EQ(file.load(5), (std::vector<std::string>{"m2", "m3\nsecond", "m4", "m5", "m6"}));
  // Past twice the bound, the file itself keeps the newest alone.
  EXPECT_EQ(file.load(3), (std::vector<std::string>{"m4", "m5", "m6"}));
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "m4\nm5\nm6\n");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  // Lines that are not UTF-8 (a file edited elsewhere) are passed over.
  std::ofstream(path, std::ios::app) << "bad \xff line\n\nm7\n";
  EXPECT_EQ(file.load(10), (std::vector<std::string>{"m4", "m5", "m6", "m7"}));
  fs::remove_all(path.parent_path());
}

TEST(HistoryFile, AFolderOrAnUnwritablePlaceIsToldAtOnce) {
  const fs::path path = temp_file("h.txt");
  EXPECT_THROW(HistoryFile(path.parent_path().string()), Error);
  EXPECT_THROW(HistoryFile((path.parent_path() / "no" / "such" / "h.txt").string()), Error);
  fs::remove_all(path.parent_path());
}

}  // namespace
}  // namespace qwenrt::cli
