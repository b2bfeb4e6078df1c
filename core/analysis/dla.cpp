#include "core/analysis/dla.h"

#include <cmath>

#include "core/error.h"

namespace hs {

float frozen_final_norm_dot(const Eigen::Ref<const RowVectorXf>& x, const RowVectorXf& direction, float scale,
                            NormKind norm) {
  const float dot = norm == NormKind::LayerNorm ? x.dot(direction) - x.mean() * direction.sum() : x.dot(direction);
  return dot / scale;
}

LogitAttribution direct_logit_attribution(const ActivationCache& cache, const ResidualDecomposition& parts,
                                          int32_t target) {
  const ModelConfig& c = cache.config();
  if (target < 0 || target >= c.d_vocab)
    throw Error("target token " + std::to_string(target) + " is outside the vocabulary [0, " + std::to_string(c.d_vocab) + ").");
  const int pos = parts.pos;
  LogitAttribution a;
  a.pos = pos;
  a.target = target;
  // The direction in the residual stream that the target's logit reads, through the final norm's
  // weight.
  RowVectorXf u(c.d_model);
  cache.weights()->unembed_row(target, u.data());
  const RowVectorXf direction = u.cwiseProduct(ConstRowVectorRef(cache.weights()->final_norm_w(), c.d_model));
  const float scale = cache.ln_final_scale(pos);  // frozen at its value for the whole residual
  a.per_component.resize(parts.labels.size());
  a.per_head = RowMatrixXf::Zero(c.n_layers, c.n_heads);
  double total = 0.0;
  for (size_t i = 0; i < parts.labels.size(); ++i) {
    const float value = frozen_final_norm_dot(parts.components.row(static_cast<Eigen::Index>(i)), direction, scale,
                                              c.architecture.norm);
    a.per_component[i] = value;
    total += value;
    if (parts.kinds[i] == ComponentKind::Head) a.per_head(parts.layers[i], parts.heads[i]) = value;
  }
  const float* bias = cache.weights()->final_norm_b();
  a.bias_term = bias ? u.dot(ConstRowVectorRef(bias, c.d_model)) : 0.0f;
  // With a final soft-cap (Gemma 2) the parts add up to the logit before it, which is linear in
  // the stream; the cap's tanh is not (ActivationCache::logit_before_softcap).
  a.logit = cache.logit_before_softcap(pos, target);
  a.max_abs_error = static_cast<float>(std::abs(total + a.bias_term - a.logit));
  return a;
}

}  // namespace hs
