// headscope-cli merge: the shards of `scan --shard I/N` combined into one scan's output.
#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/scan.h"
#include "core/io/scan_io.h"
#include "core/model/model.h"

#include <iostream>

namespace hs::cli {
namespace {

int merge(const Args& a) {
  const std::string out = a.text("-o");
  output_extension(out, {".json", ".npz"});
  if (a.positional().empty())
    throw UsageError("merge needs the shard outputs to combine: merge -o OUT.json SHARD0.json SHARD1.json ...");
  std::vector<hs::ScanState> shards;
  std::vector<std::string> sources;
  for (const std::string& f : a.positional()) {
    const std::filesystem::path p = hs::scan_json_path(f);
    shards.push_back(hs::read_scan_output(p));
    sources.push_back(p.string());
  }
  const hs::ScanState merged = hs::merge_scans(shards, sources);
  hs::write_scan_output(merged, out);
  if (!merged.units.empty()) {
    // The dashboards need the model (logit effects, token text) and the units' source: the model
    // of --model (default: the built-in one) must be the scan's, and --units gives the source
    // again when the shards' path to it does not hold here.
    const auto m = load_model(a);
    if (m->fingerprint() != merged.settings.at("model").value("fingerprint", std::string()))
      throw hs::Error("the shards were made with another model than " + m->name() +
                      " (the fingerprints differ); give the scan's model with --model DIR to write the dashboards.");
    const std::string spec = a.has("--units") ? a.text("--units")
                                              : merged.settings.at("paths").at("units").get<std::string>();
    const hs::UnitSource source = hs::resolve_unit_source(*m, spec);
    hs::require_same_settings(merged.settings.at("units"), [&] {
      nlohmann::json u = source.identity();
      u["samples"] = merged.units.sample_capacity();
      u["window"] = merged.units.window();
      return u;
    }(), "--units " + spec);
    const std::filesystem::path folder = hs::unit_dashboards_folder(out);
    hs::write_unit_dashboards(*m, source, merged.units, merged.settings, folder);
    std::cerr << "headscope-cli merge: dashboards of " << merged.units.n_units() << " units in " << folder.string() << "\n";
  }
  return 0;
}

}  // namespace

const CommandSpec& merge_command() {
  static const CommandSpec c{
      .name = "merge",
      .summary = "combine the shards of `scan --shard I/N` into one scan's output",
      .synopsis = {"[--model DIR] [--units SOURCE] -o OUT.json|OUT.npz SHARD.json..."},
      .help = R"(Usage: headscope-cli merge -o OUT.json|OUT.npz SHARD.json...

Combines the outputs of `headscope-cli scan --shard I/N` (every I from 0 to N-1, each complete,
all with the same model, input and options) into the output one process would have written:
counts added, means and variances merged exactly (Chan et al.), bad lines added. For shards
written as .npz, give their .npz or .npz.json files. Shards of `scan --units` also give
OUT.units/, the unit dashboards (docs/scan.md, "Unit dashboards"), made with --model (the scan's).
)",
      .options = {model_option(),
                  {.name = "--units",
                   .metavar = "SOURCE",
                   .help = "with shards of `scan --units`: the units' source (default: as the shards name it), for "
                           "the dashboards written to OUT.units/"},
                  output_option(".json or .npz", "merge needs -o OUT.json (or OUT.npz).")},
      .positional = "SHARD.json...",
      .run = merge,
  };
  return c;
}

}  // namespace hs::cli
