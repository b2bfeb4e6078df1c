// headscope-cli: the engine without a window. See DESIGN.md, "Command line (contract)"; the
// commands are the table in app/cli/commands.h.
#include <exception>
#include <iostream>
#include <string>

#include "app/cli/commands.h"
#include "core/model/pack_cache.h"

namespace {

// An error message as one line of stderr: continuation lines of option lists joined with "; ".
std::string one_line(std::string s) {
  for (size_t p; (p = s.find("\n  ")) != std::string::npos;) s.replace(p, 3, "; ");
  for (char& ch : s)
    if (ch == '\n') ch = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hs::cli;
  // A model opened for the first time has its packed matrices written to the cache on disk in the
  // background (core/model/pack_cache.h); a command that ends sooner waits for it, so that the
  // next command opens the model from the cache.
  struct WaitForPackCache {
    ~WaitForPackCache() { hs::PackCache::wait_for_writes(); }
  } wait_for_pack_cache;
  try {
    const std::string first = argc >= 2 ? argv[1] : "";
    if (argc < 2 || first == "--help" || first == "-h") {
      std::cout << main_help();
      return 0;
    }
    if (first == "--version") {
      std::cout << "headscope-cli " << HEADSCOPE_VERSION << "\n";
      return 0;
    }
    if (first == "--list-commands") {  // hidden: the table's names, one a line (the README check reads it)
      for (const CommandSpec* c : commands()) std::cout << c->name << "\n";
      return 0;
    }
    const CommandSpec* command = find_command(first);
    if (!command) throw UsageError("unknown command \"" + first + "\"; commands are " + command_names_text() + ".");
    const Args args(*command, argc - 2, argv + 2);
    if (args.help()) {
      std::cout << command_help(*command);
      return 0;
    }
    return command->run(args);
  } catch (const UsageError& e) {
    std::cerr << "headscope-cli: " << one_line(e.what()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "headscope-cli: error: " << one_line(e.what()) << "\n";
    return 1;
  }
}
