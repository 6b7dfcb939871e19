// A validated, memory-mapped safetensors reader. Everything in the header is checked
// before any tensor is touched (QWEN.md §Loader): sizes, JSON, duplicate names, dtypes,
// offsets inside the data area, no overlaps, byte sizes matching shape × dtype.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace qwenrt {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;       // as written in the file ("BF16", "F32", ...)
  bool dtype_supported = false; // F32, F16 or BF16: usable as weights
  DType dtype = DType::kF32;    // valid when dtype_supported
  std::vector<int64_t> shape;
  uint64_t byte_size = 0;
  const uint8_t* data = nullptr;  // into the mapped file

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws Error(kInvalidModel / kIo) naming the file.
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_.path(); }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;

 private:
  MappedFile file_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// The tensors of a model folder: model.safetensors, or the shards that
// model.safetensors.index.json lists. Names are unique across shards.
class ModelFiles {
 public:
  explicit ModelFiles(const std::filesystem::path& model_dir);

  // Null when absent.
  const SafetensorsTensor* find(const std::string& name) const;
  // The file holding `name`, for error messages; for a name that no file holds, the file
  // that lists the tensors (model.safetensors or the index).
  std::string file_of(const std::string& name) const;
  size_t tensor_count() const { return index_.size(); }
  std::vector<std::string> names() const;
  uint64_t total_bytes() const;

 private:
  std::filesystem::path listing_path_;  // model.safetensors or model.safetensors.index.json
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::pair<size_t, const SafetensorsTensor*>> index_;
};

}  // namespace qwenrt
