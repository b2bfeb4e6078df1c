// Units below the head (issue 25, the Neurons and Features views): MLP neurons and the latents of
// a sparse autoencoder or transcoder, read the same way. For one unit source on one run: every
// unit's activation at every position, its attribution to a metric (activation x gradient), the
// units to list at a position, and a unit's logit effects (the direction it writes, through the
// unembedding).
//
// Logit effects follow Neuronpedia's "top / bottom logits": the unit's output direction times
// W_U directly, with no final norm (the final norm's scale depends on the position, so no single
// number is "the" effect through it) and no bias. Where the unit's output passes a norm before it
// joins the stream (Gemma's post-MLP norm), the direction is the one before that norm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/backward.h"
#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

struct Sae;
class Weights;

// The k units with the largest score, largest first (by_magnitude: by |score|); equal scores keep
// the lower unit first; NaN scores are never listed.
std::vector<int> top_units(const Eigen::Ref<const RowVectorXf>& score, int k, bool by_magnitude);

// Layer l's neurons on a run: mlp.hook_post [pos, d_mlp] (a gated MLP's gated product
// act(gate) * up, the input of W_out).
RowMatrixXf neuron_activations(const ActivationCache& cache, int layer);
// The hook a unit source's gradient is read at: mlp.hook_post for neurons.
inline constexpr HookPoint kNeuronHook = HookPoint::MlpPost;
// Activation x gradient of every neuron of layer l at every position, [pos, d_mlp]:
// post(p, n) * dM/dpost(p, n), from a gradient that kept mlp.hook_post. Zeros where the metric
// does not depend on the layer (grad has no key there). Throws hs::Error when the gradient is of
// another run (other weights or tokens) or did not keep the hook.
RowMatrixXf neuron_attribution(const ActivationCache& cache, const GradientCache& grad, int layer);

// Neuron n of layer l's output weights: row n of W_out [d_model], what one unit of its activation
// adds to the MLP's output.
RowVectorXf neuron_output_direction(const Weights& weights, int layer, int neuron);
// An SAE latent's decoder row [d_out] as a residual-stream direction [d_model]: as it is for an
// SAE writing the residual stream, hook_attn_out or hook_mlp_out; through W_O for one writing
// attn.hook_z; through W_out for one writing mlp.hook_post. Throws hs::Error naming the hook for
// any other output hook.
RowVectorXf latent_output_direction(const Weights& weights, const Sae& sae, int latent);

// A direction's direct effect on each token's logit, direction @ W_U [d_vocab] (no final norm, no
// bias), through the forward pass's own unembedding kernel.
RowVectorXf direct_logit_effects(const Weights& weights, const Eigen::Ref<const RowVectorXf>& direction);
struct TokenEffect {
  int32_t token = 0;
  float value = 0.0f;
};
struct LogitEffects {
  std::vector<TokenEffect> top;     // the k largest, largest first
  std::vector<TokenEffect> bottom;  // the k smallest, smallest first
};
LogitEffects logit_effects(const Weights& weights, const Eigen::Ref<const RowVectorXf>& direction, int k);

}  // namespace hs
