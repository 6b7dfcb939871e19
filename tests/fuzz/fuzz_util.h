// Shared pieces of the libFuzzer targets. A target gets raw bytes; those that read several
// files split them at kPartSeparator (a line of four @), so seeds are readable by hand and
// mutations can move bytes between parts. qwenrt::Error is the expected answer to bad input
// and is swallowed; anything else (another exception, a crash, a sanitizer report) is a find.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace qwenrt::fuzz {

inline constexpr std::string_view kPartSeparator = "\n@@@@\n";

// The first `count` parts of `data` (missing parts are empty; the last takes the rest).
inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t count) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  while (parts.size() + 1 < count) {
    const size_t at = rest.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.emplace_back(rest.substr(0, at));
    rest.remove_prefix(at + kPartSeparator.size());
  }
  parts.emplace_back(rest);
  parts.resize(count);
  return parts;
}

// A folder of this process's own for targets whose code under test reads files.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto path = std::filesystem::temp_directory_path() / ("qwenrt-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs `body`; a qwenrt::Error is a clean refusal. Returns whether `body` succeeded.
template <typename Body>
bool refused_cleanly_or_ran(Body&& body) {
  try {
    body();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Encodes `text` with and without special tokens and decodes the ids both ways; an id
// outside the vocabulary is a find (abort).
template <typename TokenizerT>
void encode_decode(const TokenizerT& tokenizer, const std::string& text) {
  for (bool allow_special : {true, false}) {
    refused_cleanly_or_ran([&] {
      const std::vector<int32_t> ids = tokenizer.encode(text, allow_special);
      for (int32_t id : ids) {
        if (id < 0 || id >= tokenizer.vocab_size()) std::abort();  // encode made up an id
      }
      tokenizer.decode(ids, false);
      tokenizer.decode(ids, true);
    });
  }
}

}  // namespace qwenrt::fuzz
