// tokenizer.json, tokenizer_config.json and a text, separated by the part separator: load,
// then encode the text with and without special tokens and decode the ids.
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwenrt;
  const auto parts = fuzz::split_parts(data, size, 3);
  const auto dir = fuzz::scratch_dir();
  fuzz::write_file(dir / "tokenizer.json", parts[0]);
  if (parts[1].empty()) {
    std::filesystem::remove(dir / "tokenizer_config.json");
  } else {
    fuzz::write_file(dir / "tokenizer_config.json", parts[1]);
  }
  fuzz::refused_cleanly_or_ran([&] {
    const Tokenizer tokenizer = Tokenizer::load(dir);
    fuzz::encode_decode(tokenizer, parts[2]);
  });
  return 0;
}
