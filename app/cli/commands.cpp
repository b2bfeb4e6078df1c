#include "app/cli/commands.h"

#include <algorithm>

#include "core/model/architecture.h"

namespace hs::cli {

// The table: one declaration and one entry per command (each defined in app/cli/NAME.cpp).
const CommandSpec& info_command();
const CommandSpec& tokenize_command();
const CommandSpec& run_command();
const CommandSpec& patch_command();
const CommandSpec& grad_command();
const CommandSpec& attribute_command();
const CommandSpec& heads_command();
const CommandSpec& generate_command();
const CommandSpec& lens_command();
const CommandSpec& circuits_command();
const CommandSpec& scan_command();
const CommandSpec& merge_command();
const CommandSpec& hooks_command();
const CommandSpec& features_command();
const CommandSpec& graph_command();
const CommandSpec& routes_command();
const CommandSpec& qk_command();

const std::vector<const CommandSpec*>& commands() {
  static const std::vector<const CommandSpec*> table = {
      &info_command(),     &tokenize_command(), &run_command(),      &patch_command(), &grad_command(),
      &attribute_command(), &heads_command(),   &generate_command(), &lens_command(),  &circuits_command(),
      &scan_command(),      &merge_command(),   &hooks_command(),  &features_command(), &graph_command(),
      &routes_command(),
      &qk_command(),
  };
  return table;
}

const CommandSpec* find_command(const std::string& name) {
  for (const CommandSpec* c : commands())
    if (c->name == name) return c;
  return nullptr;
}

std::string command_names_text() {
  std::string out;
  for (const CommandSpec* c : commands()) out += (out.empty() ? "" : ", ") + c->name;
  return out;
}

namespace {

constexpr size_t kWidth = 100;  // help text is wrapped to this many columns

// `text` wrapped to kWidth columns, its first line starting at column `column` (already
// written by the caller), later lines indented to it.
std::string wrapped(const std::string& text, size_t column) {
  std::string out;
  size_t at = column;
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = std::min(text.find(' ', i), text.size());
    const std::string word = text.substr(i, j - i);
    if (at > column && at + 1 + word.size() > kWidth) {
      out += "\n" + std::string(column, ' ');
      at = column;
    } else if (at > column) {
      out += ' ';
      ++at;
    }
    out += word;
    at += word.size();
    i = j + 1;
  }
  return out;
}

size_t name_width() {
  size_t w = 0;
  for (const CommandSpec* c : commands()) w = std::max(w, c->name.size());
  return w;
}

}  // namespace

std::string main_help() {
  const size_t w = name_width();
  std::string out = "headscope-cli - look inside transformers (" + hs::supported_families_text() +
                    ") from the command line\n\nUsage:\n";
  for (const CommandSpec* c : commands())
    for (size_t i = 0; i < c->synopsis.size(); ++i) {
      const std::string lead = i == 0 ? "  headscope-cli " + c->name + std::string(w - c->name.size(), ' ')
                                      : std::string(2 + 14 + w, ' ');
      out += lead + " " + c->synopsis[i] + "\n";
    }
  out += "  headscope-cli --version | --help\n\nCommands:\n";
  for (const CommandSpec* c : commands())
    out += "  " + c->name + std::string(w + 2 - c->name.size(), ' ') + c->summary + "\n";
  out += "\nWithout --model, the built-in model is used. Run `headscope-cli COMMAND --help` for details.\n";
  return out;
}

std::string command_help(const CommandSpec& c) {
  std::string out = c.help;
  if (!c.options.empty()) {
    std::vector<std::string> heads;
    size_t w = 0;
    for (const OptionSpec& o : c.options) {
      std::string h = o.alias.empty() ? o.name : o.name + ", " + o.alias;
      if (!o.metavar.empty()) h += " " + o.metavar;
      w = std::max(w, h.size());
      heads.push_back(std::move(h));
    }
    out += "\nOptions:\n";
    for (size_t i = 0; i < c.options.size(); ++i) {
      const std::string lead = "  " + heads[i] + std::string(w + 2 - heads[i].size(), ' ');
      out += lead + wrapped(c.options[i].help, lead.size()) + "\n";
    }
  }
  if (!c.notes.empty()) out += "\n" + c.notes;
  return out;
}

}  // namespace hs::cli
