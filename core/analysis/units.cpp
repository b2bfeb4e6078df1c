#include "core/analysis/units.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/features/sae.h"
#include "core/model/hooks.h"
#include "core/model/ops.h"
#include "core/model/weights.h"

namespace hs {

std::vector<int> top_units(const Eigen::Ref<const RowVectorXf>& score, int k, bool by_magnitude) {
  std::vector<int> units;
  units.reserve(static_cast<size_t>(score.size()));
  for (Eigen::Index i = 0; i < score.size(); ++i)
    if (!std::isnan(score(i))) units.push_back(static_cast<int>(i));
  auto key = [&](int i) { return by_magnitude ? std::abs(score(i)) : score(i); };
  const size_t n = std::min(units.size(), static_cast<size_t>(std::max(k, 0)));
  // stable: equal scores keep the lower unit first
  std::partial_sort(units.begin(), units.begin() + static_cast<std::ptrdiff_t>(n), units.end(), [&](int a, int b) {
    const float ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  });
  units.resize(n);
  return units;
}

RowMatrixXf neuron_activations(const ActivationCache& cache, int layer) {
  if (layer < 0 || layer >= cache.n_layer())
    throw Error("layer " + std::to_string(layer) + " is not one of the model's (0 to " +
                std::to_string(cache.n_layer() - 1) + ").");
  return cache.mlp_post(layer);
}

RowMatrixXf neuron_attribution(const ActivationCache& cache, const GradientCache& grad, int layer) {
  if (&grad.config() != &cache.config() || grad.tokens() != cache.tokens())
    throw Error("the gradient is of another run (other weights or tokens) than the neurons' activations; "
                "differentiate this run (backward() on its cache).");
  if (!grad.keeps(kNeuronHook))
    throw Error("the gradient does not keep mlp.hook_post (GradOptions::keep), which neuron attributions read.");
  RowMatrixXf post = neuron_activations(cache, layer);  // [pos, d_mlp]
  if (!grad.has(kNeuronHook, layer)) return RowMatrixXf::Zero(post.rows(), post.cols());
  post.array() *= grad.rows(kNeuronHook, layer).array();
  return post;
}

RowVectorXf neuron_output_direction(const Weights& weights, int layer, int neuron) {
  const ModelConfig& c = weights.config();
  if (layer < 0 || layer >= c.n_layers || neuron < 0 || neuron >= c.d_mlp)
    throw Error("neuron L" + std::to_string(layer) + "N" + std::to_string(neuron) + " is not one of the model's (" +
                std::to_string(c.n_layers) + " layers of " + std::to_string(c.d_mlp) + " neurons).");
  return weights.W_out(layer).row(neuron);
}

RowVectorXf latent_output_direction(const Weights& weights, const Sae& sae, int latent) {
  if (latent < 0 || latent >= sae.d_sae)
    throw Error("latent " + std::to_string(latent) + " is not one of the SAE " + sae.name + "'s (0 to " +
                std::to_string(sae.d_sae - 1) + ").");
  const ModelConfig& c = weights.config();
  const RowVectorXf row = sae_decoder_row(sae, latent);  // [d_out] at hook_out
  const std::optional<HookKey> out = parse_hook_key(c, sae.hook_out);
  if (!out)
    throw Error("the SAE " + sae.name + " writes " + sae.hook_out + ", which is not one of this model's hooks.");
  if (row.size() == c.d_model &&
      (out->hook == HookPoint::ResidPre || out->hook == HookPoint::ResidMid || out->hook == HookPoint::ResidPost ||
       out->hook == HookPoint::AttnOut || out->hook == HookPoint::MlpOut))
    return row;
  if (out->hook == HookPoint::Z && row.size() == static_cast<Eigen::Index>(c.n_heads) * c.d_head) {
    RowVectorXf d(c.d_model);  // [d_model] = row [n_heads * d_head] @ W_O [n_heads * d_head, d_model]
    d.noalias() = row * weights.W_O_all(out->layer);
    return d;
  }
  if (out->hook == HookPoint::MlpPost && row.size() == c.d_mlp) {
    RowVectorXf d(c.d_model);  // [d_model] = row [d_mlp] @ W_out [d_mlp, d_model]
    d.noalias() = row * weights.W_out(out->layer);
    return d;
  }
  throw Error("the SAE " + sae.name + " writes " + sae.hook_out +
              ": logit effects are read from SAEs writing the residual stream, hook_attn_out, hook_mlp_out, "
              "attn.hook_z or mlp.hook_post.");
}

RowVectorXf direct_logit_effects(const Weights& weights, const Eigen::Ref<const RowVectorXf>& direction) {
  const ModelConfig& c = weights.config();
  if (direction.size() != c.d_model)
    throw Error("a direction of width " + std::to_string(direction.size()) + " cannot be unembedded: the model's " +
                "d_model is " + std::to_string(c.d_model) + ".");
  const RowMatrixXf x = direction;  // [1, d_model]
  RowMatrixXf logits(1, c.d_vocab);  // [1, d_vocab]
  unembed_forward(logits, x, weights.packed_unembed());
  return logits.row(0);
}

LogitEffects logit_effects(const Weights& weights, const Eigen::Ref<const RowVectorXf>& direction, int k) {
  const RowVectorXf effects = direct_logit_effects(weights, direction);  // [d_vocab]
  LogitEffects out;
  for (int t : top_units(effects, k, false)) out.top.push_back({t, effects(t)});
  const RowVectorXf negated = -effects;
  for (int t : top_units(negated, k, false)) out.bottom.push_back({t, effects(t)});
  return out;
}

}  // namespace hs
