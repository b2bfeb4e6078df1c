// headscope-cli features: an SAE's or transcoder's latents on one run.
#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/features/features.h"
#include "core/io/export.h"

namespace hs::cli {
namespace {

int features(const Args& a) {
  if (a.has("--text") == a.has("--tokens"))
    throw UsageError("features needs exactly one of --text TEXT or --tokens 1,2,3.");
  const std::string out = a.text("-o");
  output_extension(out, {".npz"});
  const auto m = load_model(a);
  const std::string folder = a.text("--sae");
  const std::shared_ptr<const hs::Sae> sae =
      hs::sae_at_layer(hs::load_sae_folder(folder), a.has("--layer") ? static_cast<int>(a.integer("--layer")) : -1);
  hs::check_sae_fits(*sae, m->config());
  const hs::TextRun r = run_input(a, m);
  const hs::SaeRun run = hs::run_sae(*r.cache, *sae);
  const hs::SaeQuality q = hs::sae_quality(*r.cache, *sae, run, threads(a));
  const std::vector<int32_t>& tokens = r.tokens;
  const auto rows = static_cast<int64_t>(tokens.size());
  const double scalars[] = {q.mse, q.explained_variance, q.l0, q.loss_clean, q.loss_spliced};
  const int32_t layer = sae->layer;
  std::vector<hs::NpzArrayView> arrays = {
      {"tokens", {rows}, tokens.data(), hs::NpyType::I32},
      {"sae_in", {rows, sae->d_in}, run.sae_in.data()},
      {"feature_acts", {rows, sae->d_sae}, run.feature_acts.data()},
      {"sae_out", {rows, sae->d_out}, run.sae_out.data()},
      {"layer", {1}, &layer, hs::NpyType::I32},
      {"mse", {1}, &scalars[0], hs::NpyType::F64},
      {"explained_variance", {1}, &scalars[1], hs::NpyType::F64},
      {"l0", {1}, &scalars[2], hs::NpyType::F64},
      {"loss_clean", {1}, &scalars[3], hs::NpyType::F64},
      {"loss_spliced", {1}, &scalars[4], hs::NpyType::F64},
  };
  hs::write_atomically(out, [&](std::ostream& s) { hs::write_npz(s, arrays); });
  return 0;
}

}  // namespace

const CommandSpec& features_command() {
  static const CommandSpec c{
      .name = "features",
      .summary = "an SAE's or transcoder's latents on one run, with its reconstruction quality",
      .synopsis = {"[--model DIR] --sae SAEDIR [--layer L] (--text TEXT | --tokens 1,2,3) [--no-bos] -o OUT.npz"},
      .help = R"(Usage: headscope-cli features [--model DIR] --sae SAEDIR [--layer L] (--text TEXT | --tokens 1,2,3)
                              [--no-bos] -o OUT.npz

Runs the model once and encodes the activation an SAE or transcoder reads, at every position,
as SAELens or circuit-tracer does. SAEDIR is a SAELens folder (cfg.json + sae_weights.safetensors),
a circuit-tracer transcoder set (config.yaml + layer_{i}.safetensors) or a Gemma Scope params.npz
folder; --layer picks one layer of a set. OUT.npz holds:
  sae_in        float32 [pos, d_in]   the hook activation read, before any normalisation
  feature_acts  float32 [pos, d_sae]  the latents (inactive ones exactly 0)
  sae_out       float32 [pos, d_out]  the decoder's output: the reconstruction, or a
                                      transcoder's prediction of its output hook
  tokens        int32 [pos]; layer int32 [1] (the SAE's block)
  mse, explained_variance, l0         float64 [1], over this prompt's positions, against the
                                      output hook's activation
  loss_clean, loss_spliced            float64 [1], the next-token loss of the plain run and of
                                      the run with the SAE's output in place of its hook (no
                                      error term)
The file is written atomically: on any error, no file is left.
)",
      .options = {model_option(),
                  {.name = "--sae", .metavar = "SAEDIR", .help = "the SAE or transcoder folder", .required = true,
                   .missing = "features needs --sae SAEDIR (a SAELens folder, a circuit-tracer transcoder set or a Gemma Scope folder)."},
                  {.name = "--layer", .metavar = "L", .kind = ValueKind::Integer,
                   .help = "the layer of a transcoder set to encode", .min = 0, .max = 1 << 20},
                  text_option("the prompt to run"), tokens_option(), no_bos_option(),
                  threads_option("threads for the forward passes (default: all cores)"),
                  output_option(".npz", "features needs -o OUT.npz.")},
      .run = features,
  };
  return c;
}

}  // namespace hs::cli
