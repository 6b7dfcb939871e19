// Read-only memory map of a whole file (weights are used in place by the CPU backend
// and streamed from the map to the device by GPU backends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace qwenrt {

class MappedFile {
 public:
  // Throws Error(kIo) naming the path when the file cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The most read_text_file reads by default: far past any config, tokenizer or template, and
// short of what would exhaust a machine (a file that is /dev/zero, or a huge sparse one).
constexpr size_t kMaxTextFileBytes = size_t{256} << 20;

// Reads a whole text file (a pipe too) of at most `max_bytes`; throws Error(kIo) naming the
// path where it cannot be read, is a device or is longer.
std::string read_text_file(const std::filesystem::path& path, size_t max_bytes = kMaxTextFileBytes);
// Throws Error(kIo) naming the path when it is a folder (which opens as a stream that reads
// nothing, as if it were an empty file).
void refuse_folder(const std::filesystem::path& path);

}  // namespace qwenrt
