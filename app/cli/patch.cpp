// headscope-cli patch: an activation-patching sweep between a clean and a corrupted prompt.
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/patching.h"
#include "core/analysis/patching_checks.h"
#include "core/io/export.h"
#include "core/model/intervention.h"

namespace hs::cli {
namespace {

using nlohmann::json;

int patch(const Args& a) {
  if (!a.has("--clean") || !a.has("--corrupt") || !a.has("--answer") || !a.has("--wrong") || !a.has("--what"))
    throw UsageError("patch needs --clean TEXT, --corrupt TEXT, --answer TEXT, --wrong TEXT and "
                     "--what resid_pre|attn_out|mlp_out|z.");
  const std::string out = a.text("-o");
  if (std::filesystem::path(out).extension() != ".json")
    throw UsageError("-o " + out + ": the output of patch must end in .json.");
  hs::HookPoint what{};
  try {
    what = hs::parse_hook_point(a.text("--what"));
  } catch (const hs::Error& e) {
    throw UsageError(std::string("--what: ") + e.what());
  }
  const auto m = load_model(a);
  const hs::PatchingInputs in = hs::patching_inputs(*m, a.text("--clean"), a.text("--corrupt"), a.text("--answer"),
                                                    a.text("--wrong"), !a.flag("--no-bos"));
  hs::RunOptions o;
  o.threads = threads(a);
  const hs::TextRun clean = hs::run_tokens(m, in.clean, o);
  const hs::TextRun corrupt = hs::run_tokens(m, in.corrupt, o);
  print_run_warnings(clean, *m);
  print_run_warnings(corrupt, *m);
  hs::SweepControl control;
  control.threads = threads(a);
  const hs::PatchingResult p = hs::patching_sweep(*clean.cache, *corrupt.cache, in.answer, in.wrong, what, control);
  // Said beside the result, not refused: a pair the model does not solve still patches.
  const std::vector<std::string> warnings = hs::patching_warnings(*clean.cache, p.metric_clean, p.metric_corrupt);
  for (const std::string& w : warnings) std::cerr << "headscope-cli: warning: " << w << "\n";
  const json j = {{"what", std::string(hs::hook_short_name(what))},
                  {"metric_clean", p.metric_clean},
                  {"metric_corrupt", p.metric_corrupt},
                  {"warnings", warnings},
                  {"raw", matrix_json(p.raw)},
                  {"normalized", matrix_json(p.normalized)},
                  {"clean_tokens", in.clean},
                  {"corrupt_tokens", in.corrupt},
                  {"answer_id", in.answer},
                  {"wrong_id", in.wrong},
                  {"labels", clean.token_labels}};
  hs::write_file_atomically(out, j.dump() + "\n");
  return 0;
}

}  // namespace

const CommandSpec& patch_command() {
  static const CommandSpec c{
      .name = "patch",
      .summary = "activation patching: which layer and position (or head) restores the clean answer",
      .synopsis = {"[--model DIR] --clean TEXT --corrupt TEXT --answer TEXT --wrong TEXT",
                   "--what resid_pre|attn_out|mlp_out|z -o OUT.json"},
      .help = R"(Usage: headscope-cli patch [--model DIR] --clean TEXT --corrupt TEXT --answer TEXT --wrong TEXT
                           --what resid_pre|attn_out|mlp_out|z [--no-bos] -o OUT.json

Activation patching: runs both prompts, then, for every layer and position (every layer and head
for z), the corrupted prompt with that one activation copied from the clean run: the residual
stream entering the layer (resid_pre), the attention or MLP block's output (attn_out, mlp_out)
at one position, or one head's z at every position. Each patched run is scored by
m = logit(answer) - logit(wrong) at the last position. Writes one JSON object: "metric_clean",
"metric_corrupt", "raw" ([n_layers][pos], or [n_layers][n_heads] for z: m of each patched run)
"warnings" (sentences, also printed: the clean run does not prefer the answer, or the metric gap
is small next to the logits' spread, so the normalized colours magnify noise)
and "normalized" ((m - metric_corrupt) / (metric_clean - metric_corrupt): 1 where the patch
restores the clean answer, 0 where it changes nothing), plus "what", "clean_tokens",
"corrupt_tokens", "answer_id", "wrong_id" and "labels" (the clean prompt's tokens).
The prompts must have the same number of tokens (BOS is prepended to both unless --no-bos);
--answer and --wrong must each be exactly one token (often with a leading space: " Paris").
)",
      .options = {model_option(),
                  {.name = "--clean", .metavar = "TEXT", .help = "the prompt whose activations are copied in"},
                  {.name = "--corrupt", .metavar = "TEXT", .help = "the prompt that is run with them"},
                  {.name = "--answer", .metavar = "TEXT", .help = "the clean prompt's answer: one token"},
                  {.name = "--wrong", .metavar = "TEXT", .help = "the corrupted prompt's answer: one token"},
                  {.name = "--what", .metavar = "WHAT", .help = "the activation to patch: resid_pre, attn_out, mlp_out or z"},
                  {.name = "--no-bos", .kind = ValueKind::Flag, .help = "do not prepend BOS to the prompts"},
                  threads_option("threads (default: all cores)"),
                  output_option(".json", "patch needs -o OUT.json.")},
      .run = patch,
  };
  return c;
}

}  // namespace hs::cli
