// `qwenrt tokenize`: encode text to token ids, decode ids to text, or measure encode speed,
// with the tokenizer of a model folder (or a tokenizer.json file).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "core/stats.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::cli {
namespace {

struct TokenizeOptions {
  std::string model_dir;
  std::string tokenizer_file;
  std::string text;
  std::string jsonl;
  std::string decode;
  std::string bench;
  bool no_special = false;
  bool skip_special = false;
  int passes = 5;
  // Which input was given (an empty value is given too: --decode "" decodes no ids).
  enum class Mode { kEncode, kDecode, kJsonl, kBench } mode = Mode::kEncode;
};

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out.push_back(',');
    out.append(std::to_string(ids[i]));
  }
  out.push_back(']');
  return out;
}

// "1 2 3", "1,2,3" or "[1, 2, 3]".
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string cleaned = text;
  for (char& c : cleaned) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::istringstream stream(cleaned);
  std::string word;
  while (stream >> word) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || value < 0 || value > INT32_MAX) {
      throw Error(ErrorCategory::kInvalidArgument, "--decode: \"" + word + "\" is not a token id");
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

void encode_jsonl(const Tokenizer& tokenizer, const TokenizeOptions& options) {
  std::ifstream file;
  std::istream* input = &std::cin;
  if (options.jsonl != "-") {
    refuse_folder(options.jsonl);
    file.open(options.jsonl, std::ios::binary);
    if (!file) throw Error(ErrorCategory::kIo, options.jsonl + ": cannot open");
    input = &file;
  }
  std::string line;
  std::string output;
  size_t number = 1;
  for (; std::getline(*input, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = options.jsonl + ":" + std::to_string(number);
    JsonParseOptions parse_options;
    parse_options.category = ErrorCategory::kInvalidArgument;
    const nlohmann::json row = parse_json(line, where, parse_options);
    if (!row.is_object() || !row.contains("text") || !row["text"].is_string()) {
      throw Error(ErrorCategory::kInvalidArgument, where + ": expected {\"text\": \"...\"}");
    }
    output = ids_json(tokenizer.encode(row["text"].get<std::string>(), !options.no_special));
    output.push_back('\n');
    std::fwrite(output.data(), 1, output.size(), stdout);
  }
  // A read that failed (not the end of the input) loses lines: said, not taken for the end.
  if (input->bad()) throw Error(ErrorCategory::kIo, options.jsonl + ": read failed at line " + std::to_string(number));
}

void bench(const Tokenizer& tokenizer, const TokenizeOptions& options) {
  const std::string text = read_text_file(options.bench, size_t{4} << 30);
  using Clock = std::chrono::steady_clock;
  auto timed_encode = [&](size_t& tokens) {
    const auto start = Clock::now();
    tokens = tokenizer.encode(text, !options.no_special).size();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  size_t tokens = 0;
  const double cold = timed_encode(tokens);  // also the warm-up: fills the word cache
  std::vector<double> seconds;
  for (int pass = 0; pass < options.passes; ++pass) seconds.push_back(timed_encode(tokens));
  const double median = qwenrt::median(seconds);
  const double megabytes = static_cast<double>(text.size()) / 1e6;
  std::printf("input: %s, %.2f MB, %zu tokens (%.2f bytes/token)\n", options.bench.c_str(),
              megabytes, tokens,
              static_cast<double>(text.size()) / static_cast<double>(tokens ? tokens : 1));
  std::printf(
      "encode: %.1f MB/s, %.2f M tokens/s (median of %d passes after a warm-up, 1 thread)\n",
      megabytes / median, static_cast<double>(tokens) / median / 1e6, options.passes);
  std::printf("encode, first pass (empty word cache): %.1f MB/s\n", megabytes / cold);
}

void run_tokenize(const TokenizeOptions& options) {
  const Tokenizer tokenizer =
      Tokenizer::load(options.model_dir.empty() ? options.tokenizer_file : options.model_dir);
  using Mode = TokenizeOptions::Mode;
  if (options.mode == Mode::kDecode) {
    const std::vector<int32_t> ids = parse_ids(options.decode);
    // As Hugging Face's tokenizers decode them, ids that name no token add no text: said.
    std::string unknown;
    int unknown_count = 0;
    for (const int32_t id : ids) {
      if (tokenizer.id_to_token(id)) continue;
      if (++unknown_count <= 8) unknown += (unknown.empty() ? "" : ", ") + std::to_string(id);
    }
    if (unknown_count > 0) {
      std::fprintf(stderr, "qwenrt: note: %d id%s name%s no token of this tokenizer (%s%s; ids run from 0 to %d): left out\n",
                   unknown_count, unknown_count == 1 ? "" : "s", unknown_count == 1 ? "s" : "", unknown.c_str(),
                   unknown_count > 8 ? ", ..." : "", tokenizer.vocab_size() - 1);
    }
    std::string text = tokenizer.decode(ids, options.skip_special);
    text.push_back('\n');
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else if (options.mode == Mode::kJsonl) {
    encode_jsonl(tokenizer, options);
  } else if (options.mode == Mode::kBench) {
    bench(tokenizer, options);
  } else {
    const std::string out = ids_json(tokenizer.encode(options.text, !options.no_special)) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
}

}  // namespace

void add_tokenize_command(CLI::App& root, int& exit_code) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = root.add_subcommand(
      "tokenize",
      "Encode text to token ids, decode ids to text, or measure encode speed, with the "
      "tokenizer of a model folder. Output: one JSON array of ids per input.");
  cmd->footer(
      "Examples:\n"
      "  qwenrt tokenize -m Qwen2.5-7B-Instruct 'Hello world'        -> [9707,1879]\n"
      "  qwenrt tokenize -m DIR --jsonl prompts.jsonl              one array per {\"text\"} line\n"
      "  qwenrt tokenize -m DIR --decode '9707 1879'               -> Hello world\n"
      "  qwenrt tokenize -m DIR --bench corpus.txt                 MB/s and tokens/s\n"
      "Exit codes: 0 success; 1 a tokenizer or input file that cannot be read (a --jsonl or\n"
      "--bench file that does not exist included); 2 bad arguments (a -m or --tokenizer path that\n"
      "does not exist included, and a --jsonl line that is not {\"text\": ...}); 130 interrupted");

  CLI::Option_group* source =
      cmd->add_option_group("tokenizer", "where the tokenizer comes from (one of)");
  source
      ->add_option("-m,--model", options->model_dir,
                   "model folder holding tokenizer.json (and tokenizer_config.json), or the "
                   "original Qwen's qwen.tiktoken")
      ->type_name("DIR")
      ->check(CLI::ExistingPath);
  source->add_option("--tokenizer", options->tokenizer_file, "a tokenizer.json or qwen.tiktoken file")
      ->type_name("FILE")
      ->check(CLI::ExistingPath);
  source->require_option(1);

  // The text is a positional of the command itself (so that `--` before a text starting
  // with '-' works); exactly one of the four inputs is checked in the callback.
  CLI::Option* text = cmd->add_option("text", options->text,
                                      "text to encode (put -- before a text that starts with '-')")
                          ->type_name("TEXT");
  CLI::Option* jsonl = cmd->add_option("--jsonl", options->jsonl,
                                       "encode each line {\"text\": \"...\"} of FILE ('-' for "
                                       "stdin); prints one array of ids per line (blank lines are skipped)")
                           ->type_name("FILE");
  CLI::Option* decode =
      cmd->add_option(
             "--decode", options->decode,
             "decode token ids given as \"1 2 3\" (or \"1,2,3\", \"[1, 2, 3]\") and print the text")
          ->type_name("IDS");
  CLI::Option* bench = cmd->add_option("--bench", options->bench,
                                       "encode FILE repeatedly (one warm-up, then --passes timed "
                                       "passes) and report the median "
                                       "throughput in MB/s and tokens/s, single-threaded")
                           ->type_name("FILE");
  for (CLI::Option* a : {text, jsonl, decode, bench}) {
    for (CLI::Option* b : {text, jsonl, decode, bench}) {
      if (a != b) a->excludes(b);
    }
  }

  cmd->add_flag("--no-special", options->no_special,
                "treat special-token strings in the text (<|im_start|>, <|endoftext|>, ...) as "
                "plain text instead of control tokens; use for untrusted text");
  cmd->add_flag("--skip-special", options->skip_special,
                "with --decode: leave special tokens out of the text");
  cmd->add_option("--passes", options->passes, "with --bench: number of timed passes (default 5)")
      ->check(between(1, 1000));

  cmd->callback([options, text, jsonl, decode, bench, cmd, &exit_code]() {
    if (text->count() + jsonl->count() + decode->count() + bench->count() != 1) {
      throw CLI::ValidationError("tokenize", "give one of: TEXT, --jsonl, --decode, --bench");
    }
    using Mode = TokenizeOptions::Mode;
    options->mode = decode->count() ? Mode::kDecode : jsonl->count() ? Mode::kJsonl : bench->count() ? Mode::kBench
                                                                                                     : Mode::kEncode;
    if ((options->mode == Mode::kJsonl && options->jsonl.empty()) || (options->mode == Mode::kBench && options->bench.empty())) {
      throw CLI::ValidationError(options->mode == Mode::kJsonl ? "--jsonl" : "--bench", "needs a file name");
    }
    // Options that would do nothing where they were given: said, not ignored.
    if (cmd->count("--skip-special") && options->mode != Mode::kDecode) {
      throw CLI::ValidationError("--skip-special", "applies to --decode only");
    }
    if (cmd->count("--passes") && options->mode != Mode::kBench) {
      throw CLI::ValidationError("--passes", "applies to --bench only");
    }
    if (cmd->count("--no-special") && options->mode == Mode::kDecode) {
      throw CLI::ValidationError("--no-special", "applies to encoding (--decode takes --skip-special)");
    }
    run_tokenize(*options);
    exit_code = kExitOk;
  });
}

}  // namespace qwenrt::cli
