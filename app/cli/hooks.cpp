// headscope-cli hooks: the hook points of the cache contract (core/model/hooks.h), with a model's
// shapes, and which of them `run --edit` and `--steer` can edit.
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/io/export.h"
#include "core/model/hooks.h"

namespace hs::cli {
namespace {

int hooks(const Args& a) {
  // Without --model the hooks are listed for the built-in model, as every command reads it.
  const auto m = load_model(a);
  if (a.has("-o")) {
    const std::string out = a.text("-o");
    output_extension(out, {".json"});
    nlohmann::json j = {{"model", m->name()}, {"hooks", hs::hook_listing_json(&m->config())}};
    hs::write_file_atomically(out, j.dump(1) + "\n");
    return 0;
  }
  std::cout << hs::hook_listing_text(&m->config());
  return 0;
}

}  // namespace

const CommandSpec& hooks_command() {
  static const CommandSpec c{
      .name = "hooks",
      .summary = "list the hook points of the activation cache: name, shape, stored or derived, editable",
      .synopsis = {"[--model DIR] [-o OUT.json]"},
      .help = R"(Usage: headscope-cli hooks [--model DIR] [-o OUT.json]

Lists every hook point of the activation cache (TransformerLens names; per-layer ones once, as
blocks.{l}.NAME) with its short name, its shape with the model's sizes (pos symbolic), whether the
model has it, whether a run stores it or derives it on request, and whether `run --edit` and
`--steer` can edit it and by what unit (the whole row, a head, a key/value head, a neuron).
Printed as a table; with -o, written as JSON ("model", "hooks": one object per hook).
)",
      .options = {model_option(),
                  {.name = "-o",
                   .metavar = "OUT.json",
                   .help = "write the listing as JSON instead of printing it",
                   .alias = "--output"}},
      .run = hooks,
  };
  return c;
}

}  // namespace hs::cli
