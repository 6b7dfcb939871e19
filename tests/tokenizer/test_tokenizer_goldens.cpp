// The Qwen tokenizer against golden ids, texts and decodings made by Hugging Face
// `tokenizers` (scripts/gen_tokenizer_goldens.py) for tests/data/tokenizer/corpus.jsonl.
// More golden files (e.g. for a held-out corpus) can be added with
// QWENRT_TOKENIZER_GOLDENS=a.jsonl:b.jsonl.
#include <utf8proc.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer_test_util.h"

namespace qwenrt {
namespace {

using test::ids_of;
using test::nfc;
using test::qwen_tokenizer;

std::vector<std::filesystem::path> golden_files() {
  std::vector<std::filesystem::path> files{
      std::filesystem::path(QWENRT_TEST_DATA) / "tokenizer/goldens.jsonl",
      std::filesystem::path(QWENRT_TEST_DATA) / "tokenizer/goldens_long.jsonl"};
  if (const char* extra = std::getenv("QWENRT_TOKENIZER_GOLDENS")) {
    std::stringstream list(extra);
    std::string path;
    while (std::getline(list, path, ':')) {
      if (!path.empty()) files.emplace_back(path);
    }
  }
  return files;
}

struct Golden {
  std::string where;
  nlohmann::json row;
};

std::vector<Golden> goldens() {
  std::vector<Golden> out;
  for (const auto& file : golden_files()) {
    size_t line = 0;
    for (auto& row : test::read_jsonl(file)) {
      ++line;
      if (row.contains("meta")) continue;
      out.push_back({file.filename().string() + ":" + std::to_string(line), std::move(row)});
    }
  }
  return out;
}

std::string show(const std::string& text) {
  return nlohmann::json(text).dump();
}

TEST(TokenizerGoldens, CorpusIsLargeAndVaried) {
  const auto cases = goldens();
  size_t encode_cases = 0;
  std::set<std::string> tags;
  for (const auto& golden : cases) {
    if (golden.row.contains("text")) ++encode_cases;
    tags.insert(golden.row.value("tag", ""));
  }
  EXPECT_GE(encode_cases, 700u);
  for (const char* tag : {"chinese", "japanese", "korean", "arabic", "hindi", "cyrillic", "greek",
                          "code", "whitespace", "numbers", "emoji", "contractions", "special",
                          "fullwidth", "nfc", "random", "decode"}) {
    EXPECT_TRUE(tags.count(tag)) << "no golden case tagged " << tag;
  }
}

TEST(TokenizerGoldens, EncodeMatchesHuggingFace) {
  const Tokenizer& tokenizer = qwen_tokenizer();
  size_t checked = 0;
  size_t failed = 0;
  for (const auto& golden : goldens()) {
    if (!golden.row.contains("text")) continue;
    const std::string text = golden.row["text"];
    ++checked;
    const auto ids = tokenizer.encode(text);
    if (ids != ids_of(golden.row["ids"])) {
      ++failed;
      ADD_FAILURE() << golden.where << ": encode(" << show(text) << ")\n  got  "
                    << nlohmann::json(ids).dump() << "\n  want " << golden.row["ids"].dump();
    }
  }
  std::printf("encode: %zu of %zu golden cases match\n", checked - failed, checked);
}

TEST(TokenizerGoldens, EncodeSpecialAsTextMatchesHuggingFace) {
  const Tokenizer& tokenizer = qwen_tokenizer();
  size_t checked = 0;
  size_t failed = 0;
  for (const auto& golden : goldens()) {
    if (!golden.row.contains("text")) continue;
    const std::string text = golden.row["text"];
    ++checked;
    const auto ids = tokenizer.encode(text, /*allow_special=*/false);
    if (ids != ids_of(golden.row.value("ids_no_special", golden.row["ids"]))) {
      ++failed;
      ADD_FAILURE() << golden.where << ": encode(" << show(text) << ", no special)\n  got  "
                    << nlohmann::json(ids).dump() << "\n  want "
                    << golden.row.value("ids_no_special", golden.row["ids"]).dump();
    }
    for (int32_t id : ids) EXPECT_FALSE(tokenizer.is_special(id)) << golden.where;
  }
  std::printf("encode without special tokens: %zu of %zu golden cases match\n", checked - failed,
              checked);
}

TEST(TokenizerGoldens, DecodeMatchesHuggingFace) {
  const Tokenizer& tokenizer = qwen_tokenizer();
  size_t checked = 0;
  for (const auto& golden : goldens()) {
    const auto ids = ids_of(golden.row["ids"]);
    ++checked;
    EXPECT_EQ(tokenizer.decode(ids), golden.row["decoded"].get<std::string>()) << golden.where;
    EXPECT_EQ(tokenizer.decode(ids, /*skip_special=*/true),
              golden.row.value("decoded_skip", golden.row["decoded"]).get<std::string>())
        << golden.where;
  }
  std::printf("decode: %zu golden id sequences checked (with and without skip_special)\n", checked);
}

TEST(TokenizerGoldens, DecodeInvertsEncode) {
  const Tokenizer& tokenizer = qwen_tokenizer();
  size_t changed_by_nfc = 0;
  for (const auto& golden : goldens()) {
    if (!golden.row.contains("text")) continue;
    const std::string text = golden.row["text"];
    const std::string normalized = nfc(text);
    if (normalized != text) ++changed_by_nfc;
    // NFC applies between added tokens, so the text around them may differ from NFC of all;
    // compare with the reference's decode for those.
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), golden.row["decoded"].get<std::string>())
        << golden.where;
    if (text.find("<") == std::string::npos) {
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), normalized) << golden.where;
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, false)), normalized) << golden.where;
    }
  }
  EXPECT_GT(changed_by_nfc, 5u) << "the corpus should hold text that NFC changes";
}

TEST(TokenizerGoldens, StreamingDecodeEqualsBatchDecode) {
  const Tokenizer& tokenizer = qwen_tokenizer();
  for (const auto& golden : goldens()) {
    const auto ids = ids_of(golden.row["ids"]);
    for (bool skip : {false, true}) {
      StreamDecoder stream(tokenizer, skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = stream.push(id);
        // Every piece is valid UTF-8 on its own: no character is split between pushes.
        const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(piece.data());
        utf8proc_int32_t cp = 0;
        for (size_t at = 0; at < piece.size();) {
          const auto n =
              utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(piece.size() - at), &cp);
          ASSERT_GT(n, 0) << golden.where << ": broken UTF-8 in a streamed piece";
          at += static_cast<size_t>(n);
        }
        streamed += piece;
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, tokenizer.decode(ids, skip)) << golden.where;
    }
  }
}

TEST(TokenizerGoldens, StreamingHoldsBackSplitCharacters) {
  const Tokenizer& tokenizer = qwen_tokenizer();
  // "€" split over its three bytes, one token each.
  const auto byte_id = [&](uint8_t byte) {
    tok::ByteLevelAlphabet alphabet;
    return *tokenizer.token_to_id(alphabet.to_chars(std::string(1, static_cast<char>(byte))));
  };
  StreamDecoder stream(tokenizer);
  EXPECT_EQ(stream.push(byte_id(0xE2)), "");
  EXPECT_EQ(stream.push(byte_id(0x82)), "");
  EXPECT_EQ(stream.push(byte_id(0xAC)), "\xE2\x82\xAC");
  EXPECT_EQ(stream.push(byte_id(0xF0)), "");
  EXPECT_EQ(stream.push(byte_id(0x9F)), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // an unfinished character at the end
  EXPECT_EQ(stream.flush(), "");
}

TEST(TokenizerGoldens, QwenSpecialIds) {
  const Tokenizer& tokenizer = qwen_tokenizer();
  EXPECT_EQ(tokenizer.token_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tokenizer.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tokenizer.token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(tokenizer.token_to_id("<think>"), 151667);
  EXPECT_TRUE(tokenizer.is_special(151645));
  EXPECT_FALSE(tokenizer.is_special(151667));  // <think> is added but not special
  EXPECT_EQ(tokenizer.eos_id(), 151645);
  EXPECT_EQ(tokenizer.pad_id(), 151643);
  EXPECT_FALSE(tokenizer.bos_id().has_value());
  EXPECT_EQ(tokenizer.vocab_size(), 151669);
  EXPECT_EQ(tokenizer.id_to_token(9707), "Hello");
  EXPECT_EQ(tokenizer.encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  // Chat content must not be able to forge control tokens.
  const auto forged = tokenizer.encode("<|im_start|>system", false);
  EXPECT_EQ(std::count(forged.begin(), forged.end(), 151644), 0);
  EXPECT_EQ(tokenizer.decode(forged), "<|im_start|>system");
}

// The two BPE merge strategies (quadratic scan for short pieces, priority queue for long
// ones) must agree on every piece.
TEST(TokenizerGoldens, BpeStrategiesAgree) {
  std::ifstream file(test::qwen_tokenizer_dir() / "tokenizer.json");
  const auto root = nlohmann::json::parse(file);
  const auto& vocab = root["model"]["vocab"];
  tok::ByteLevelAlphabet alphabet;
  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b)
    byte_ids[static_cast<size_t>(b)] =
        vocab[alphabet.to_chars(std::string(1, static_cast<char>(b)))];
  std::vector<tok::MergeRule> rules;
  for (const auto& merge : root["model"]["merges"]) {
    const std::string left = merge[0];
    const std::string right = merge[1];
    rules.push_back({vocab[left], vocab[right], vocab[left + right]});
  }
  const tok::BpeModel scan(byte_ids, rules, nullptr, /*short_piece=*/1 << 30);
  const tok::BpeModel queue(byte_ids, rules, nullptr, /*short_piece=*/0);
  std::mt19937 rng(5);
  const std::vector<std::string> alphabet_pieces{"a", "b",  "e",  "n", "t",    "th", "ing",
                                                 " ", "你", "好", "é", "🙂", "1",  "!"};
  tok::BpeScratch scratch;
  for (int round = 0; round < 3000; ++round) {
    std::string word;
    const int parts = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < parts; ++i) word += alphabet_pieces[rng() % alphabet_pieces.size()];
    std::vector<int32_t> a;
    std::vector<int32_t> b;
    scan.encode_piece(word, a, scratch);
    queue.encode_piece(word, b, scratch);
    ASSERT_EQ(a, b) << show(word);
  }
}

}  // namespace
}  // namespace qwenrt

namespace qwenrt {
namespace {

// encode() is const and may be called from several threads at once (the word cache is
// shared); results must not depend on it.
TEST(TokenizerGoldens, ConcurrentEncodeGivesTheSameIds) {
  const Tokenizer& tokenizer = test::qwen_tokenizer();
  std::vector<Golden> cases;
  for (auto& golden : goldens()) {
    if (golden.row.contains("text")) cases.push_back(std::move(golden));
  }
  std::vector<std::thread> threads;
  std::atomic<size_t> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t round = 0; round < 3; ++round) {
        for (size_t i = static_cast<size_t>(t); i < cases.size(); i += 2) {
          if (tokenizer.encode(cases[i].row["text"].get<std::string>()) !=
              ids_of(cases[i].row["ids"]))
            ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0u);
}

}  // namespace
}  // namespace qwenrt
