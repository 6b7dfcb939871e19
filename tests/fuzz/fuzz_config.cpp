// config.json, then (after the part separator) generation_config.json when present.
#include "fuzz_util.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwenrt;
  const auto parts = fuzz::split_parts(data, size, 2);
  const std::string* generation = parts[1].empty() ? nullptr : &parts[1];
  fuzz::refused_cleanly_or_ran([&] { parse_model_config(parts[0], "config.json", generation); });
  return 0;
}
