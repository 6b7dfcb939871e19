// Each `qwenrt` subcommand lives in its own file and registers itself on the root app.
// A command's callback stores its exit code in `exit_code`; errors are thrown as
// qwenrt::Error and turned into a one-line message by main().
#pragma once

#include <CLI/CLI.hpp>

namespace qwenrt::cli {

// Exit codes, documented in `qwenrt --help`.
constexpr int kExitOk = 0;
constexpr int kExitError = 1;       // runtime failure (model, device, I/O)
constexpr int kExitUsage = 2;       // bad command-line arguments
constexpr int kExitInterrupted = 130;

void add_generate_command(CLI::App& root, int& exit_code);
void add_score_command(CLI::App& root, int& exit_code);
void add_bench_command(CLI::App& root, int& exit_code);
void add_doctor_command(CLI::App& root, int& exit_code);
void add_tokenize_command(CLI::App& root, int& exit_code);
void add_template_command(CLI::App& root, int& exit_code);
void add_chat_command(CLI::App& root, int& exit_code);
void add_serve_command(CLI::App& root, int& exit_code);

}  // namespace qwenrt::cli
