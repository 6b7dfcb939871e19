// Tokenizer parts without the Qwen files: UTF-8 handling, the regex rewrite, NFC, and a
// small hand-written tokenizer.json for merges, added-token flags and refused features.
// Expected ids are worked out by hand from HF's rules (byte b has id b in this vocabulary).
#include <utf8proc.h>

#include <random>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace qwenrt {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

constexpr const char* kQwenPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string lossy(std::string_view bytes) {
  std::string out;
  tok::append_utf8_lossy(bytes, out);
  return out;
}

TEST(TokenizerUtf8, LossyDecodingReplacesMaximalInvalidSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("plain"), "plain");
  EXPECT_EQ(lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(lossy("a\x80"
                  "b"),
            "a" + r + "b");
  EXPECT_EQ(lossy("\xE2\x82"), r);              // truncated: one replacement
  EXPECT_EQ(lossy("\xE0\x80"), r + r);          // overlong lead, then a stray byte
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);  // surrogate
  EXPECT_EQ(lossy("\xC0\xAF"), r + r);
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(lossy("\xF0\x9F\x98"
                  "x"),
            r + "x");
  EXPECT_EQ(lossy("\xFF"), r);
}

TEST(TokenizerUtf8, UnfinishedTail) {
  EXPECT_EQ(tok::utf8_unfinished_tail(""), 0u);
  EXPECT_EQ(tok::utf8_unfinished_tail("a"), 0u);
  EXPECT_EQ(tok::utf8_unfinished_tail("a\xE2"), 1u);
  EXPECT_EQ(tok::utf8_unfinished_tail("\xE2\x82"), 2u);
  EXPECT_EQ(tok::utf8_unfinished_tail("\xE2\x82\xAC"), 0u);
  EXPECT_EQ(tok::utf8_unfinished_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(tok::utf8_unfinished_tail("\xE0\x80"), 0u);  // can never become valid
  EXPECT_EQ(tok::utf8_unfinished_tail("\x80"), 0u);
  EXPECT_EQ(tok::utf8_unfinished_tail("\xE2\x82\xAC\x82"), 0u);
}

TEST(TokenizerUtf8, ValidPrefix) {
  EXPECT_EQ(tok::utf8_valid_prefix("hello, world, a long ascii run"), 30u);
  EXPECT_EQ(tok::utf8_valid_prefix("abc\xE2\x82"), 3u);
  EXPECT_EQ(tok::utf8_valid_prefix("0123456789\xC3\xA9\xFF"), 12u);
}

TEST(TokenizerRegex, RewritesOnigurumaClasses) {
  const std::string out = tok::onig_to_pcre2("\\s+(?!\\S)|[^\\s\\p{L}]|.", "test");
  EXPECT_EQ(out.find("\\s"), std::string::npos);
  EXPECT_EQ(out.find("\\S"), std::string::npos);
  EXPECT_NE(out.find("\\p{Zs}"), std::string::npos);
  EXPECT_NE(out.find("[^\\n]"), std::string::npos);
  for (const char* bad : {"\\bword", "^start", "end$", "[\\S]", "[[:alpha:]]", "(?m:.)"}) {
    try {
      tok::onig_to_pcre2(bad, "test");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kUnsupported) << bad;
    }
  }
}

TEST(TokenizerRegex, SplitIsolatesMatchesAndGaps) {
  const tok::RegexSplitter splitter(tok::onig_to_pcre2(kQwenPattern, "test"), false, "test");
  tok::RegexSplitter::MatchState state(splitter);
  std::vector<tok::Span> pieces;
  const std::string text = "Hello  world's 123\r\n\tx\xE1\xA0\x8Ey";  // U+180E is not \s
  splitter.split(text, state, pieces);
  std::vector<std::string> got;
  for (auto [begin, end] : pieces) got.push_back(text.substr(begin, end - begin));
  // U+180E (format character, not white space for Oniguruma) joins the letter after it.
  const std::vector<std::string> want{"Hello", " ",    " world", "'s",           " ", "1", "2",
                                      "3",     "\r\n", "\tx",    "\xE1\xA0\x8Ey"};
  EXPECT_EQ(got, want);
}

std::string nfc_reference(const std::string& text) {
  utf8proc_uint8_t* result = nullptr;
  const auto length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
  std::free(result);
  return out;
}

// The quick check and the stretch-by-stretch normalisation must equal NFC of the whole.
TEST(TokenizerNfc, EqualsFullNormalisation) {
  const tok::NfcNormalizer normalizer;
  std::mt19937 rng(3);
  const std::vector<std::pair<char32_t, char32_t>> ranges{
      {0x41, 0x7A},     {0xC0, 0x17F},    {0x300, 0x36F},   {0x1E00, 0x1EFF},   {0x1100, 0x11FF},
      {0xAC00, 0xAC40}, {0x0900, 0x097F}, {0x0B00, 0x0B7F}, {0x0F40, 0x0FBC},   {0x2126, 0x212B},
      {0xF900, 0xF920}, {0x3040, 0x30FF}, {0x20, 0x20},     {0x1D15E, 0x1D164}, {0x0590, 0x05FF}};
  for (int round = 0; round < 20000; ++round) {
    std::string text;
    const int length = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < length; ++i) {
      const auto [lo, hi] = ranges[rng() % ranges.size()];
      const char32_t cp = lo + static_cast<char32_t>(rng() % (hi - lo + 1));
      tok::append_utf8(cp, text);
    }
    std::string out;
    const std::string want = nfc_reference(text);
    const bool changed = normalizer.normalize(text, out);
    ASSERT_EQ(changed ? out : text, want) << json(text).dump();
    ASSERT_EQ(changed, want != text) << json(text).dump();
  }
}

// A tokenizer.json in Qwen's layout with a 256-byte vocabulary (byte b has id b) and a few
// merges: h+e, l+l, he+ll, hell+o.
json tiny_tokenizer() {
  tok::ByteLevelAlphabet alphabet;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet.to_chars(std::string(1, static_cast<char>(b)))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = json::array();
  root["normalizer"] = {{"type", "NFC"}};
  root["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers",
                            {{{"type", "Split"},
                              {"pattern", {{"Regex", kQwenPattern}}},
                              {"behavior", "Isolated"},
                              {"invert", false}},
                             {{"type", "ByteLevel"},
                              {"add_prefix_space", false},
                              {"trim_offsets", false},
                              {"use_regex", false}}}}};
  root["post_processor"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}};
  root["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}};
  root["model"] = {
      {"type", "BPE"},
      {"dropout", nullptr},
      {"unk_token", nullptr},
      {"continuing_subword_prefix", ""},
      {"end_of_word_suffix", ""},
      {"fuse_unk", false},
      {"byte_fallback", false},
      {"ignore_merges", false},
      {"vocab", vocab},
      {"merges", json::array({json::array({"h", "e"}), json::array({"l", "l"}),
                              json::array({"he", "ll"}), json::array({"hell", "o"})})}};
  return root;
}

json added(int id, const std::string& content, bool special, bool lstrip = false,
           bool rstrip = false, bool single_word = false, bool normalized = false) {
  return {{"id", id},
          {"content", content},
          {"special", special},
          {"lstrip", lstrip},
          {"rstrip", rstrip},
          {"single_word", single_word},
          {"normalized", normalized}};
}

Tokenizer load(const json& root) {
  static int counter = 0;
  const auto dir = std::filesystem::path(testing::TempDir()) /
                   ("qwenrt_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << root.dump();
  return Tokenizer::load(dir);
}

TEST(TokenizerTiny, MergesByRank) {
  const Tokenizer tokenizer = load(tiny_tokenizer());
  EXPECT_EQ(tokenizer.encode("hello"), (Ids{259}));
  EXPECT_EQ(tokenizer.encode("hell"), (Ids{258}));
  EXPECT_EQ(tokenizer.encode("hello hello"), (Ids{259, 32, 259}));  // " hello" = Ġ + hello
  EXPECT_EQ(tokenizer.encode("help"), (Ids{256, 'l', 'p'}));
  EXPECT_EQ(tokenizer.encode(""), Ids{});
  EXPECT_EQ(tokenizer.decode(Ids{259, 32, 259}), "hello hello");
  EXPECT_EQ(tokenizer.vocab_size(), 260);
}

TEST(TokenizerTiny, MergesAsStringsOrPairsAgree) {
  json root = tiny_tokenizer();
  root["model"]["merges"] = json::array({"h e", "l l", "he ll", "hell o"});
  const Tokenizer tokenizer = load(root);
  EXPECT_EQ(tokenizer.encode("hello hello help"), (Ids{259, 32, 259, 32, 256, 'l', 'p'}));
}

TEST(TokenizerTiny, AddedTokenFlags) {
  json root = tiny_tokenizer();
  root["added_tokens"] = json::array({added(260, "<mask>", true)});
  {
    const Tokenizer tokenizer = load(root);
    EXPECT_EQ(tokenizer.encode("a<mask>b"), (Ids{'a', 260, 'b'}));
    // As text: "a", "<mask", ">", "b".
    EXPECT_EQ(tokenizer.encode("a<mask>b", false), (Ids{'a', '<', 'm', 'a', 's', 'k', '>', 'b'}));
    EXPECT_EQ(tokenizer.encode("Hi <mask> there"),
              (Ids{'H', 'i', 32, 260, 32, 't', 256, 'r', 'e'}));
    EXPECT_EQ(tokenizer.decode(Ids{'a', 260, 'b'}), "a<mask>b");
    EXPECT_EQ(tokenizer.decode(Ids{'a', 260, 'b'}, true), "ab");
    EXPECT_TRUE(tokenizer.is_special(260));
  }
  root["added_tokens"] =
      json::array({added(260, "<mask>", true, /*lstrip=*/true, /*rstrip=*/true)});
  {
    const Tokenizer tokenizer = load(root);
    EXPECT_EQ(tokenizer.encode("Hi <mask> there"), (Ids{'H', 'i', 260, 't', 256, 'r', 'e'}));
    // lstrip takes any Unicode white space (here U+3000 and a tab).
    EXPECT_EQ(tokenizer.encode("Hi\t\xE3\x80\x80<mask>"), (Ids{'H', 'i', 260}));
  }
  root["added_tokens"] = json::array({added(260, "<mask>", true, /*lstrip=*/true)});
  EXPECT_EQ(load(root).encode("Hi <mask> there"), (Ids{'H', 'i', 260, 32, 't', 256, 'r', 'e'}));
  root["added_tokens"] =
      json::array({added(260, "<mask>", true, false, false, /*single_word=*/true)});
  {
    const Tokenizer tokenizer = load(root);
    EXPECT_EQ(tokenizer.encode("a <mask> b"), (Ids{'a', 32, 260, 32, 'b'}));
    // Inside a word it is not the token: "a", "<mask", ">", " b".
    EXPECT_EQ(tokenizer.encode("a<mask> b"), (Ids{'a', '<', 'm', 'a', 's', 'k', '>', 32, 'b'}));
  }
  // Not special: recognised even when special tokens are plain text.
  root["added_tokens"] = json::array({added(260, "<mask>", false)});
  EXPECT_EQ(load(root).encode("a<mask>b", false), (Ids{'a', 260, 'b'}));
}

TEST(TokenizerTiny, NormalizedAddedTokensMatchAfterNfc) {
  json root = tiny_tokenizer();
  // "é" precomposed, matched in normalised text, so the decomposed input finds it too.
  root["added_tokens"] =
      json::array({added(233, "\xC3\xA9", false, false, false, false, /*normalized=*/true)});
  const Tokenizer tokenizer = load(root);
  EXPECT_EQ(tokenizer.encode("cafe\xCC\x81"), (Ids{'c', 'a', 'f', 233}));
  EXPECT_EQ(tokenizer.encode("caf\xC3\xA9"), (Ids{'c', 'a', 'f', 233}));
  // "é" is also the vocabulary's text for byte 0xE9, so HF gives the added token that id;
  // decoding reads it as that byte: invalid UTF-8 alone, hence U+FFFD.
  EXPECT_EQ(tokenizer.decode(Ids{233}), "\xEF\xBF\xBD");
}

TEST(TokenizerTiny, AddedTokenOutsideTheByteAlphabetDecodesAsText) {
  json root = tiny_tokenizer();
  root["added_tokens"] = json::array({added(260, "two words", false)});
  const Tokenizer tokenizer = load(root);
  EXPECT_EQ(tokenizer.encode("x two words"), (Ids{'x', 32, 260}));
  EXPECT_EQ(tokenizer.decode(Ids{'x', 32, 260}), "x two words");
}

// HF numbers added tokens itself (in file order, after the vocabulary) and ignores the ids
// written in tokenizer.json.
TEST(TokenizerTiny, AddedTokenIdsAreAssignedLikeHf) {
  json root = tiny_tokenizer();
  root["added_tokens"] = json::array({added(999, "<a>", true), added(5, "<b>", false),
                                      added(7, "hello", false), added(3, "<c>", true)});
  const Tokenizer tokenizer = load(root);
  EXPECT_EQ(tokenizer.token_to_id("<a>"), 260);
  EXPECT_EQ(tokenizer.token_to_id("<b>"), 261);
  EXPECT_EQ(tokenizer.token_to_id("hello"), 259);  // already in the vocabulary
  EXPECT_EQ(tokenizer.token_to_id("<c>"), 262);
  EXPECT_EQ(tokenizer.vocab_size(), 263);
  EXPECT_EQ(tokenizer.encode("<a>x<c>"), (Ids{260, 'x', 262}));
}

TEST(TokenizerTiny, RejectsInvalidUtf8Text) {
  const Tokenizer tokenizer = load(tiny_tokenizer());
  try {
    tokenizer.encode("ok\xFF");
    ADD_FAILURE() << "accepted invalid UTF-8";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
  }
}

void expect_refused(const json& root, ErrorCategory category, const std::string& mentions) {
  try {
    load(root);
    ADD_FAILURE() << "loaded a tokenizer that should be refused (" << mentions << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), category) << e.what();
    EXPECT_NE(std::string(e.what()).find(mentions), std::string::npos) << e.what();
  }
}

TEST(TokenizerTiny, RefusesWhatItDoesNotReproduce) {
  json root = tiny_tokenizer();
  root["normalizer"] = {{"type", "NFKC"}};
  expect_refused(root, ErrorCategory::kUnsupported, "NFKC");
  root = tiny_tokenizer();
  root["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_refused(root, ErrorCategory::kUnsupported, "Isolated");
  root = tiny_tokenizer();
  root["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  expect_refused(root, ErrorCategory::kUnsupported, "add_prefix_space");
  root = tiny_tokenizer();
  root["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\bx";
  expect_refused(root, ErrorCategory::kUnsupported, "\\b");
  root = tiny_tokenizer();
  root["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_refused(root, ErrorCategory::kUnsupported, "Whitespace");
  root = tiny_tokenizer();
  root["decoder"] = {{"type", "WordPiece"}};
  expect_refused(root, ErrorCategory::kUnsupported, "decoder");
  root = tiny_tokenizer();
  root["post_processor"] = {{"type", "TemplateProcessing"}};
  expect_refused(root, ErrorCategory::kUnsupported, "TemplateProcessing");
  root = tiny_tokenizer();
  root["truncation"] = {{"max_length", 8}};
  expect_refused(root, ErrorCategory::kUnsupported, "truncation");
  root = tiny_tokenizer();
  root["model"]["type"] = "WordPiece";
  expect_refused(root, ErrorCategory::kUnsupported, "WordPiece");
  root = tiny_tokenizer();
  root["model"]["dropout"] = 0.1;
  expect_refused(root, ErrorCategory::kUnsupported, "dropout");
  root = tiny_tokenizer();
  root["model"]["vocab"].erase("a");
  expect_refused(root, ErrorCategory::kUnsupported, "byte 97");
  root = tiny_tokenizer();
  root["model"]["merges"] = json::array({"h e", "hx"});
  expect_refused(root, ErrorCategory::kInvalidModel, "model.merges[1]");
  root = tiny_tokenizer();
  root["model"]["merges"] = json::array({json::array({"h", "zz"})});
  expect_refused(root, ErrorCategory::kInvalidModel, "model.merges[0]");
  root = tiny_tokenizer();
  root["model"]["vocab"]["q"] = "x";
  expect_refused(root, ErrorCategory::kInvalidModel, "model.vocab");
  root = tiny_tokenizer();
  root["model"]["merges"] = json::array({json::array({"h", "e", "x"})});
  expect_refused(root, ErrorCategory::kInvalidModel, "model.merges[0]");
  root = tiny_tokenizer();
  root["model"]["merges"] = json::array({json::array({"h", "e"}), json::object({{"a", 1}})});
  expect_refused(root, ErrorCategory::kInvalidModel, "model.merges[1]");
  root = tiny_tokenizer();
  root["model"].erase("merges");
  expect_refused(root, ErrorCategory::kInvalidModel, "model.merges");
  root = tiny_tokenizer();
  root["model"]["vocab"]["q"] = -4;
  expect_refused(root, ErrorCategory::kInvalidModel, "model.vocab");
  root = tiny_tokenizer();
  root["added_tokens"] = json::array({json::object({{"content", "<x>"}})});
  expect_refused(root, ErrorCategory::kInvalidModel, "added_tokens[0].id");
}

TEST(TokenizerTiny, FileErrors) {
  const auto dir = std::filesystem::path(testing::TempDir()) /
                   ("qwenrt_tok_files_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  try {
    Tokenizer::load(dir);
    ADD_FAILURE() << "loaded a folder without tokenizer.json";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kIo);
    EXPECT_NE(std::string(e.what()).find("is not a model folder: it has no config.json and no tokenizer.json"),
              std::string::npos)
        << e.what();
  }
  // With a config.json it is a model folder that lacks its tokenizer.
  std::ofstream(dir / "config.json") << "{}";
  try {
    Tokenizer::load(dir);
    ADD_FAILURE() << "loaded a folder without tokenizer.json";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kIo);
    EXPECT_NE(std::string(e.what()).find((dir / "tokenizer.json").string() + ": no such file"), std::string::npos)
        << e.what();
  }
  std::ofstream(dir / "tokenizer.json") << "{\"model\": ";
  try {
    Tokenizer::load(dir / "tokenizer.json");
    ADD_FAILURE() << "loaded truncated JSON";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidModel);
  }
}

TEST(TokenizerTiny, ConfigNamesSpecialTokens) {
  json root = tiny_tokenizer();
  root["added_tokens"] = json::array({added(260, "<|end|>", true)});
  const auto dir = std::filesystem::path(testing::TempDir()) /
                   ("qwenrt_tok_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << root.dump();
  json config = {{"eos_token", "<|end|>"},
                 {"pad_token", {{"content", "<|end|>"}}},
                 {"bos_token", nullptr},
                 {"added_tokens_decoder", {{"301", {{"content", "<extra>"}, {"special", true}}}}}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  const Tokenizer tokenizer = Tokenizer::load(dir);
  EXPECT_EQ(tokenizer.eos_id(), 260);
  EXPECT_EQ(tokenizer.pad_id(), 260);
  EXPECT_FALSE(tokenizer.bos_id().has_value());
  // Added tokens only tokenizer_config.json declares are added, as transformers does (the
  // key is not used as the id: HF numbers them).
  EXPECT_EQ(tokenizer.encode("a<extra>"), (Ids{'a', 261}));
  EXPECT_TRUE(tokenizer.is_special(261));
}

}  // namespace
}  // namespace qwenrt
