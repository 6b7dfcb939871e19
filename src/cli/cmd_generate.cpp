#include "cli/commands.h"
#include "core/error.h"

namespace qwenrt::cli {

void add_generate_command(CLI::App& root, int& exit_code) {
  CLI::App* cmd = root.add_subcommand("generate", "generate (being written)");
  cmd->callback([&exit_code]() { exit_code = kExitError; });
}

}  // namespace qwenrt::cli
