#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"

namespace {

const char* kFooter = R"(Exit codes:
  0    success
  1    runtime error (model files, device, file I/O); the message names what failed
  2    bad command-line arguments or input (a folder that does not exist, a malformed messages
       file, text that is not UTF-8, a chat template that raises an exception)
  130  interrupted (serve: SIGINT and SIGTERM drain the running requests, then exit 0))";

// Edits (insertions, deletions, substitutions, swaps of neighbours) between two names.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The known name a mistyped one most likely meant: the only one it begins, else the nearest
// within a few edits; empty where none is near.
std::string nearest_name(const std::string& given, const std::vector<std::string>& known) {
  std::string begun;
  int begun_count = 0;
  for (const std::string& name : known) {
    if (name.size() > given.size() && name.starts_with(given)) {
      begun = name;
      ++begun_count;
    }
  }
  if (begun_count == 1) return begun;
  std::string best;
  size_t best_distance = given.size() > 10 ? 3 : 2;
  for (const std::string& name : known) {
    const size_t distance = edit_distance(given, name);
    if (distance <= best_distance && (best.empty() || distance < best_distance)) {
      best = name;
      best_distance = distance;
    }
  }
  if (!best.empty()) return best;
  // Else the only name that has each of the given words, begun ("--max-token" for
  // "--max-new-tokens").
  const auto words = [](const std::string& name) {
    std::vector<std::string> parts;
    for (size_t start = 0; start <= name.size();) {
      const size_t end = std::min(name.find('-', start), name.size());
      if (end > start) parts.push_back(name.substr(start, end - start));
      start = end + 1;
    }
    return parts;
  };
  const std::vector<std::string> given_words = words(given);
  int holding_count = 0;
  for (const std::string& name : known) {
    const std::vector<std::string> name_words = words(name);
    const bool holds = !given_words.empty() && std::all_of(given_words.begin(), given_words.end(), [&](const std::string& w) {
      return std::any_of(name_words.begin(), name_words.end(), [&](const std::string& n) { return n.starts_with(w); });
    });
    if (holds) {
      best = name;
      ++holding_count;
    }
  }
  return holding_count == 1 ? best : "";
}

std::string did_you_mean(const std::string& nearest) {
  return nearest.empty() ? "" : "; did you mean '" + nearest + "'?";
}

// The names of a command's options ("--long", "-s"), those of its option groups (unnamed
// subcommands) too; `valued`: those that take a value.
void option_names(const CLI::App& command, std::vector<std::string>& known, std::vector<std::string>& valued) {
  for (const CLI::Option* option : command.get_options()) {
    std::vector<std::string> names;
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
    known.insert(known.end(), names.begin(), names.end());
    if (option->get_type_size_min() > 0) valued.insert(valued.end(), names.begin(), names.end());
  }
  for (const CLI::App* group : command.get_subcommands({})) {
    if (group->get_name().empty()) option_names(*group, known, valued);
  }
}

// The first long option on the command line that the command does not have, named with the
// one it most likely meant. The parser's own message for such a line can mislead: it lists
// the option's value as unexpected too, or asks for --model first.
std::string unknown_option_message(const CLI::App& command, int argc, char** argv) {
  std::vector<std::string> known, valued, long_known;
  option_names(command, known, valued);
  for (const std::string& name : known) {
    if (name.starts_with("--")) long_known.push_back(name);
  }
  for (int i = 2; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    // A known option's value is no option, whatever it looks like (--stop '-->').
    if (word.find('=') == std::string::npos && std::find(valued.begin(), valued.end(), word) != valued.end()) {
      ++i;
      continue;
    }
    if (!word.starts_with("--") || word.size() == 2) continue;
    const std::string name = word.substr(0, word.find('='));
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    return "unknown option '" + name + "' for '" + command.get_name() + "'" + did_you_mean(nearest_name(name, long_known)) +
           " (see qwenrt " + command.get_name() + " --help)";
  }
  return "";
}

// An option that takes a whole number (CLI11 names its type INT or UINT).
bool integer_option(const CLI::Option& option) {
  const std::string type = option.get_type_name();
  return type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
}

// The length of a leading + or - (0 or 1).
size_t sign_length(const std::string& text) { return text.find_first_of("+-") == 0 ? 1 : 0; }

// Decimal digits after an optional sign, at least one.
bool signed_digits(const std::string& text) {
  const size_t sign = sign_length(text);
  return text.size() > sign && std::all_of(text.begin() + static_cast<long>(sign), text.end(),
                                           [](char c) { return c >= '0' && c <= '9'; });
}

// CLI11 says "Could not convert: --max-context = 99999999999": what failed, not why. An
// integer option's checks passed (they read the text as a number), so a whole number is past
// its type and anything else (1.5, 1e3) is no whole number; a flag takes true/false at most.
std::string conversion_message(const CLI::App* command, const std::string& what) {
  const std::string prefix = "Could not convert: ";
  const size_t equals = what.find(" = ");
  if (command == nullptr || what.rfind(prefix, 0) != 0 || equals == std::string::npos) return what;
  const std::string name = what.substr(prefix.size(), equals - prefix.size());
  const std::string value = what.substr(equals + 3);
  const CLI::Option* option = command->get_option_no_throw(name);
  if (option == nullptr) return what;
  if (option->get_items_expected_max() == 0) return name + ": takes no value, or true or false (got " + value + ")";
  if (!integer_option(*option)) return what;
  if (!signed_digits(value)) return name + ": must be a whole number (got " + value + ")";
  return name + ": " + (value[0] == '-' ? "too small" : "too large") + " a number (got " + value + ")";
}

// An integer option's text with leading zeros ("010") is read as decimal, as a person
// means it: the parser would take it as octal (8), and a check that reads the text as a
// number (at_least, between) would pass 10 while 8 was used. "0x" and "0b" prefixes stay.
void read_leading_zeros_as_decimal(CLI::App& command) {
  for (CLI::Option* option : command.get_options()) {
    if (!integer_option(*option)) continue;
    option->transform(
        [](std::string text) {
          const size_t sign = sign_length(text);
          if (text.size() < sign + 2 || text[sign] != '0' || !signed_digits(text)) return text;
          const size_t first = std::min(text.find_first_not_of('0', sign), text.size() - 1);
          return text.substr(0, sign) + text.substr(first);
        },
        "", "decimal");
  }
  for (CLI::App* sub : command.get_subcommands({})) read_leading_zeros_as_decimal(*sub);
}

// Output that did not reach its file (a full disk; a closed pipe where SIGPIPE is ignored)
// is a failed run, not a success with nothing said; --help and --version included. The
// reason is the final flush's, or the first failed write's when a command streamed.
int finish_output(int code) {
  errno = 0;
  std::cout.flush();
  if (std::fflush(stdout) == 0 && !std::ferror(stdout) && std::cout.good()) return code;
  const int reason = errno != 0 ? errno : qwenrt::cli::stdout_failure_errno();
  std::fprintf(stderr, "qwenrt: i/o error: writing the output failed%s%s\n", reason != 0 ? ": " : "",
               reason != 0 ? std::strerror(reason) : "");
  return qwenrt::cli::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qwenrt;
  (void)cli::seconds_since_process_start();  // the clock for "started → first token"
  CLI::App app{"qwenrt: fast, correct inference for Qwen models (the original Qwen, Qwen1.5, Qwen2, Qwen2.5, Qwen3)"};
  app.footer(kFooter);
  app.require_subcommand(1);
  // An option given twice takes its last value (a command line extended by a script or an
  // alias), not an error; options that take several values keep them all.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", std::string("qwenrt ") + QWENRT_VERSION);
  int exit_code = cli::kExitOk;
  cli::add_generate_command(app, exit_code);
  cli::add_score_command(app, exit_code);
  cli::add_bench_command(app, exit_code);
  cli::add_doctor_command(app, exit_code);
  cli::add_tokenize_command(app, exit_code);
  cli::add_template_command(app, exit_code);
  cli::add_chat_command(app, exit_code);
  cli::add_serve_command(app, exit_code);
  read_leading_zeros_as_decimal(app);
  std::string known;
  std::vector<std::string> names;
  const CLI::App* chosen = nullptr;
  for (const CLI::App* command : app.get_subcommands({})) {
    known += (known.empty() ? "" : ", ") + command->get_name();
    names.push_back(command->get_name());
    if (argc > 1 && command->get_name() == argv[1]) chosen = command;
  }
  if (argc > 1 && argv[1][0] != '-' && chosen == nullptr) {
    std::fprintf(stderr, "qwenrt: unknown command '%s'%s (commands: %s; see --help)\n",
                 cli::printable_line(argv[1], 200).c_str(), did_you_mean(nearest_name(argv[1], names)).c_str(),
                 known.c_str());
    return cli::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return finish_output(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return finish_output(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return finish_output(app.exit(e));
  } catch (const CLI::ParseError& e) {
    const std::string unknown = chosen != nullptr ? unknown_option_message(*chosen, argc, argv) : "";
    if (!unknown.empty()) {
      std::fprintf(stderr, "qwenrt: %s\n", cli::printable_line(unknown).c_str());
      return cli::kExitUsage;
    }
    const bool conversion = dynamic_cast<const CLI::ConversionError*>(&e) != nullptr;
    const std::string message = conversion ? conversion_message(chosen, e.what()) : e.what();
    std::fprintf(stderr, "qwenrt: %s (see --help)\n", cli::printable_line(message).c_str());
    return cli::kExitUsage;
  } catch (const Error& e) {
    // Messages may quote a file's names and strings: one line, escaped, of bounded length.
    std::fprintf(stderr, "qwenrt: %s: %s\n", error_category_name(e.category()), cli::printable_line(e.what()).c_str());
    return e.category() == ErrorCategory::kInvalidArgument ? cli::kExitUsage : cli::kExitError;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the process may not look at (permissions, a loop of links): the path and why.
    std::fprintf(stderr, "qwenrt: %s: %s: %s\n", error_category_name(ErrorCategory::kIo),
                 cli::printable_line(e.path1().string()).c_str(), e.code().message().c_str());
    return cli::kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qwenrt: error: %s\n", cli::printable_line(e.what()).c_str());
    return cli::kExitError;
  }
  return finish_output(exit_code);
}
