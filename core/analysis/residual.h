// The residual stream at one position as a stack of the parts that wrote it (TransformerLens's
// decompose_resid), and how much each head writes. Pure reads of the cache and the weights; the
// Contributions view draws them, and tests check that the parts sum to the residual.
#pragma once

#include <string>
#include <vector>

#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

// How much each head writes into the residual stream at `pos`: ||z_h[pos] @ W_O[h]||_2, through
// the post-attention norm with its scale frozen at this run's value when the model has one (Gemma).
RowMatrixXf head_write_norms(const ActivationCache& cache, int pos);  // [layer, head]

enum class ComponentKind { Embed, PosEmbed, Head, AttnBias, Mlp };

// The final residual stream at `pos` (blocks.{L-1}.hook_resid_post) as a stack of additive parts,
// those the architecture has: embed, pos_embed (learned positions only), then per layer every
// head's result L{l}H{h} (with a post-attention norm, Gemma's, through it with its scale frozen at
// this run's value: ActivationCache::head_contribution), that layer's b_O (likewise) ("L{l} b_O", when the attention output has a bias),
// and the MLP out ("L{l} MLP"; it includes the MLP's own output bias).
struct ResidualDecomposition {
  int pos = 0;
  std::vector<std::string> labels;      // "embed", "pos_embed", "L0H0", ..., "L0 b_O", "L0 MLP", ...
  std::vector<ComponentKind> kinds;
  std::vector<int> layers;              // -1 for embed / pos_embed
  std::vector<int> heads;               // -1 unless a head
  RowMatrixXf components;               // [component, d_model]
  RowVectorXf residual;                 // [d_model]
  RowVectorXf sum_of_parts;             // [d_model]
  float max_abs_error = 0.0f;           // max |sum_of_parts - residual|
  std::vector<float> norms;             // [component] L2 norm of each part
};
ResidualDecomposition decompose_residual(const ActivationCache& cache, int pos);

}  // namespace hs
