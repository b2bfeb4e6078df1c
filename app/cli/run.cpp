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
  // Edits at any editable hook (`headscope-cli hooks` lists them), applied after the ablations.
  try {
    if (a.has("--edit"))
      for (hs::Intervention& e : hs::parse_edits(a.text("--edit"))) ablations.push_back(std::move(e));
    if (a.has("--steer")) ablations.push_back(hs::parse_steer(a.text("--steer"), m->config()));
  } catch (const hs::Error& e) {
    throw UsageError(e.what());
  }
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
                   "[--edit HOOK:LAYER.UNIT:zero|mean[@POS],...] [--steer HOOK:VEC.npy:SCALE[@POS]] -o OUT.json|OUT.npz"},
      .help = R"(Usage: headscope-cli run [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] [--ablate HEADS] [--edit EDITS] [--steer STEER] -o OUT

Runs the model and writes every activation of the cache (TransformerLens names, no batch
dimension) plus "tokens" to OUT. OUT ending in .json: one object of nested arrays, masked
attention scores as null. OUT ending in .npz: float32 arrays for numpy.load. --text prepends BOS
unless --no-bos; --tokens is used exactly as given. A text longer than the model's context is
refused. The file is written atomically: on any error, no file is left.

--edit and --steer edit the run where a hook sits (as a TransformerLens forward hook), and every
key downstream follows; the edited key holds the edited value. `headscope-cli hooks` lists the
editable hooks and their units. --edit takes comma-separated HOOK[:LAYER[.UNIT]]:zero|mean[@POS]
items: attn.hook_z:3.2:zero@5 (head 2 of layer 3 at position 5), mlp.hook_post:1.17:zero (neuron
17 of layer 1), hook_resid_pre:2:mean (the stream entering layer 2, set to its mean over
positions), embed:zero@0. --steer HOOK[:LAYER[.UNIT]]:VEC.npy:SCALE[@POS] adds SCALE times the
float32 vector in VEC.npy (numpy.save; as wide as the unit or the row) at every position or one:
blocks.6.hook_resid_pre:vec.npy:4.0.
)",
      .options = {model_option(), text_option("the prompt to run"), tokens_option(), no_bos_option(),
                  {.name = "--ablate",
                   .metavar = "HEADS",
                   .help = "run with these heads ablated and write that run (the same keys): LAYER.HEAD items "
                           "separated by commas, each :zero (the default: hook_z set to 0) or :mean (hook_z set "
                           "to its mean over the prompt's positions), e.g. 3.2,1.0:mean"},
                  {.name = "--edit",
                   .metavar = "EDITS",
                   .help = "zero or mean edits at any editable hook, comma-separated: HOOK[:LAYER[.UNIT]]:zero|mean[@POS], "
                           "e.g. attn.hook_z:3.2:zero@5,mlp.hook_post:1.17:zero"},
                  {.name = "--steer",
                   .metavar = "STEER",
                   .help = "add a vector at a hook: HOOK[:LAYER[.UNIT]]:VEC.npy:SCALE[@POS], e.g. "
                           "blocks.6.hook_resid_pre:vec.npy:4.0"},
                  threads_option("threads for the forward pass (default: all cores)"),
                  output_option(".json or .npz", "run needs -o OUT.json or -o OUT.npz.")},
      .run = run,
  };
  return c;
}

}  // namespace hs::cli
