// End-to-end tests of the qwenrt command line: outputs, exit codes and error messages.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

RunResult run_qwenrt(const std::string& args) {
  static int counter = 0;
  fs::path dir = fs::temp_directory_path() / ("qwenrt_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path out = dir / ("out" + std::to_string(counter));
  fs::path err = dir / ("err" + std::to_string(counter++));
  std::string command = std::string("'") + QWENRT_BINARY + "' " + args + " >'" + out.string() +
                        "' 2>'" + err.string() + "' </dev/null";
  int status = std::system(command.c_str());
  RunResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = slurp(out);
  result.err = slurp(err);
  return result;
}

std::string fixture(const std::string& name) {
  return (fs::path(QWENRT_TEST_DATA) / "models" / name).string();
}

nlohmann::json reference(const std::string& name) {
  std::ifstream in(fs::path(fixture(name)) / "reference.json");
  return nlohmann::json::parse(in);
}

std::string join_ids(const std::vector<int>& ids) {
  std::string text;
  for (int id : ids) {
    if (!text.empty()) text += ' ';
    text += std::to_string(id);
  }
  return text;
}

TEST(Cli, HelpListsCommandsAndExitCodes) {
  RunResult result = run_qwenrt("--help");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("generate"), std::string::npos);
  EXPECT_NE(result.out.find("score"), std::string::npos);
  EXPECT_NE(result.out.find("Exit codes"), std::string::npos);
}

TEST(Cli, GenerateJsonMatchesTransformersGreedy) {
  auto ref = reference("qwen2_tied");
  const auto& item = ref["greedy"][0];
  RunResult result = run_qwenrt("generate --device cpu -m '" + fixture("qwen2_tied") + "' --format json -n " +
                                std::to_string(item["max_new_tokens"].get<int>()) + " --ids '" +
                                join_ids(item["prompt"].get<std::vector<int>>()) + "'");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["ids"], item["generated"]);
  EXPECT_TRUE(out.contains("time_to_first_token_ms"));
  EXPECT_TRUE(out.contains("decode_tokens_per_s"));
}

TEST(Cli, ScoreJsonMatchesTransformers) {
  auto ref = reference("qwen3_qknorm");
  RunResult result = run_qwenrt("score --device cpu -m '" + fixture("qwen3_qknorm") + "' --format json --ids '" +
                                join_ids(ref["score_ids"].get<std::vector<int>>()) + "'");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = nlohmann::json::parse(result.out);
  auto expected = ref["logprobs"].get<std::vector<double>>();
  auto got = out["logprobs"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-3);
  EXPECT_NEAR(out["nll_mean"].get<double>(), ref["nll_mean"].get<double>(), 1e-3);
  EXPECT_NEAR(out["ppl"].get<double>(), std::exp(ref["nll_mean"].get<double>()), 1e-2);
}

TEST(Cli, SameSeedSameSample) {
  std::string args = "generate -m '" + fixture("qwen2_gqa") +
                     "' --ids '1 2 3' -n 12 --temperature 1.0 --top-p 0.9 --seed 7 --ignore-eos";
  RunResult first = run_qwenrt(args);
  RunResult second = run_qwenrt(args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, second.out);
  RunResult other = run_qwenrt("generate -m '" + fixture("qwen2_gqa") +
                               "' --ids '1 2 3' -n 12 --temperature 1.0 --top-p 0.9 --seed 8 --ignore-eos");
  EXPECT_NE(first.out, other.out);
}

struct BadArgs {
  const char* args;
  int exit_code;
  const char* message;
};

class CliErrors : public ::testing::TestWithParam<BadArgs> {};

TEST_P(CliErrors, OneLineErrorAndExitCode) {
  std::string args = GetParam().args;
  auto pos = args.find("MODEL");
  if (pos != std::string::npos) args.replace(pos, 5, "'" + fixture("qwen2_gqa") + "'");
  RunResult result = run_qwenrt(args);
  EXPECT_EQ(result.exit_code, GetParam().exit_code) << result.err;
  EXPECT_NE(result.err.find(GetParam().message), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_TRUE(result.out.empty()) << result.out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliErrors,
    ::testing::Values(BadArgs{"", 2, "subcommand"}, BadArgs{"frobnicate", 2, "frobnicate"},
                      BadArgs{"generate --ids 1", 2, "--model"},
                      BadArgs{"generate -m /no/such/dir --ids 1", 2, "/no/such/dir"},
                      BadArgs{"generate -m MODEL --ids 'one two'", 2, "--ids"},
                      BadArgs{"generate -m MODEL --ids ''", 2, "no token ids"},
                      BadArgs{"generate -m MODEL --ids '1 99999'", 2, "99999"},
                      BadArgs{"generate -m MODEL --ids 1 --top-p 0", 2, "--top-p"},
                      BadArgs{"generate -m MODEL --ids 1 --top-p 1.5", 2, "--top-p"},
                      BadArgs{"generate -m MODEL --ids 1 --temperature -1", 2, "temperature"},
                      BadArgs{"generate -m MODEL --ids 1 --device tpu", 2, "tpu"},
                      BadArgs{"generate -m MODEL --ids '1 2 3 4 5' --max-context 3", 2, "context limit is 3"},
                      BadArgs{"score -m MODEL --ids 1", 2, "at least two"},
                      BadArgs{"generate -m MODEL --ids 1 --top-k -1", 2, "--top-k"},
                      BadArgs{"generate -m MODEL --ids 1 --min-p 2", 2, "--min-p"},
                      BadArgs{"generate -m MODEL --ids 1 --repetition-penalty 0", 2, "--repetition-penalty"},
                      BadArgs{"generate -m MODEL --ids 1 --kv-cache-gb 0.0000001", 2, "--kv-cache-gb 1e-07 is smaller than one KV block"},
                      BadArgs{"generate -m MODEL --ids 1 --kv-cache-gb 20000", 2, "--kv-cache-gb 20000 is more than the KV cache can address"},
                      BadArgs{"generate -m MODEL -p hi", 1, "tokenizer.json"},
                      BadArgs{"generate -m MODEL --chat \"$(printf 'a\\377b')\"", 2, "--chat: not valid UTF-8 (byte 2 of it)"},
                      BadArgs{"generate -m MODEL --ids 1 --stop \"$(printf '\\377')\"", 2, "--stop: not valid UTF-8 (byte 1"},
                      BadArgs{"score -m MODEL --ids '1 2' --format yaml", 2, "yaml"},
                      // Not a number, NaN and infinities: refused by name, readably.
                      BadArgs{"generate -m MODEL --ids 1 --temperature nan", 2, "--temperature: must be a finite number (got nan)"},
                      BadArgs{"generate -m MODEL --ids 1 --top-p nan", 2, "--top-p: must be a finite number"},
                      BadArgs{"generate -m MODEL --ids 1 --presence-penalty inf", 2, "--presence-penalty: must be a finite"},
                      BadArgs{"generate -m MODEL --ids 1 --frequency-penalty -inf", 2, "--frequency-penalty: must be a finite"},
                      BadArgs{"generate -m MODEL --ids 1 --repetition-penalty nan", 2, "--repetition-penalty"},
                      BadArgs{"generate -m MODEL --ids 1 -n -1", 2, "--max-new-tokens: must be at least 0 (got -1)"},
                      BadArgs{"generate -m MODEL --ids 1 -n abc", 2, "--max-new-tokens: 'abc' is not a number"},
                      BadArgs{"generate -m MODEL --ids 1 --top-p 2", 2, "--top-p: must be in (0, 1] (got 2)"},
                      BadArgs{"generate -m MODEL --ids 1 --kv-cache-gb 1e30", 2, "--kv-cache-gb: must be in [0, 1048576]"},
                      BadArgs{"generate -m MODEL --ids 1 --seed -1", 2, "--seed: must be at least 0"},
                      // Checked as the float each becomes.
                      BadArgs{"serve -m MODEL --max-body-mb 1e39", 2,
                              "--max-body-mb: must be a finite number (got 1e39, past a 32-bit float's range)"},
                      // Sampling's ends: past them a banned token could be drawn, or a penalty overflow.
                      BadArgs{"generate -m MODEL --ids 1 --temperature 1e39", 2, "--temperature: must be in [0, 1000] (got 1e39)"},
                      BadArgs{"generate -m MODEL --ids 1 --repetition-penalty 1e-38", 2,
                              "--repetition-penalty: must be in [0.0001, 10000] (got 1e-38)"},
                      BadArgs{"generate -m MODEL --ids 1 --frequency-penalty -1e35", 2,
                              "--frequency-penalty: must be in [-10000, 10000] (got -1e35)"},
                      BadArgs{"generate -m MODEL --ids 1 --top-p 1e-50", 2, "--top-p: must be in (0, 1] (got 1e-50, 0 as a 32-bit float)"},
                      // A device name is checked before anything loads.
                      BadArgs{"serve -m MODEL --device bogus", 2, "--device: unknown device 'bogus'"},
                      BadArgs{"bench --synthetic qwen2.5-0.5b --device gpu:x", 2, "--device: bad device 'gpu:x'"},
                      // An integer past what the check's float shows exactly: quoted as given.
                      BadArgs{"generate -m MODEL --ids 1 --threads 99999999999", 2,
                              "--threads: must be in [0, 1024] (got 99999999999)"},
                      BadArgs{"bench -m MODEL --prompt 0", 2, "--prompt: must be more than 0 (got 0)"},
                      BadArgs{"bench -m MODEL --max-context 8 --prompt 8 --gen 4", 2,
                              "--prompt + --gen (12) exceeds the context limit 8 (raise --max-context)"},
                      // One stream's timed loop has no penalties: said before the model loads.
                      BadArgs{"bench -m MODEL --prompt 8 --gen 2 --presence-penalty 0.5", 2,
                              "bench measures --repetition-penalty, --presence-penalty and --frequency-penalty with --batch N only"},
                      // Past the option's integer type, or no whole number: said so, not "could not convert".
                      BadArgs{"generate -m MODEL --ids 1 --max-context 99999999999", 2,
                              "--max-context: too large a number (got 99999999999)"},
                      BadArgs{"generate -m MODEL --ids 1 -n 1.5", 2, "--max-new-tokens: must be a whole number (got 1.5)"},
                      BadArgs{"generate -m MODEL --ids 1 --ignore-eos=maybe", 2,
                              "--ignore-eos: takes no value, or true or false (got maybe)"},
                      // A mistyped command or option: named, with the one it most likely meant.
                      BadArgs{"generat -m MODEL", 2, "unknown command 'generat'; did you mean 'generate'?"},
                      BadArgs{"serve --max-seq 5", 2, "unknown option '--max-seq' for 'serve'; did you mean '--max-seqs'?"},
                      BadArgs{"generate -m MODEL --ids 1 --max-tokens 3", 2, "did you mean '--max-new-tokens'?"},
                      BadArgs{"generate -m MODEL --ids 1 --tempreature=1", 2, "'--tempreature' for 'generate'; did you mean '--temperature'?"},
                      BadArgs{"generate -m MODEL --ids 1 --zzzz", 2, "unknown option '--zzzz' for 'generate' (see qwenrt generate --help)"},
                      // An option in a group (tokenize's tokenizer source) is known: the error is the real one.
                      BadArgs{"tokenize -m MODEL --tokenizer / abc", 2, "Exactly 1 option from [-m,--model,--tokenizer]"},
                      // Bounds past which a value would hang, clamp or overflow.
                      BadArgs{"generate -m MODEL --ids 1 --threads 100000", 2, "--threads: must be in [0, 1024] (got 100000)"},
                      BadArgs{"generate -m MODEL --ids 1 --temperature 1 --seed 18446744073709551616", 2,
                              "--seed: must be at most 18446744073709551615"},
                      BadArgs{"generate -m MODEL --ids 1 --seed +18446744073709551616", 2, "--seed: must be at most"},
                      BadArgs{"generate -m MODEL --ids 1 --seed 0x1ffffffffffffffff", 2, "--seed: must be at most"},
                      // A known option's value that looks like an option is no unknown option.
                      BadArgs{"generate --ids 1 --stop '-->'", 2, "--model is required"},
                      // An empty stop string would end every answer before it began: refused, as serve does.
                      BadArgs{"generate -m MODEL -p hi --stop ''", 2, "--stop: a stop string must not be empty"},
                      BadArgs{"bench -m MODEL --prompt 2147483647 --gen 1", 2, "--prompt + --gen is 2147483648 tokens"}),
    [](const auto& test_info) { return "case" + std::to_string(test_info.index); });

// An option given twice takes its last value, as most command lines do.
TEST(Cli, ARepeatedOptionTakesItsLastValue) {
  RunResult twice = run_qwenrt("generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 9 -n 3 --ignore-eos");
  ASSERT_EQ(twice.exit_code, 0) << twice.err;
  RunResult once = run_qwenrt("generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 3 --ignore-eos");
  EXPECT_EQ(twice.out, once.out);
  EXPECT_EQ(std::count(once.out.begin(), once.out.end(), ' '), 2) << once.out;  // three ids
}

// An integer with leading zeros is decimal ("-n 010" is ten tokens, not octal eight); a
// "0x" prefix still reads as hexadecimal.
TEST(Cli, LeadingZerosAreDecimal) {
  const std::string base = "generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' --ignore-eos ";
  RunResult zeros = run_qwenrt(base + "-n 010");
  ASSERT_EQ(zeros.exit_code, 0) << zeros.err;
  EXPECT_EQ(std::count(zeros.out.begin(), zeros.out.end(), ' '), 9) << zeros.out;  // ten ids
  EXPECT_EQ(zeros.out, run_qwenrt(base + "-n 10").out);
  RunResult hex = run_qwenrt(base + "-n 0x4");
  EXPECT_EQ(std::count(hex.out.begin(), hex.out.end(), ' '), 3) << hex.out;
  const std::string draw = "generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 6 --ignore-eos --temperature 1 ";
  EXPECT_EQ(run_qwenrt(draw + "--seed 0017").out, run_qwenrt(draw + "--seed 17").out);
  EXPECT_NE(run_qwenrt(draw + "--seed 0017").out, run_qwenrt(draw + "--seed 15").out);
  RunResult negative = run_qwenrt(base + "-n -07");
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_NE(negative.err.find("must be at least 0 (got -7)"), std::string::npos) << negative.err;
}

TEST(Cli, MissingConfigNamesTheFile) {
  fs::path dir = fs::temp_directory_path() / ("qwenrt_empty_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  RunResult result = run_qwenrt("score -m '" + dir.string() + "' --ids '1 2'");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("config.json"), std::string::npos) << result.err;
  fs::remove_all(dir);
}

// Names and strings a model's files carry into an error (an architecture, a tensor's name)
// reach the terminal as one escaped line of bounded length: no forged second line, no
// escape sequence run.
TEST(Cli, ErrorsQuotingAFileAreOneEscapedLine) {
  fs::path dir = fs::temp_directory_path() / ("qwenrt_evil_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json config = nlohmann::json::parse(slurp(fs::path(fixture("qwen2_gqa")) / "config.json"));
  // \xc2\x9b: U+009B, the C1 form of ESC [ (a control sequence opener some terminals act on).
  config["architectures"] = {"Foo\nqwenrt: everything is fine\x1b[2J\xc2\x9b" "31m" + std::string(5000, 'A')};
  std::ofstream(dir / "config.json") << config.dump();
  RunResult result = run_qwenrt("generate --device cpu -m '" + dir.string() + "' --ids 1");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_EQ(result.err.find('\x1b'), std::string::npos);
  EXPECT_EQ(result.err.find("\xc2\x9b"), std::string::npos);
  EXPECT_NE(result.err.find("'Foo\\nqwenrt: everything is fine\\x1b[2J\\u009b31mAAA"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find(" more bytes)"), std::string::npos);
  EXPECT_LT(result.err.size(), 2200u);
  fs::remove_all(dir);
}

// JSON timings are null where nothing was timed (one token has no decode rate, none no first
// token); a generation cut short of -n by the context says so on stderr.
TEST(Cli, JsonTimingsAndACutShortGeneration) {
  RunResult one = run_qwenrt("generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 1 --format json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const nlohmann::json report = nlohmann::json::parse(one.out);
  EXPECT_TRUE(report["decode_tokens_per_s"].is_null()) << one.out;
  EXPECT_TRUE(report["prompt_tokens_per_s"].is_number()) << one.out;
  EXPECT_EQ(one.out.find("e-0"), std::string::npos) << one.out;  // times to the microsecond, no float noise
  RunResult none = run_qwenrt("generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 0 --format json");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_TRUE(nlohmann::json::parse(none.out)["time_to_first_token_ms"].is_null()) << none.out;
  RunResult cut = run_qwenrt("generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 40 --max-context 16 --ignore-eos");
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_NE(cut.err.find("note: stopped after 14 of the 40 tokens asked for"), std::string::npos) << cut.err;
  RunResult full = run_qwenrt("generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 5 --ignore-eos");
  EXPECT_EQ(full.err.find("note: stopped"), std::string::npos) << full.err;
}

TEST(Cli, ScoreReportsMemoryWhenAsked) {
  RunResult result = run_qwenrt("score -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' --memory-report --format json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("KV cache"), std::string::npos) << result.err;
  EXPECT_TRUE(nlohmann::json::parse(result.out).contains("ppl"));  // the report stays on stderr
}

// doctor checks the checkpoint as generate would: a tensor of the wrong shape fits nowhere.
TEST(Cli, DoctorRefusesACheckpointGenerateRefuses) {
  fs::path dir = fs::temp_directory_path() / ("qwenrt_mixed_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(fs::path(fixture("qwen3_qknorm")) / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  fs::copy_file(fs::path(fixture("qwen2_tied")) / "model.safetensors", dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  RunResult generate = run_qwenrt("generate --device cpu -m '" + dir.string() + "' --ids 1");
  RunResult doctor = run_qwenrt("doctor -m '" + dir.string() + "'");
  EXPECT_EQ(generate.exit_code, 1);
  EXPECT_EQ(doctor.exit_code, 1) << doctor.out;
  EXPECT_NE(doctor.err.find("model.safetensors"), std::string::npos) << doctor.err;
  fs::remove_all(dir);
}

TEST(Cli, PartialModelFolderNamesTheMissingShard) {
  fs::path dir = fs::temp_directory_path() / ("qwenrt_partial_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path source = fixture("qwen2_gqa");
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors.index.json",
                           "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors"}) {
    fs::copy_file(source / name, dir / name, fs::copy_options::overwrite_existing);
  }
  RunResult result = run_qwenrt("score --device cpu -m '" + dir.string() + "' --ids '1 2'");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("model-00003-of-00004.safetensors"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("missing"), std::string::npos) << result.err;
  fs::remove_all(dir);
}

TEST(Cli, StatsReportSpeedAndMemory) {
  RunResult result = run_qwenrt("generate --device cpu -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 4 --stats");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("tokens/s"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("first token"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("KV cache"), std::string::npos) << result.err;
  // -n 0: no first token to time, said so rather than timed.
  RunResult none = run_qwenrt("generate --device cpu -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 0 --stats");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.err.find("first token: none generated"), std::string::npos) << none.err;
  EXPECT_EQ(none.err.find("first token after"), std::string::npos) << none.err;
}

// At temperature 0 the options that shape a draw are said to change nothing; with a
// temperature they are taken without a word.
TEST(Cli, DrawOptionsAtTemperatureZeroAreNoted) {
  const std::string base = "generate --device cpu -m '" + fixture("qwen2_gqa") + "' --ids '1 2 3' -n 2 ";
  RunResult greedy = run_qwenrt(base + "--temperature 0 --top-k 5 --seed 3");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_NE(greedy.err.find("note: --top-k, --seed have no effect at temperature 0"), std::string::npos) << greedy.err;
  RunResult sampled = run_qwenrt(base + "--temperature 0.7 --top-k 5 --seed 3");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.err;
  EXPECT_EQ(sampled.err.find("no effect"), std::string::npos) << sampled.err;
}

// A benchmark past the positions the model was trained for runs, with a note that says so.
TEST(Cli, BenchPastTheTrainedLengthIsNoted) {
  const std::string base = "bench --device cpu -m '" + fixture("qwen2_gqa") + "' --repeat 1 --warmup 0 --gen 2 ";
  RunResult past = run_qwenrt(base + "--prompt 600");
  ASSERT_EQ(past.exit_code, 0) << past.err;
  EXPECT_NE(past.err.find("note: --prompt + --gen (602 tokens) is past the 512 positions this model was trained for"),
            std::string::npos) << past.err;
  RunResult within = run_qwenrt(base + "--prompt 500");
  ASSERT_EQ(within.exit_code, 0) << within.err;
  EXPECT_EQ(within.err.find("trained for"), std::string::npos) << within.err;
}

// --help, --version and streamed output that do not reach their file fail, saying why.
TEST(Cli, WritingToAFullDiskFails) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  for (const std::string args : {"--help", "generate --help", "--version"}) {
    const std::string command = std::string("'") + QWENRT_BINARY + "' " + args + " >/dev/full 2>/dev/null";
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << args;
    EXPECT_EQ(WEXITSTATUS(status), 1) << args;
  }
  // Streamed output: the reason is the first failed write's, not lost by the final flush.
  const fs::path err = fs::temp_directory_path() / ("qwenrt_full_" + std::to_string(::getpid()));
  const std::string command = std::string("'") + QWENRT_BINARY + "' generate --device cpu -m '" +
                              fixture("qwen2_gqa") + "' --ids '1 2 3' -n 4 >/dev/full 2>'" + err.string() + "'";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string said = slurp(err);
  EXPECT_NE(said.find("writing the output failed: No space left on device"), std::string::npos) << said;
  fs::remove(err);
}

TEST(Cli, CudaRequestWithoutGpuIsAClearError) {
  // Either this build has no CUDA backend, or the machine has no GPU: both must say so in
  // one line instead of crashing. (On a GPU host the command succeeds.)
  RunResult result = run_qwenrt("generate -m '" + fixture("qwen2_gqa") + "' --ids '1 2' -n 2 --device cuda");
  if (result.exit_code != 0) {
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
}

}  // namespace

namespace {

// --chat-template: another template for the folder's tokens, checked before the weights load.
// template --ids gives the ids generate --chat and serve feed the model: a message's text that
// spells a control token stays text.
TEST(CliChatTemplate, IdsKeepMessageTextPlain) {
  const fs::path dir = fs::temp_directory_path() / ("qwenrt_cli_template_ids_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "m.json") << R"([{"role":"user","content":"<|im_end|>"}])";
  const std::string serve_dir = (fs::path(QWENRT_TEST_DATA) / "serve").string();
  RunResult result = run_qwenrt("template -m '" + serve_dir + "' --messages '" + (dir / "m.json").string() +
                                "' --add-generation-prompt --ids");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  // <|im_end|>'s id: once, where the template closes the user's turn.
  RunResult end = run_qwenrt("tokenize -m '" + serve_dir + "' '<|im_end|>'");
  ASSERT_EQ(end.exit_code, 0) << end.err;
  const int end_id = nlohmann::json::parse(end.out).at(0).get<int>();
  std::istringstream ids(result.out);
  int count = 0;
  for (int id = 0; ids >> id;) count += id == end_id;
  EXPECT_EQ(count, 1) << result.out;
  fs::remove_all(dir);
}

// A folder's template that does not compile: the error names the file and the way round it.
TEST(CliChatTemplate, ABrokenTemplateNamesItsFile) {
  const fs::path dir = fs::temp_directory_path() / ("qwenrt_cli_broken_template_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path serve_dir = fs::path(QWENRT_TEST_DATA) / "serve";
  fs::copy_file(serve_dir / "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "{{ messages"})";
  std::ofstream(dir / "m.json") << R"([{"role":"user","content":"Hi"}])";
  RunResult result = run_qwenrt("template -m '" + dir.string() + "' --messages '" + (dir / "m.json").string() + "'");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find((dir / "tokenizer_config.json").string() + ": chat template syntax error"), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("--chat-template FILE"), std::string::npos) << result.err;
  // No template at all: the file named once, with its folder.
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  RunResult none = run_qwenrt("template -m '" + dir.string() + "' --messages '" + (dir / "m.json").string() + "'");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find((dir / "tokenizer_config.json").string() + " has no chat_template (--chat-template FILE"),
            std::string::npos)
      << none.err;
  fs::remove_all(dir);
}

TEST(CliChatTemplate, ReplacesTheFoldersTemplate) {
  const fs::path dir = fs::temp_directory_path() / ("qwenrt_cli_template_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "m.json") << R"([{"role":"user","content":"Hi"}])";
  std::ofstream(dir / "t.jinja") << "{% for m in messages %}<{{ m.role }}:{{ m.content }}>{% endfor %}"
                                    "{% if add_generation_prompt %}go{% endif %}\n";
  const std::string serve_dir = (fs::path(QWENRT_TEST_DATA) / "serve").string();
  const std::string messages = " --messages '" + (dir / "m.json").string() + "'";
  RunResult own = run_qwenrt("template -m '" + serve_dir + "'" + messages + " --add-generation-prompt");
  ASSERT_EQ(own.exit_code, 0) << own.err;
  RunResult other = run_qwenrt("template -m '" + serve_dir + "'" + messages + " --add-generation-prompt --chat-template '" +
                               (dir / "t.jinja").string() + "'");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(other.out, "<user:Hi>go");
  EXPECT_NE(own.out, other.out);
  // Without a folder, or outside --chat, it is a usage error.
  RunResult alone = run_qwenrt("template --tokenizer-config '" + serve_dir + "/tokenizer_config.json'" + messages +
                               " --chat-template '" + (dir / "t.jinja").string() + "'");
  EXPECT_EQ(alone.exit_code, 2) << alone.err;
  EXPECT_NE(alone.err.find("--chat-template"), std::string::npos) << alone.err;
  RunResult not_chat = run_qwenrt("generate -m '" + fixture("qwen3_qknorm") + "' --ids '1 2' --chat-template '" +
                                  (dir / "t.jinja").string() + "'");
  EXPECT_EQ(not_chat.exit_code, 2) << not_chat.err;
  EXPECT_NE(not_chat.err.find("--chat"), std::string::npos) << not_chat.err;
  RunResult missing = run_qwenrt("template -m '" + serve_dir + "'" + messages + " --chat-template '" +
                                 (dir / "none.jinja").string() + "'");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("none.jinja"), std::string::npos) << missing.err;
  // serve names a broken template and stops before it loads the weights.
  std::ofstream(dir / "broken.jinja") << "{% for m in messages %}";
  RunResult serve = run_qwenrt("serve --device cpu -m '" + fixture("qwen3_qknorm") + "' --tokenizer '" + serve_dir +
                               "' --port 0 --chat-template '" + (dir / "broken.jinja").string() + "'");
  EXPECT_EQ(serve.exit_code, 1) << serve.err;
  EXPECT_NE(serve.err.find("broken.jinja"), std::string::npos) << serve.err;
  EXPECT_EQ(serve.err.find("loading"), std::string::npos) << serve.err;
  RunResult kwargs = run_qwenrt("serve --device cpu -m '" + fixture("qwen3_qknorm") + "' --tokenizer '" + serve_dir +
                                "' --port 0 --default-chat-template-kwargs '[1]'");
  EXPECT_EQ(kwargs.exit_code, 2) << kwargs.err;
  EXPECT_NE(kwargs.err.find("--default-chat-template-kwargs must be a JSON object"), std::string::npos) << kwargs.err;
  fs::remove_all(dir);
}

// A model folder without a tokenizer (as save_pretrained of the model alone writes it) is
// given one from another folder, as serve and tokenize take it.
TEST(CliTokenizer, GenerateAndChatTakeTheTokenizerFromAnotherFolder) {
  const std::string serve_dir = (fs::path(QWENRT_TEST_DATA) / "serve").string();
  const std::string model = " --device cpu -m '" + fixture("qwen3_qknorm") + "'";
  RunResult without = run_qwenrt("generate" + model + " -p Hello -n 2");
  EXPECT_EQ(without.exit_code, 1) << without.err;
  EXPECT_NE(without.err.find("tokenizer.json"), std::string::npos) << without.err;
  RunResult ids = run_qwenrt("tokenize --tokenizer '" + serve_dir + "/tokenizer.json' Hello");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  RunResult text = run_qwenrt("generate" + model + " --tokenizer '" + serve_dir + "' -p Hello -n 3 --format json");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const auto json = nlohmann::json::parse(text.out);
  EXPECT_TRUE(json.contains("text")) << text.out;
  // The same prompt as its ids gives the same tokens: the text was encoded by that tokenizer.
  std::string id_list = ids.out.substr(ids.out.find('[') + 1);
  id_list = id_list.substr(0, id_list.find(']'));
  std::replace(id_list.begin(), id_list.end(), ',', ' ');
  RunResult by_ids = run_qwenrt("generate" + model + " --ids '" + id_list + "' -n 3 --format json");
  ASSERT_EQ(by_ids.exit_code, 0) << by_ids.err;
  EXPECT_EQ(json["ids"], nlohmann::json::parse(by_ids.out)["ids"]) << text.out << by_ids.out;
  RunResult chat = run_qwenrt("chat" + model + " --tokenizer '" + serve_dir + "' -n 3");  // stdin empty: loads, ends
  EXPECT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_EQ(run_qwenrt("chat" + model + " -n 3").exit_code, 1);
  RunResult missing = run_qwenrt("chat" + model + " --tokenizer /no/such/folder");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
}

TEST(CliBench, JsonReportOnAFixture) {
  RunResult result = run_qwenrt("bench --device cpu -m '" + fixture("qwen3_qknorm") +
                                "' --prompt 20 --gen 5 --repeat 2 --threads 1 --format json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["prompt_tokens"], 20);
  EXPECT_EQ(out["gen_tokens"], 5);
  EXPECT_GT(out["prompt_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(out["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(out["memory"]["kv_cache"].get<double>(), 0);
  // The CPU has no device count of its memory: not measured is null, not 0.
  EXPECT_TRUE(out["memory"]["peak_used"].is_null()) << out["memory"];
  EXPECT_TRUE(out["memory"]["device_total"].is_null()) << out["memory"];
  // What the run is repeated with: the CPU's threads, the warm-up runs, the seed. stderr is
  // no terminal here: the JSON comes alone, no progress beside it.
  EXPECT_EQ(out["threads"], 1) << result.out;
  EXPECT_EQ(out["warmup"], 1);
  EXPECT_EQ(out["seed"], 0);
  EXPECT_EQ(result.err.find("run 1 of 2"), std::string::npos) << result.err;
}

// Beside the table, each run's rates on stderr as it ends; the header names the threads.
TEST(CliBench, TableReportsEachRunAndTheThreads) {
  RunResult result = run_qwenrt("bench --device cpu -m '" + fixture("qwen3_qknorm") +
                                "' --prompt 20 --gen 5 --repeat 2 --warmup 1 --threads 2");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("warm-up 1 of 1: prompt "), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("run 1 of 2: prompt "), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("run 2 of 2: prompt "), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("run 3 of"), std::string::npos) << result.err;
  EXPECT_NE(result.out.find(" on cpu (2 threads), "), std::string::npos) << result.out;
}

TEST(CliBench, BatchReportAppliesTheSamplingOptions) {
  const std::string base = "bench --device cpu -m '" + fixture("qwen3_qknorm") +
                           "' --batch 3 --prompt 6 --gen 4 --repeat 1 --warmup 0 --format json";
  RunResult greedy = run_qwenrt(base);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  auto out = nlohmann::json::parse(greedy.out);
  EXPECT_EQ(out["batch"], 3);
  EXPECT_EQ(out["sampling"], "greedy");
  EXPECT_GT(out["decode_tokens_per_s"].get<double>(), 0);
  // The keys a single stream's report has, where they mean the same.
  for (const char* key : {"prompt_tokens_per_s", "prompt_ms", "prefill_chunk"}) {
    EXPECT_TRUE(out.contains(key)) << key << " in " << out;
  }
  RunResult sampled = run_qwenrt(base + " --temperature 0.8 --top-k 5 --repetition-penalty 1.3 --seed 3");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.err;
  EXPECT_EQ(nlohmann::json::parse(sampled.out)["sampling"], "sampled");
}

TEST(CliBench, RejectsUnknownPresetAndBothSources) {
  RunResult unknown = run_qwenrt("bench --synthetic qwen9-1t");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("qwen9-1t"), std::string::npos) << unknown.err;
  RunResult both = run_qwenrt("bench --device cpu -m '" + fixture("qwen3_qknorm") + "' --synthetic qwen3-0.6b");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
}

TEST(CliDoctor, ReportsBuildAndModelFit) {
  RunResult result = run_qwenrt("doctor -m '" + fixture("qwen2_gqa") + "'");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("cpu"), std::string::npos);
  EXPECT_NE(result.out.find("Qwen2ForCausalLM"), std::string::npos);
  EXPECT_NE(result.out.find("KV cache"), std::string::npos);
  // This fixture has no tokenizer: said, not a failure (generate --ids runs).
  EXPECT_NE(result.out.find("tokenizer none (no tokenizer.json or qwen.tiktoken)"), std::string::npos) << result.out;
}

// A tokenizer that generate could not load fails the check, named as generate names it.
TEST(CliDoctor, ATokenizerThatDoesNotLoadFailsTheCheck) {
  const fs::path dir = fs::temp_directory_path() / ("qwenrt_doctor_tokenizer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(fixture("qwen2_gqa"))) fs::copy(entry.path(), dir / entry.path().filename());
  std::ofstream(dir / "tokenizer.json") << "garbage";
  RunResult broken = run_qwenrt("doctor -m '" + dir.string() + "'");
  EXPECT_EQ(broken.exit_code, 1) << broken.out << broken.err;
  EXPECT_NE(broken.out.find("tokenizer cannot load: " + (dir / "tokenizer.json").string() + ": not valid JSON"),
            std::string::npos) << broken.out;
  fs::copy_file(QWENRT_TEST_DATA "/serve/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  RunResult good = run_qwenrt("doctor -m '" + dir.string() + "'");
  EXPECT_EQ(good.exit_code, 0) << good.out << good.err;
  EXPECT_NE(good.out.find(" tokens\n"), std::string::npos) << good.out;
  fs::remove_all(dir);
}

}  // namespace
