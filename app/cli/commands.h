// The command table of headscope-cli. Adding a command `foo` touches exactly these files:
//   1. app/cli/foo.cpp (new): `const CommandSpec& foo_command()` returning its one declaration:
//      name, one-line summary, its main-help synopsis, its long help, its options (OptionSpec:
//      name, value kind, default, help line, required and the message when missing) and the
//      function that runs it, reading typed values from Args. Shared pieces (--model, --text,
//      --tokens, loading the model, running the input, output checks) are in app/cli/common.h.
//   2. app/cli/commands.cpp: one declaration and one entry in the table, in main-help order.
//   3. README.md's "Command line" section: a line for it (tests/core/test_cli.cpp checks that
//      README names every command of `headscope-cli --list-commands`), and docs/DESIGN.md's
//      "Command line (contract)".
// The main help, `foo --help`, the unknown-command and unknown-option messages come from the table.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "app/cli/options.h"

namespace hs::cli {

struct CommandSpec {
  std::string name;                   // "run"
  std::string summary;                // one line for the main help's list of commands
  std::vector<std::string> synopsis;  // its lines of the main help's usage, after "headscope-cli NAME"
  std::string help;                   // `NAME --help`, from its "Usage:" line to its description
  std::vector<OptionSpec> options;
  std::string positional;             // metavar of the words that are not options ("SHARD.json..."), or ""
  std::string notes;                  // `--help` text after the option list, or ""
  std::function<int(const Args&)> run;
};

// Every command, in the order the main help lists them.
const std::vector<const CommandSpec*>& commands();
const CommandSpec* find_command(const std::string& name);  // nullptr when there is none

std::string main_help();
std::string command_help(const CommandSpec& c);
// "info, tokenize, run, ...": for the unknown-command message.
std::string command_names_text();

}  // namespace hs::cli
