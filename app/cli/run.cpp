// headscope-cli run: every activation of one run, written to JSON or NPZ.
#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/features/features.h"
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
  // SAEs spliced at their hooks, after the edits (a TransformerLens hook added later runs later).
  std::vector<std::shared_ptr<const hs::Sae>> saes;
  for (const std::string& folder : a.texts("--sae")) {
    const hs::SaeSet set = hs::load_sae_folder(folder);
    for (const hs::Sae& sae : set.saes) saes.push_back(std::make_shared<const hs::Sae>(sae));
  }
  if ((a.has("--sae-edit") || a.flag("--sae-replace")) && saes.empty())
    throw UsageError("--sae-edit and --sae-replace need an SAE spliced with --sae DIR.");
  std::vector<hs::SpliceOptions> splices(saes.size());
  for (hs::SpliceOptions& o : splices) o.error_term = !a.flag("--sae-replace");
  if (a.has("--sae-edit")) {
    // Items [N/]LATENT:OP[@POS]: N is the spliced SAE (0 by default), in the order given.
    const std::string spec = a.text("--sae-edit");
    size_t start = 0;
    while (start <= spec.size()) {
      const size_t comma = std::min(spec.find(',', start), spec.size());
      std::string item = spec.substr(start, comma - start);
      start = comma + 1;
      size_t which = 0;
      if (const size_t slash = item.find('/'); slash != std::string::npos) {
        which = static_cast<size_t>(parse_integer("--sae-edit", item.substr(0, slash), 0,
                                                  static_cast<int64_t>(saes.size()) - 1));
        item = item.substr(slash + 1);
      }
      try {
        for (const hs::LatentEdit& e : hs::parse_latent_edits(item)) splices[which].edits.push_back(e);
      } catch (const hs::Error& e) {
        throw UsageError(e.what());
      }
    }
  }
  for (size_t i = 0; i < saes.size(); ++i)
    for (hs::Intervention& e : hs::splice_sae(saes[i], *m->weights(), splices[i])) ablations.push_back(std::move(e));
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
                   "[--edit HOOK:LAYER.UNIT:zero|mean[@POS],...] [--steer HOOK:VEC.npy:SCALE[@POS]]",
                   "[--sae SAEDIR]... [--sae-edit [N/]LATENT:zero|xS|+S[@POS],...] [--sae-replace] -o OUT.json|OUT.npz"},
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

--sae SAEDIR (repeatable) splices an SAE or transcoder at its hook, as SAELens's
HookedSAETransformer does with use_error_term: the activation becomes the SAE's output plus its
error, so the run is unchanged until a latent is edited (a transcoder set: every layer). --sae-edit
edits latents: comma-separated [N/]LATENT:OP[@POS] items, N the spliced SAE (0, the first, by
default; a set counts one per layer), OP zero, xS (scale by S) or +S (steer: add S times the
latent's decoder row at the output hook): 12:zero,40:x2.5,1/7:+3@4. --sae-replace drops the
error term: each SAE's output replaces its hook's activation (the run whose loss measures what the
SAEs miss).
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
                  {.name = "--sae",
                   .metavar = "SAEDIR",
                   .help = "splice an SAE or transcoder folder at its hook, with its error term (repeatable)",
                   .repeatable = true},
                  {.name = "--sae-edit",
                   .metavar = "EDITS",
                   .help = "edit spliced latents: [N/]LATENT:zero|xS|+S[@POS] items, e.g. 12:zero,1/7:+3@4"},
                  {.name = "--sae-replace", .kind = ValueKind::Flag, .help = "splice without error terms: the SAEs' outputs replace their hooks"},
                  threads_option("threads for the forward pass (default: all cores)"),
                  output_option(".json or .npz", "run needs -o OUT.json or -o OUT.npz.")},
      .run = run,
  };
  return c;
}

}  // namespace hs::cli
