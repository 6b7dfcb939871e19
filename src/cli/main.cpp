#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"

namespace {

const char* kFooter = R"(Exit codes:
  0    success
  1    runtime error (model folder, device, file I/O); the message names what failed
  2    bad command-line arguments
  130  interrupted (serve: SIGINT and SIGTERM drain the running requests, then exit 0))";

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
  std::string known;
  bool is_known = false;
  for (const CLI::App* command : app.get_subcommands({})) {
    known += (known.empty() ? "" : ", ") + command->get_name();
    is_known = is_known || (argc > 1 && command->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !is_known) {
    std::fprintf(stderr, "qwenrt: unknown command '%s' (commands: %s; see --help)\n", argv[1], known.c_str());
    return cli::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    std::fprintf(stderr, "qwenrt: %s (see --help)\n", message.c_str());
    return cli::kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "qwenrt: %s: %s\n", error_category_name(e.category()), e.what());
    return e.category() == ErrorCategory::kInvalidArgument ? cli::kExitUsage : cli::kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qwenrt: error: %s\n", e.what());
    return cli::kExitError;
  }
  // Output that did not reach its file (a full disk; a closed pipe where SIGPIPE is
  // ignored) is a failed run, not a success with nothing said.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (!flushed || std::ferror(stdout)) {
    std::fprintf(stderr, "qwenrt: i/o error: writing the output failed%s%s\n", errno != 0 ? ": " : "",
                 errno != 0 ? std::strerror(errno) : "");
    return cli::kExitError;
  }
  return exit_code;
}
