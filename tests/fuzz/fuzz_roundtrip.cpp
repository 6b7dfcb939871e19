// Encode then decode with Qwen's tokenizer must give back the text, for any valid UTF-8 in
// NFC (the tokenizer normalises to NFC, so other text comes back normalised). Added tokens
// that are not special (<think>, <tool_call>) are matched and decode to themselves; special
// tokens are encoded as plain text (allow_special = false), as chat messages are.
#include <cstdlib>
#include <utf8proc.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {

// Valid UTF-8 from any bytes: invalid sequences become U+FFFD, then NFC.
std::string nfc_utf8(const uint8_t* data, size_t size) {
  std::string valid;
  for (size_t i = 0; i < size;) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(data + i, static_cast<utf8proc_ssize_t>(size - i), &cp);
    uint8_t buffer[4];
    if (n < 1) {
      valid += "\xEF\xBF\xBD";
      i += 1;
      continue;
    }
    valid.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(utf8proc_encode_char(cp, buffer)));
    i += static_cast<size_t>(n);
  }
  utf8proc_uint8_t* normalized = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                                          static_cast<utf8proc_ssize_t>(valid.size()), &normalized,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) std::abort();  // the input was made valid above
  std::string out(reinterpret_cast<const char*>(normalized), static_cast<size_t>(n));
  std::free(normalized);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwenrt;
  static const Tokenizer tokenizer = [] {
    const char* dir = std::getenv("QWENRT_FUZZ_TOKENIZER_DIR");
    return Tokenizer::load(dir != nullptr ? dir : QWENRT_FUZZ_TOKENIZER_DIR);
  }();
  const std::string text = nfc_utf8(data, size);
  const std::vector<int32_t> ids = tokenizer.encode(text, /*allow_special=*/false);
  const std::string back = tokenizer.decode(ids, false);
  if (back != text) {
    std::fprintf(stderr, "round trip differs: %zu bytes in, %zu bytes out\n", text.size(), back.size());
    std::abort();
  }
  return 0;
}
