#include "core/mapped_file.h"

#include <filesystem>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace qwenrt {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(ErrorCategory::kIo, path.string() + ": cannot open: " + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw Error(ErrorCategory::kIo, path.string() + ": not a regular file");
  }
  size_ = static_cast<size_t>(info.st_size);
  if (size_ > 0) {
    void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error(ErrorCategory::kIo, path.string() + ": cannot map: " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(mapping);
  }
  ::close(fd);
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void refuse_folder(const std::filesystem::path& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw Error(ErrorCategory::kIo, path.string() + ": is a folder, not a file");
  }
}

std::string read_text_file(const std::filesystem::path& path, size_t max_bytes) {
  refuse_folder(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(ErrorCategory::kIo, path.string() + ": cannot open: " + std::strerror(errno));
  }
  const auto fail = [&](const std::string& why) {
    ::close(fd);
    throw Error(ErrorCategory::kIo, path.string() + ": " + why);
  };
  const auto too_long = [&] {
    fail("longer than " +
         (max_bytes >= (size_t{1} << 20) ? std::to_string(max_bytes >> 20) + " MiB" : std::to_string(max_bytes) + " bytes") +
         ": not a file this reads");
  };
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail(std::string("cannot read: ") + std::strerror(errno));
  // A terminal is read to its end of input (/dev/stdin typed into); another device is no file.
  if ((S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode)) && ::isatty(fd) == 0) fail("a device, not a file");
  if (S_ISREG(info.st_mode) && static_cast<uint64_t>(info.st_size) > max_bytes) too_long();
  std::string text;
  if (S_ISREG(info.st_mode)) text.reserve(static_cast<size_t>(info.st_size));
  char chunk[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(std::string("read failed: ") + std::strerror(errno));
    if (got == 0) break;
    if (text.size() + static_cast<size_t>(got) > max_bytes) too_long();
    text.append(chunk, static_cast<size_t>(got));
  }
  ::close(fd);
  return text;
}

}  // namespace qwenrt
