// A safetensors file: the header is validated before use, so every tensor the reader accepts
// must lie inside the mapped file (ASan sees a read past it).
#include "fuzz_util.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwenrt;
  const auto path = fuzz::scratch_dir() / "model.safetensors";
  fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::refused_cleanly_or_ran([&] {
    SafetensorsFile file(path);
    uint64_t checksum = 0;
    for (const auto& [name, tensor] : file.tensors()) {
      if (tensor.byte_size > 0) checksum += tensor.data[0] + tensor.data[tensor.byte_size - 1];
      checksum += static_cast<uint64_t>(tensor.numel());
    }
    if (checksum == 0xFFFFFFFFFFFFFFFFull) std::abort();  // keeps the reads
  });
  return 0;
}
