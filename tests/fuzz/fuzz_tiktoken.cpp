// The original Qwen's qwen.tiktoken (base64 token, rank per line) and a text, separated by
// the part separator: load, then encode the text with and without special tokens and decode
// the ids. The folder has no tokenizer.json, so the tiktoken reader is the one that runs.
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwenrt;
  const auto parts = fuzz::split_parts(data, size, 2);
  const auto dir = fuzz::scratch_dir() / "tiktoken";
  std::filesystem::create_directories(dir);
  fuzz::write_file(dir / "qwen.tiktoken", parts[0]);
  fuzz::refused_cleanly_or_ran([&] {
    const Tokenizer tokenizer = Tokenizer::load(dir);
    fuzz::encode_decode(tokenizer, parts[1]);
  });
  return 0;
}
