#include "cli/commands.h"
#include "core/error.h"

namespace qwenrt::cli {

void add_score_command(CLI::App& root, int& exit_code) {
  CLI::App* cmd = root.add_subcommand("score", "score (being written)");
  cmd->callback([&exit_code]() { exit_code = kExitError; });
}

}  // namespace qwenrt::cli
