#include "app/cli/options.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "app/cli/commands.h"

namespace hs::cli {

int64_t parse_integer(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < lo || x > hi)
    throw UsageError(flag + " expects an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                     ", got \"" + v + "\".");
  return x;
}

namespace {

// The names a command takes, for the unknown-option message: "--model, --text, -o".
std::string option_names(const CommandSpec& c) {
  std::string out;
  for (const OptionSpec& o : c.options) out += (out.empty() ? "" : ", ") + o.name;
  if (!c.positional.empty()) out += (out.empty() ? "" : " and ") + c.positional;
  return out;
}

const OptionSpec* find_option(const CommandSpec& c, const std::string& word) {
  for (const OptionSpec& o : c.options)
    if (word == o.name || (!o.alias.empty() && word == o.alias)) return &o;
  return nullptr;
}

}  // namespace

Args::Args(const CommandSpec& command, int argc, char** argv) : command_(&command) {
  const std::string see = "see `headscope-cli " + command.name + " --help`.";
  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--help" || word == "-h") {
      help_ = true;
      continue;
    }
    const OptionSpec* o = find_option(command, word);
    if (!o) {
      if (!command.positional.empty() && !word.empty() && word[0] != '-') {
        positional_.push_back(word);
        continue;
      }
      throw UsageError("unknown option \"" + word + "\" for `" + command.name + "`, which takes " +
                       option_names(command) + "; " + see);
    }
    if (values_.count(o->name) && !o->repeatable)
      throw UsageError(word + " was given twice; give it once; " + see);
    if (o->kind == ValueKind::Flag) {
      values_[o->name] = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError(word + " needs a value; " + see);
    const std::string v = argv[++i];
    switch (o->kind) {
      case ValueKind::Integer: values_[o->name] = parse_integer(word, v, o->min, o->max); break;
      case ValueKind::Number: {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end != v.c_str() + v.size() || !(x >= static_cast<double>(o->min)) || !std::isfinite(x))
          throw UsageError(word + " expects a number >= " + std::to_string(o->min) + ", got \"" + v + "\".");
        values_[o->name] = x;
        break;
      }
      default:
        values_[o->name] = v;
        if (o->repeatable) repeated_[o->name].push_back(v);
        break;
    }
  }
}

const OptionSpec& Args::spec(const std::string& name) const {
  for (const OptionSpec& o : command_->options)
    if (o.name == name) return o;
  throw std::logic_error("headscope-cli " + command_->name + " declares no option " + name);
}

Args::Value Args::value_or_default(const std::string& name) const {
  const OptionSpec& o = spec(name);
  if (const auto it = values_.find(name); it != values_.end()) return it->second;
  if (o.required)
    throw UsageError(!o.missing.empty() ? o.missing : command_->name + " needs " + o.name + " " + o.metavar + ".");
  if (o.kind == ValueKind::Flag) return false;
  if (o.default_value.empty()) throw std::logic_error("headscope-cli " + command_->name + ": " + name + " has no default");
  switch (o.kind) {
    case ValueKind::Integer: return parse_integer(name, o.default_value, INT64_MIN, INT64_MAX);
    case ValueKind::Number: return std::strtod(o.default_value.c_str(), nullptr);
    default: return o.default_value;
  }
}

bool Args::has(const std::string& name) const {
  (void)spec(name);
  return values_.count(name) > 0;
}

bool Args::flag(const std::string& name) const { return std::get<bool>(value_or_default(name)); }

std::string Args::text(const std::string& name) const { return std::get<std::string>(value_or_default(name)); }

std::optional<std::string> Args::optional_text(const std::string& name) const {
  if (!has(name) && spec(name).default_value.empty()) return std::nullopt;
  return text(name);
}

int64_t Args::integer(const std::string& name) const { return std::get<int64_t>(value_or_default(name)); }

std::vector<std::string> Args::texts(const std::string& name) const {
  (void)spec(name);
  const auto it = repeated_.find(name);
  return it == repeated_.end() ? std::vector<std::string>() : it->second;
}

double Args::number(const std::string& name) const { return std::get<double>(value_or_default(name)); }

}  // namespace hs::cli
