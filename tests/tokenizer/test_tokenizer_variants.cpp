// Small tokenizer.json variants (scripts/gen_tokenizer_variants.py) against Hugging Face
// `tokenizers` goldens: added-token flags and numbering, the GPT-2 regex of
// ByteLevel(use_regex=true), merges as strings, ignore_merges, a String split pattern.
#include <algorithm>

#include "tokenizer_test_util.h"

namespace qwenrt {
namespace {

using test::ids_of;

std::vector<std::filesystem::path> variant_dirs() {
  std::vector<std::filesystem::path> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(QWENRT_TEST_DATA) / "tokenizer/variants")) {
    if (entry.is_directory()) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

TEST(TokenizerVariants, MatchHuggingFace) {
  const auto dirs = variant_dirs();
  ASSERT_GE(dirs.size(), 4u);
  size_t checked = 0;
  for (const auto& dir : dirs) {
    const Tokenizer tokenizer = Tokenizer::load(dir / "tokenizer.json");
    const std::string name = dir.filename().string();
    for (const auto& row : test::read_jsonl(dir / "goldens.jsonl")) {
      if (row.contains("meta")) continue;
      const auto ids = ids_of(row["ids"]);
      if (row.contains("text")) {
        const std::string text = row["text"];
        const std::string where = name + ": " + nlohmann::json(text).dump();
        EXPECT_EQ(tokenizer.encode(text), ids) << where;
        EXPECT_EQ(tokenizer.encode(text, false), ids_of(row.value("ids_no_special", row["ids"])))
            << where;
        ++checked;
      }
      const std::string where = name + ": " + row["ids"].dump();
      EXPECT_EQ(tokenizer.decode(ids), row["decoded"].get<std::string>()) << where;
      EXPECT_EQ(tokenizer.decode(ids, true),
                row.value("decoded_skip", row["decoded"]).get<std::string>())
          << where;
      StreamDecoder stream(tokenizer);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      EXPECT_EQ(streamed + stream.flush(), row["decoded"].get<std::string>()) << where;
    }
  }
  std::printf("variants: %zu texts checked over %zu tokenizer.json variants\n", checked,
              dirs.size());
}

}  // namespace
}  // namespace qwenrt
