// A command's options, declared once (OptionSpec), and argv parsed against them into typed
// values (Args). The help text's option list and the unknown-option message come from the same
// declarations (commands.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"

namespace hs::cli {

struct CommandSpec;

// A mistake in the command line: printed as one line, exit code 2 (an hs::Error from the engine
// exits with 1).
struct UsageError : hs::Error {
  using hs::Error::Error;
};

enum class ValueKind {
  Flag,     // no value: present or not
  Text,     // any string
  Integer,  // an integer in [min, max]
  Number,   // a finite number >= min
};

struct OptionSpec {
  std::string name;              // "--text", "-o"
  std::string metavar;           // "TEXT", "N"; empty for a flag
  ValueKind kind = ValueKind::Text;
  std::string help;              // one line for the option list (wrapped there)
  std::string default_value;     // used when the option is absent; "" = no default
  bool required = false;         // the command cannot run without it
  std::string missing;           // the message when a required option is absent
  std::string alias;             // another spelling ("--output" for "-o"), or ""
  int64_t min = 0, max = 0;      // Integer: the accepted range; Number: min only
  bool repeatable = false;       // Text: may be given several times (Args::texts); others once
};

// Parsed values of one command line. Values are checked against their kind when parsed (an
// integer out of range is refused before the command runs); a required option is refused when
// the command first asks for it, so each command's checks keep the order it gives them.
class Args {
 public:
  Args(const CommandSpec& command, int argc, char** argv);  // argv: the words after the command name

  const CommandSpec& command() const { return *command_; }
  bool help() const { return help_; }

  bool has(const std::string& name) const;  // given on the command line
  bool flag(const std::string& name) const;
  // The value given, else the declared default; a required option without either throws its
  // `missing` message, any other absent option is a programming error (ask has() first).
  std::string text(const std::string& name) const;
  std::optional<std::string> optional_text(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  // Every value of a repeatable option, in the order given (empty when absent).
  std::vector<std::string> texts(const std::string& name) const;
  double number(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  using Value = std::variant<bool, std::string, int64_t, double>;
  const OptionSpec& spec(const std::string& name) const;
  Value value_or_default(const std::string& name) const;

  const CommandSpec* command_;
  bool help_ = false;
  std::map<std::string, Value> values_;  // by the option's name (not its alias)
  std::map<std::string, std::vector<std::string>> repeated_;  // repeatable options' values
  std::vector<std::string> positional_;
};

// "--flag expects an integer from lo to hi, got "v"." unless `v` is one.
int64_t parse_integer(const std::string& flag, const std::string& v, int64_t lo, int64_t hi);

}  // namespace hs::cli
