// headscope-cli merge: the shards of `scan --shard I/N` combined into one scan's output.
#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/scan.h"
#include "core/io/scan_io.h"

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
  hs::write_scan_output(hs::merge_scans(shards, sources), out);
  return 0;
}

}  // namespace

const CommandSpec& merge_command() {
  static const CommandSpec c{
      .name = "merge",
      .summary = "combine the shards of `scan --shard I/N` into one scan's output",
      .synopsis = {"-o OUT.json|OUT.npz SHARD.json..."},
      .help = R"(Usage: headscope-cli merge -o OUT.json|OUT.npz SHARD.json...

Combines the outputs of `headscope-cli scan --shard I/N` (every I from 0 to N-1, each complete,
all with the same model, input and options) into the output one process would have written:
counts added, means and variances merged exactly (Chan et al.), bad lines added. For shards
written as .npz, give their .npz or .npz.json files.
)",
      .options = {output_option(".json or .npz", "merge needs -o OUT.json (or OUT.npz).")},
      .positional = "SHARD.json...",
      .run = merge,
  };
  return c;
}

}  // namespace hs::cli
