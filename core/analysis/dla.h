// Direct logit attribution: each part of the residual stream (residual.h) read through the
// final norm, frozen, and the unembedding of one target token. Pure reads of the cache and the
// weights; the Contributions view and the scan's dla_next_token use it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/analysis/residual.h"
#include "core/model/architecture.h"
#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

// One part x of the residual stream through the final norm with its scale frozen at the value it
// has for the whole residual (TransformerLens's apply_ln_to_stack), dotted with `direction` (an
// unembedding row times the norm's weight): LayerNorm centres the part, RMSNorm does not; both
// divide by the frozen scale. The norm's bias belongs to no part.
float frozen_final_norm_dot(const Eigen::Ref<const RowVectorXf>& x, const RowVectorXf& direction, float scale,
                            NormKind norm);

// Direct logit attribution to `target` at `pos`: each part through frozen_final_norm_dot with the
// unembedding row of `target`. The parts plus the final norm's bias . W_U[:, target] (zero
// without a bias) add up to the target's logit exactly (before the final soft-cap, Gemma 2's).
struct LogitAttribution {
  int pos = 0;
  int32_t target = 0;
  std::vector<float> per_component;     // same order as ResidualDecomposition
  float bias_term = 0.0f;               // final norm's b . W_U[:, target]
  // logits[pos, target] from the forward pass, before the final soft-cap when the model caps
  // (Architecture::final_softcap): the decomposition is exact for that logit.
  float logit = 0.0f;
  float max_abs_error = 0.0f;           // |sum(per_component) + bias_term - logit|
  RowMatrixXf per_head;                 // [layer, head] the heads' entries, for the grid view
};
LogitAttribution direct_logit_attribution(const ActivationCache& cache, const ResidualDecomposition& parts,
                                          int32_t target);

}  // namespace hs
