// headscope-cli patch: an activation-patching sweep between a clean and a corrupted prompt, exact
// or estimated by attribution patching (AtP, AtP*'s QK fix).
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/attribution_patching.h"
#include "core/analysis/patching.h"
#include "core/analysis/patching_checks.h"
#include "core/io/export.h"
#include "core/model/intervention.h"

namespace hs::cli {
namespace {

using nlohmann::json;

// A [rows][cols] matrix as nested arrays; with `inner` > 0, [rows / inner][inner][cols] (z_pos:
// rows are layer * n_heads + head).
json nested(const hs::RowMatrixXf& x, Eigen::Index inner = 0) {
  auto row = [&](Eigen::Index r) {
    json out = json::array();
    for (Eigen::Index c = 0; c < x.cols(); ++c) out.push_back(x(r, c));
    return out;
  };
  json out = json::array();
  if (inner <= 0) {
    for (Eigen::Index r = 0; r < x.rows(); ++r) out.push_back(row(r));
    return out;
  }
  for (Eigen::Index r0 = 0; r0 < x.rows(); r0 += inner) {
    json block = json::array();
    for (Eigen::Index r = r0; r < r0 + inner; ++r) block.push_back(row(r));
    out.push_back(std::move(block));
  }
  return out;
}

std::string site_names() {
  std::string names;
  const size_t n = std::size(hs::kAtpSites);
  for (size_t k = 0; k < n; ++k)
    names += (k == 0 ? "" : k + 1 == n ? " or " : ", ") + std::string(hs::to_string(hs::kAtpSites[k]));
  return names;
}

int patch(const Args& a) {
  if (!a.has("--clean") || !a.has("--corrupt") || !a.has("--answer") || !a.has("--wrong") || !a.has("--what"))
    throw UsageError("patch needs --clean TEXT, --corrupt TEXT, --answer TEXT, --wrong TEXT and "
                     "--what " + site_names() + ".");
  const std::string out = a.text("-o");
  if (std::filesystem::path(out).extension() != ".json")
    throw UsageError("-o " + out + ": the output of patch must end in .json.");
  const std::string method_text = a.has("--method") ? a.text("--method") : "exact";
  const std::optional<hs::PatchMethod> method = hs::parse_patch_method(method_text);
  if (!method) throw UsageError("--method: \"" + method_text + "\" is not a patching method; use exact, atp or atp_qk.");
  const std::string what_text = a.text("--what");
  const std::optional<hs::AtpSite> what = hs::parse_atp_site(what_text);
  if (!what)
    throw UsageError("--what: \"" + what_text + "\" is not an activation to patch; use " + site_names() + ".");
  const std::optional<hs::HookPoint> exact_site = hs::exact_sweep_site(*what);
  if (*method == hs::PatchMethod::Exact && !exact_site)
    throw UsageError("--what " + what_text + ": the exact sweep patches resid_pre, attn_out, mlp_out or z; z_pos and "
                     "mlp_post are estimated by --method atp or atp_qk.");
  const auto m = load_model(a);
  const hs::PatchingInputs in = hs::patching_inputs(*m, a.text("--clean"), a.text("--corrupt"), a.text("--answer"),
                                                    a.text("--wrong"), !a.flag("--no-bos"));
  hs::RunOptions o;
  o.threads = threads(a);
  const hs::TextRun clean = hs::run_tokens(m, in.clean, o);
  const hs::TextRun corrupt = hs::run_tokens(m, in.corrupt, o);
  print_run_warnings(clean, *m);
  print_run_warnings(corrupt, *m);
  float metric_clean = 0.0f, metric_corrupt = 0.0f;
  json raw, normalized;
  if (*method == hs::PatchMethod::Exact) {
    hs::SweepControl control;
    control.threads = threads(a);
    const hs::PatchingResult p =
        hs::patching_sweep(*clean.cache, *corrupt.cache, in.answer, in.wrong, *exact_site, control);
    metric_clean = p.metric_clean;
    metric_corrupt = p.metric_corrupt;
    raw = nested(p.raw);
    normalized = nested(p.normalized);
  } else {
    const hs::AtpSite sites[] = {*what};
    const hs::GradientCache g = hs::atp_gradients(*corrupt.cache, in.answer, in.wrong, sites, *method, threads(a));
    const hs::AtpResult p = hs::attribution_patching(*clean.cache, *corrupt.cache, g, *what, *method);
    metric_clean = p.metric_clean;
    metric_corrupt = p.metric_corrupt;
    const Eigen::Index inner = *what == hs::AtpSite::ZPos ? m->config().n_heads : 0;
    raw = nested(p.raw, inner);
    normalized = nested(p.normalized, inner);
  }
  // Said beside the result, not refused: a pair the model does not solve still patches.
  const std::vector<std::string> warnings = hs::patching_warnings(*clean.cache, metric_clean, metric_corrupt);
  for (const std::string& w : warnings) std::cerr << "headscope-cli: warning: " << w << "\n";
  const json j = {{"what", std::string(hs::to_string(*what))},
                  {"method", std::string(hs::to_string(*method))},
                  {"metric_clean", metric_clean},
                  {"metric_corrupt", metric_corrupt},
                  {"warnings", warnings},
                  {"raw", std::move(raw)},
                  {"normalized", std::move(normalized)},
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
      .summary = "activation patching: which layer and position (or head) restores the clean answer; exact or by AtP",
      .synopsis = {"[--model DIR] --clean TEXT --corrupt TEXT --answer TEXT --wrong TEXT",
                   "--what resid_pre|attn_out|mlp_out|z|z_pos|mlp_post [--method exact|atp|atp_qk] -o OUT.json"},
      .help = R"(Usage: headscope-cli patch [--model DIR] --clean TEXT --corrupt TEXT --answer TEXT --wrong TEXT
                           --what resid_pre|attn_out|mlp_out|z|z_pos|mlp_post
                           [--method exact|atp|atp_qk] [--no-bos] -o OUT.json

Activation patching: runs both prompts, then, for every layer and position (every layer and head
for z), the corrupted prompt with that one activation copied from the clean run: the residual
stream entering the layer (resid_pre), the attention or MLP block's output (attn_out, mlp_out)
at one position, or one head's z at every position. Each patched run is scored by
m = logit(answer) - logit(wrong) at the last position. Writes one JSON object: "metric_clean",
"metric_corrupt", "raw" ([n_layers][pos], or [n_layers][n_heads] for z: m of each patched run)
"warnings" (sentences, also printed: the clean run does not prefer the answer, or the metric gap
is small next to the logits' spread, so the normalized colours magnify noise)
and "normalized" ((m - metric_corrupt) / (metric_clean - metric_corrupt): 1 where the patch
restores the clean answer, 0 where it changes nothing), plus "what", "method", "clean_tokens",
"corrupt_tokens", "answer_id", "wrong_id" and "labels" (the clean prompt's tokens).

--method exact (the default) runs every patched cell. --method atp estimates every cell at once
by attribution patching, from one backward pass on the corrupted prompt:
  raw = metric_corrupt + (a_clean - a_corrupt) . dm/da   (the gradient on the corrupted run)
and can also estimate two finer sites the exact sweep does not run: z_pos (one head at one
position: raw is [n_layers][n_heads][pos]) and mlp_post (one MLP neuron at every position:
[n_layers][d_mlp]). --method atp_qk is AtP*'s QK fix: for z and z_pos the patched head's attention
pattern is recomputed exactly with the clean queries, and separately the clean keys, and only its
change is taken linearly (a saturated softmax has a near-zero gradient but can still flip); the
other sites are plain AtP. The estimates are linear: large activations such as resid_pre are
where they are least accurate (docs/attribution.md shows an example).
The prompts must have the same number of tokens (BOS is prepended to both unless --no-bos);
--answer and --wrong must each be exactly one token (often with a leading space: " Paris").
)",
      .options = {model_option(),
                  {.name = "--clean", .metavar = "TEXT", .help = "the prompt whose activations are copied in"},
                  {.name = "--corrupt", .metavar = "TEXT", .help = "the prompt that is run with them"},
                  {.name = "--answer", .metavar = "TEXT", .help = "the clean prompt's answer: one token"},
                  {.name = "--wrong", .metavar = "TEXT", .help = "the corrupted prompt's answer: one token"},
                  {.name = "--what", .metavar = "WHAT",
                   .help = "the activation to patch: resid_pre, attn_out, mlp_out, z, z_pos or mlp_post (the last two: atp, atp_qk)"},
                  {.name = "--method", .metavar = "METHOD", .help = "exact (default), atp or atp_qk (estimates by attribution patching)"},
                  {.name = "--no-bos", .kind = ValueKind::Flag, .help = "do not prepend BOS to the prompts"},
                  threads_option("threads (default: all cores)"),
                  output_option(".json", "patch needs -o OUT.json.")},
      .run = patch,
  };
  return c;
}

}  // namespace hs::cli
