// headscope-cli run: every activation of one run, written to JSON or NPZ.
#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/io/export.h"
#include "core/model/intervention.h"

namespace hs::cli {
namespace {

int run(const Args& a) {
  if (a.has("--text") == a.has("--tokens")) throw UsageError("run needs exactly one of --text TEXT or --tokens 1,2,3.");
  const std::string out = a.text("-o");
  output_extension(out, {".json", ".npz"});
  hs::Interventions ablations;
  if (a.has("--ablate")) {
    try {
      ablations = hs::parse_head_ablations(a.text("--ablate"));
    } catch (const hs::Error& e) {
      throw UsageError(e.what());
    }
  }
  const auto m = load_model(a);
  const hs::TextRun r = run_input(a, m, ablations);
  hs::export_cache(*r.cache, out);
  return 0;
}

}  // namespace

const CommandSpec& run_command() {
  static const CommandSpec c{
      .name = "run",
      .summary = "run the model and write every activation of the cache to JSON or NPZ",
      .synopsis = {"[--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] [--ablate 3.2,1.0:mean]",
                   "-o OUT.json|OUT.npz"},
      .help = R"(Usage: headscope-cli run [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] [--ablate HEADS] -o OUT

Runs the model and writes every activation of the cache (TransformerLens names, no batch
dimension) plus "tokens" to OUT. OUT ending in .json: one object of nested arrays, masked
attention scores as null. OUT ending in .npz: float32 arrays for numpy.load. --text prepends BOS
unless --no-bos; --tokens is used exactly as given. A text longer than the model's context is
refused. The file is written atomically: on any error, no file is left.
)",
      .options = {model_option(), text_option("the prompt to run"), tokens_option(), no_bos_option(),
                  {.name = "--ablate",
                   .metavar = "HEADS",
                   .help = "run with these heads ablated and write that run (the same keys): LAYER.HEAD items "
                           "separated by commas, each :zero (the default: hook_z set to 0) or :mean (hook_z set "
                           "to its mean over the prompt's positions), e.g. 3.2,1.0:mean"},
                  threads_option("threads for the forward pass (default: all cores)"),
                  output_option(".json or .npz", "run needs -o OUT.json or -o OUT.npz.")},
      .run = run,
  };
  return c;
}

}  // namespace hs::cli
