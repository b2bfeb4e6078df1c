// Sparse autoencoders and transcoders on a run of the model: the rows an SAE reads, its latents
// on a run, splicing it into the forward pass (with or without its error term), editing its
// latents (zero, scale, steer), and the reconstruction quality of one prompt.
//
// Splicing follows SAELens's HookedSAETransformer with use_error_term=True (sae_lens/saes/sae.py,
// SAE.forward): at the hook, the activation x becomes decode(edited latents) + (x - decode(latents)),
// so a run with the SAE spliced and nothing edited is the plain run, every key the same bits (the
// error term cancels exactly: decode(latents) - decode(latents) is 0 in floating point too, and an
// unedited position is not touched at all). Without the error term, x becomes decode(latents): the
// run with the SAE in place of the activation, whose loss measures what the SAE misses.
//
// A transcoder reads one hook and writes another (SAELens's transcoders read
// blocks.L.ln2.hook_normalized and write blocks.L.hook_mlp_out). Spliced, its output replaces the
// output hook's value in the same way, and its input is taken from the same run as it runs: a
// position-local callable at the input's nearest editable hook (ln2.hook_normalized is the block's
// norm of hook_resid_mid; ln1's, and ln2's of a parallel block, of hook_resid_pre) keeps that
// run's rows, with the forward pass's own norm kernel, for the callable at the output.
//
// Steering adds strength x the latent's decoder row at the output hook (Neuronpedia's steering:
// the decoder vector, not passed through the SAE's output normalisation).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/features/sae.h"
#include "core/model/intervention.h"
#include "core/tensor/eigen.h"

namespace hs {

class ActivationCache;
class Weights;

// The rows a hook holds on a run, [pos, width], by TransformerLens name ("blocks.2.hook_resid_pre",
// "blocks.0.attn.hook_z" flattened to [pos, n_heads * d_head]). ln1/ln2.hook_normalized are read on
// every norm kind (LayerNorm too: the block's norm of its input, weight and bias applied).
// Throws hs::Error naming a hook the model does not have or that has no per-position rows.
RowMatrixXf hook_rows(const ActivationCache& cache, std::string_view hook);

// One SAE of a folder: the only one, or the one reading block `layer` (a transcoder set's layer);
// layer -1 asks for the only one. Throws hs::Error listing the layers when that is not one.
std::shared_ptr<const Sae> sae_at_layer(const SaeSet& set, int layer);

// The SAE's input rows on this run (its hook_in), and its latents and output on them.
SaeRun run_sae(const ActivationCache& cache, const Sae& sae);

// An edit of one latent, at one position or all of them (pos -1).
struct LatentEdit {
  enum class Kind : uint8_t { Zero, Scale, Add };
  int latent = 0;
  Kind kind = Kind::Zero;
  float value = 0.0f;  // Scale: the factor; Add: the strength times the decoder row
  int pos = -1;
  bool operator==(const LatentEdit&) const = default;
};
// "LATENT:zero|xS|+S[@POS]" items separated by commas, e.g. "12:zero,40:x2.5,7:+3@4" (+S may be
// negative: "7:+-3" or "7:-3"). Throws hs::Error naming the item that is not one.
std::vector<LatentEdit> parse_latent_edits(std::string_view spec);
std::string describe(const LatentEdit& edit);

struct SpliceOptions {
  bool error_term = true;          // false: the SAE's output in place of the activation
  std::vector<LatentEdit> edits;   // checked against the SAE's d_sae
};

// The interventions that splice `sae` into a run of `weights` (RunOptions::interventions). Throws
// hs::Error when the SAE does not fit the model, an edit's latent is out of range, or the SAE's
// hooks cannot be spliced (its output hook must be editable, intervention.h).
Interventions splice_sae(std::shared_ptr<const Sae> sae, const Weights& weights, const SpliceOptions& options);

// How well an SAE reconstructs on one prompt (the positions of `tokens`, BOS included): the mean
// squared error per element, explained variance 1 - sum|x - x_hat|^2 / sum|x - mean(x)|^2 (x the
// output hook's clean rows: the activation for an SAE, the MLP output for a transcoder), the mean
// number of active latents per position (L0), and the next-token loss of the clean run and of the
// run with the SAE in place of its output without error term.
struct SaeQuality {
  int positions = 0;
  double mse = 0, explained_variance = 0, l0 = 0;
  double loss_clean = 0, loss_spliced = 0;
};
SaeQuality sae_quality(std::shared_ptr<const Weights> weights, std::span<const int32_t> tokens, const Sae& sae,
                       int threads = 0);
// The same from a clean run already made and the SAE's latents on it (run_sae(clean, sae)): one
// forward pass (the spliced run) instead of two.
SaeQuality sae_quality(const ActivationCache& clean, const Sae& sae, const SaeRun& run, int threads = 0);
// The same from the latents [pos, d_sae] and the decoder's output [pos, d_out] alone (a view that
// holds the latents already need not copy them into a SaeRun).
SaeQuality sae_quality(const ActivationCache& clean, const Sae& sae, const RowMatrixXf& feature_acts,
                       const RowMatrixXf& sae_out, int threads = 0);

// Per latent and position, activation x the derivative of a metric through the latent:
// feature_acts(p, i) * (grad_out(p) . d sae_out(p) / d feature_acts(p, i)), where grad_out is the
// metric's gradient at the SAE's output hook [pos, d_out] (the backward pass at hook_out). The
// decoder is linear in the latents at a position, so this is exact for the spliced run.
RowMatrixXf latent_attribution(const Sae& sae, const SaeRun& run, const RowMatrixXf& grad_out);

}  // namespace hs
