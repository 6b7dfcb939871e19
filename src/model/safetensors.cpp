#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"

namespace qwenrt {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MB: anything larger is corrupt

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& message) {
  throw Error(ErrorCategory::kInvalidModel, path.string() + ": " + message);
}

// Element size of every safetensors dtype; 0 for unknown names.
size_t element_size(const std::string& dtype) {
  static const std::pair<const char*, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4},  {"F16", 2},  {"BF16", 2},    {"I64", 8},      {"I32", 4},
      {"I16", 2}, {"I8", 1},   {"U64", 8},  {"U32", 4},     {"U16", 2},      {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (dtype == name) return size;
  }
  return 0;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  const uint8_t* bytes = file_.data();
  const uint64_t file_size = file_.size();
  if (file_size < 8) {
    fail(path, "truncated: " + std::to_string(file_size) + " bytes, too short for a safetensors header");
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];  // little endian
  if (header_size > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_size) + " is absurd (limit 100 MB): corrupt file");
  }
  if (header_size > file_size - 8) {
    fail(path, "truncated: header length " + std::to_string(header_size) +
                   " exceeds the file size " + std::to_string(file_size));
  }
  const uint64_t data_begin = 8 + header_size;
  const uint64_t data_size = file_size - data_begin;
  std::string header(reinterpret_cast<const char*>(bytes + 8), header_size);

  JsonParseOptions strict;
  strict.reject_top_level_duplicate_keys = true;  // a second entry for one tensor name is a corrupt header
  json root = parse_json(header, path.string() + ": header", strict);
  if (!root.is_object()) fail(path, "header is not a JSON object");

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) fail(path, "__metadata__ is not an object");
      continue;
    }
    const json& entry = it.value();
    std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) fail(path, where + ": entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail(path, where + ": missing dtype");
    if (!entry.contains("shape") || !entry["shape"].is_array()) fail(path, where + ": missing shape");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      fail(path, where + ": data_offsets must be a list of two integers");
    }
    SafetensorsTensor tensor;
    tensor.name = name;
    tensor.dtype_name = entry["dtype"].get<std::string>();
    size_t elem = element_size(tensor.dtype_name);
    if (elem == 0) fail(path, where + ": unknown dtype '" + tensor.dtype_name + "'");
    if (tensor.dtype_name == "F32" || tensor.dtype_name == "F16" || tensor.dtype_name == "BF16") {
      tensor.dtype_supported = true;
      tensor.dtype = tensor.dtype_name == "F32"   ? DType::kF32
                     : tensor.dtype_name == "F16" ? DType::kF16
                                                  : DType::kBF16;
    }
    uint64_t expected = elem;
    for (const auto& dim : entry["shape"]) {
      if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
        fail(path, where + ": shape entries must be non-negative integers");
      }
      tensor.shape.push_back(dim.get<int64_t>());
      if (!checked_mul(expected, static_cast<uint64_t>(dim.get<int64_t>()), expected)) {
        fail(path, where + ": shape × dtype size overflows");
      }
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      fail(path, where + ": data_offsets must be non-negative integers");
    }
    uint64_t begin = offsets[0].get<uint64_t>();
    uint64_t end = offsets[1].get<uint64_t>();
    if (end < begin) {
      fail(path, where + ": data_offsets end " + std::to_string(end) + " < start " + std::to_string(begin));
    }
    if (end > data_size) {
      fail(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") outside the data area of " + std::to_string(data_size) +
                     " bytes (truncated file?)");
    }
    if (end - begin != expected) {
      fail(path, where + ": data_offsets span " + std::to_string(end - begin) +
                     " bytes but shape × dtype size is " + std::to_string(expected));
    }
    tensor.byte_size = expected;
    tensor.data = bytes + data_begin + begin;
    auto [inserted, ok] = tensors_.emplace(name, std::move(tensor));
    (void)ok;
    spans.push_back({begin, end, &inserted->first});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  // As the safetensors format has it (its own reader refuses anything else): the tensors
  // back to back from the data area's start to its end. Offsets that leave a gap point the
  // tensors at bytes their writer did not mean for them.
  uint64_t expected_begin = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i > 0 && spans[i].begin < spans[i - 1].end) {
      fail(path, "tensors '" + *spans[i - 1].name + "' and '" + *spans[i].name +
                     "' have overlapping data_offsets");
    }
    if (spans[i].begin != expected_begin) {
      fail(path, "tensor '" + *spans[i].name + "' starts at data offset " + std::to_string(spans[i].begin) +
                     ", not where " + (i == 0 ? std::string("the data area begins (0)") : "'" + *spans[i - 1].name +
                     "' ends (" + std::to_string(expected_begin) + ")") +
                     ": the header's offsets do not describe this file (safetensors stores tensors back to back)");
    }
    expected_begin = spans[i].end;
  }
  if (expected_begin != data_size) {
    fail(path, std::to_string(data_size - expected_begin) + " bytes after the last tensor's data: the header's "
                   "offsets do not describe this file (safetensors stores tensors back to back up to its end)");
  }
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

ModelFiles::ModelFiles(const std::filesystem::path& model_dir) {
  auto index_path = model_dir / "model.safetensors.index.json";
  auto single_path = model_dir / "model.safetensors";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  // As transformers: a whole model.safetensors first, where a folder holds both it and an index.
  if (std::filesystem::exists(single_path)) {
    listing_path_ = single_path;
    shard_names.push_back("model.safetensors");
  } else if (std::filesystem::exists(index_path)) {
    listing_path_ = index_path;
    std::string text = read_text_file(index_path);
    json index = parse_json(text, index_path.string());
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail(index_path, "expected an object with a 'weight_map' object");
    }
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it->is_string()) fail(index_path, "weight_map['" + it.key() + "'] is not a file name");
      std::string shard = it->get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        fail(index_path, "weight_map['" + it.key() + "'] names '" + shard +
                             "', which is not a file in the model folder");
      }
      weight_map[it.key()] = shard;
      if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end()) {
        shard_names.push_back(shard);
      }
    }
    if (shard_names.empty()) fail(index_path, "weight_map is empty");
    std::vector<std::string> missing;
    for (const auto& shard : shard_names) {
      if (!std::filesystem::exists(model_dir / shard)) missing.push_back(shard);
    }
    if (!missing.empty()) {
      std::string list;
      for (const auto& shard : missing) list += (list.empty() ? "'" : ", '") + shard + "'";
      throw Error(ErrorCategory::kInvalidModel,
                  index_path.string() + (missing.size() == 1 ? ": names shard " : ": names shards ") + list +
                      (missing.size() == 1 ? ", which is" : ", which are") +
                      " missing from the model folder (incomplete download?)");
    }
  } else {
    throw Error(ErrorCategory::kIo, model_dir.string() +
                                        ": no model.safetensors or model.safetensors.index.json "
                                        "(only safetensors checkpoints are supported)");
  }
  files_.reserve(shard_names.size());
  for (const auto& shard : shard_names) files_.emplace_back(model_dir / shard);
  for (size_t f = 0; f < files_.size(); ++f) {
    for (const auto& [name, tensor] : files_[f].tensors()) {
      auto [it, inserted] = index_.emplace(name, std::make_pair(f, &tensor));
      if (!inserted) {
        fail(files_[f].path(), "tensor '" + name + "' also appears in " +
                                   files_[it->second.first].path().filename().string());
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    auto it = index_.find(name);
    if (it == index_.end() || files_[it->second.first].path().filename() != shard) {
      fail(index_path, "weight_map says tensor '" + name + "' is in " + shard + ", but it is not there");
    }
  }
}

const SafetensorsTensor* ModelFiles::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.second;
}

std::string ModelFiles::file_of(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? listing_path_.string() : files_[it->second.first].path().string();
}

std::vector<std::string> ModelFiles::names() const {
  std::vector<std::string> result;
  for (const auto& entry : index_) result.push_back(entry.first);
  return result;
}

uint64_t ModelFiles::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, entry] : index_) total += entry.second->byte_size;
  return total;
}

}  // namespace qwenrt
