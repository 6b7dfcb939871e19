// The original Qwen's tokenizer (qwen.tiktoken) against ids written by tiktoken
// (scripts/gen_qwen1_tokenizer_goldens.py / qwen1_tiktoken_goldens.cjs; the goldens' first
// line names the encoder) for the texts of that script's generator, and its bad files.
#include "../unit/test_util.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer_test_util.h"

namespace qwenrt {
namespace {

namespace fs = std::filesystem;

fs::path v1_tokenizer_dir() {
  return fs::path(QWENRT_TEST_DATA) / "qwen1" / "tokenizer";
}

const Tokenizer& v1_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(v1_tokenizer_dir());
  return tokenizer;
}

TEST(QwenV1Tokenizer, VocabularyAndSpecials) {
  const Tokenizer& tokenizer = v1_tokenizer();
  EXPECT_EQ(tokenizer.vocab_size(), 151851);
  EXPECT_EQ(tokenizer.token_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tokenizer.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tokenizer.token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(tokenizer.token_to_id("<|extra_0|>"), 151646);
  EXPECT_EQ(tokenizer.token_to_id("<|extra_204|>"), 151850);
  EXPECT_TRUE(tokenizer.is_special(151645));
  EXPECT_FALSE(tokenizer.is_special(151642));
  EXPECT_EQ(tokenizer.eos_id(), 151643);
}

TEST(QwenV1Tokenizer, IdsIdenticalToTiktoken) {
  const Tokenizer& tokenizer = v1_tokenizer();
  const auto rows = test::read_jsonl(v1_tokenizer_dir() / "goldens.jsonl");
  ASSERT_TRUE(rows.at(0).contains("meta"));
  size_t cases = 0, with_special = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const std::string text = row["text"].get<std::string>();
    const auto ids = test::ids_of(row["ids"]);
    const auto plain = test::ids_of(row["ids_no_special"]);
    EXPECT_EQ(tokenizer.encode(text), ids) << "line " << i + 1 << ": " << row.dump();
    EXPECT_EQ(tokenizer.encode(text, /*allow_special=*/false), plain) << "line " << i + 1;
    // tiktoken's decode returns the (normalised) bytes; streaming gives the same text.
    EXPECT_EQ(tokenizer.decode(ids), test::nfc(text)) << "line " << i + 1;
    StreamDecoder stream(tokenizer);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, test::nfc(text)) << "line " << i + 1;
    ++cases;
    if (ids != plain) ++with_special;
  }
  EXPECT_GE(cases, 300u);
  EXPECT_GE(with_special, 10u);  // the corpus does put specials in text
}

// NFC over the whole text: a combining mark after a special's '>' composes with it, so the
// special is not recognised (the HF pipeline would match it first).
TEST(QwenV1Tokenizer, NfcBeforeSpecials) {
  const Tokenizer& tokenizer = v1_tokenizer();
  const auto ids = tokenizer.encode("<|im_end|>\xCC\xB8");  // U+0338
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151645), 0);
  EXPECT_EQ(tokenizer.encode("<|im_end|>"), std::vector<int32_t>{151645});
}

// A v1 folder (tokenizer_config.json naming QWenTokenizer) with a broken or missing
// qwen.tiktoken: one-line errors naming the file.
void expect_tiktoken_error(const std::string* contents, const std::string& needle) {
  test::TempDir dir;
  fs::copy_file(v1_tokenizer_dir() / "tokenizer_config.json", dir.path() / "tokenizer_config.json");
  if (contents != nullptr) test::write_file(dir.path() / "qwen.tiktoken", *contents);
  try {
    Tokenizer::load(dir.path());
    ADD_FAILURE() << "loaded a qwen.tiktoken with " << needle;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find((dir.path() / "qwen.tiktoken").string()), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// Qwen's own chat code (qwen_generation_utils.make_context) encodes each turn's role, its
// "\n" and its content one by one: a content that starts with a line break keeps its own
// 198 rather than merging with the role's into 271 ("\n\n").
TEST(QwenV1Tokenizer, ChatTurnsAreEncodedAsQwensMakeContextDoes) {
  const Tokenizer& tokenizer = v1_tokenizer();
  const ChatTemplate chat_template = ChatTemplate::load(v1_tokenizer_dir());
  const auto encode = [&](const char* text) { return tokenizer.encode(text, false); };
  for (const char* content : {"\nhello", " \nx", "hello", "\n\n a\n"}) {
    const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", content}}};
    std::vector<int32_t> expected = {151644};
    for (const auto& piece : {encode("system"), std::vector<int32_t>{198}, encode("You are a helpful assistant."),
                              std::vector<int32_t>{151645, 198, 151644}, encode("user"), std::vector<int32_t>{198},
                              encode(content), std::vector<int32_t>{151645, 198, 151644}, encode("assistant"),
                              std::vector<int32_t>{198}}) {
      expected.insert(expected.end(), piece.begin(), piece.end());
    }
    EXPECT_EQ(encode_chat_prompt(tokenizer, chat_template, messages, nullptr, true, nlohmann::ordered_json::object()),
              expected)
        << content;
  }
  // The role's "\n" and the content's own one stay apart: 872 198 198 14990.
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "\nhello"}}};
  const std::vector<int32_t> ids =
      encode_chat_prompt(tokenizer, chat_template, messages, nullptr, false, nlohmann::ordered_json::object());
  const std::vector<int32_t> turn = {151644, 872, 198, 198, 14990, 151645};
  EXPECT_NE(std::search(ids.begin(), ids.end(), turn.begin(), turn.end()), ids.end());
}

TEST(QwenV1Tokenizer, BadFiles) {
  expect_tiktoken_error(nullptr, "no such file");
  // Every single byte (ranks 0..255), then the damage.
  std::string bytes;
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto b64 = [&](const std::string& raw) {
    std::string out;
    size_t i = 0;
    for (; i + 3 <= raw.size(); i += 3) {
      const uint32_t v = (uint8_t(raw[i]) << 16) | (uint8_t(raw[i + 1]) << 8) | uint8_t(raw[i + 2]);
      for (int s = 18; s >= 0; s -= 6) out += alphabet[(v >> s) & 63];
    }
    if (raw.size() - i == 1) {
      const uint32_t v = uint8_t(raw[i]) << 16;
      out += std::string{alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63]} + "==";
    } else if (raw.size() - i == 2) {
      const uint32_t v = (uint8_t(raw[i]) << 16) | (uint8_t(raw[i + 1]) << 8);
      out +=
          std::string{alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63], alphabet[(v >> 6) & 63]} +
          "=";
    }
    return out;
  };
  std::string good;
  for (int b = 0; b < 256; ++b)
    good += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  const std::string malformed = good + "aGk=256\n";
  expect_tiktoken_error(&malformed, "line 257");
  const std::string bad_base64 = good + "a$k= 256\n";
  expect_tiktoken_error(&bad_base64, "base64");
  const std::string gap = good + b64("hi") + " 257\n";
  expect_tiktoken_error(&gap, "no token has rank 256");
  const std::string duplicate_rank = good + b64("hi") + " 255\n";
  expect_tiktoken_error(&duplicate_rank, "rank 255 appears twice");
  std::string no_byte;
  for (int b = 1; b < 256; ++b)
    no_byte += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b - 1) + "\n";
  expect_tiktoken_error(&no_byte, "single byte 0");
  // The well-formed file loads: specials follow the ranks.
  test::TempDir dir;
  test::write_file(dir.path() / "qwen.tiktoken", good + b64("hi") + " 256\n");
  const Tokenizer tiny = Tokenizer::load(dir.path() / "qwen.tiktoken");
  EXPECT_EQ(tiny.token_to_id("<|endoftext|>"), 257);
  EXPECT_EQ(tiny.encode("hi<|im_end|>h"), (std::vector<int32_t>{256, 259, 'h'}));
}

}  // namespace
}  // namespace qwenrt
