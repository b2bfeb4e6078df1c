// View-ready analyses of one forward pass. The GUI draws these; tests check them against the
// identities they display. All functions are pure reads of the cache and the weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

// How much each head writes into the residual stream at `pos`: ||z_h[pos] @ W_O[h]||_2.
RowMatrixXf head_write_norms(const ActivationCache& cache, int pos);  // [layer, head]

enum class ComponentKind { Embed, PosEmbed, Head, AttnBias, Mlp };

// The final residual stream at `pos` (blocks.{L-1}.hook_resid_post) as a stack of additive parts,
// those the architecture has: embed, pos_embed (learned positions only), then per layer every
// head's result L{l}H{h}, that layer's b_O ("L{l} b_O", when the attention output has a bias),
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

// One part x of the residual stream through the final norm with its scale frozen at the value it
// has for the whole residual (TransformerLens's apply_ln_to_stack), dotted with `direction` (an
// unembedding row times the norm's weight): LayerNorm centres the part, RMSNorm does not; both
// divide by the frozen scale. The norm's bias belongs to no part.
float frozen_final_norm_dot(const Eigen::Ref<const RowVectorXf>& x, const RowVectorXf& direction, float scale,
                            NormKind norm);

// Direct logit attribution to `target` at `pos`: each part through frozen_final_norm_dot with the
// unembedding row of `target`. The parts plus the final norm's bias . W_U[:, target] (zero
// without a bias) add up to the target's logit exactly.
struct LogitAttribution {
  int pos = 0;
  int32_t target = 0;
  std::vector<float> per_component;     // same order as ResidualDecomposition
  float bias_term = 0.0f;               // final norm's b . W_U[:, target]
  float logit = 0.0f;                   // logits[pos, target] from the forward pass
  float max_abs_error = 0.0f;           // |sum(per_component) + bias_term - logit|
  RowMatrixXf per_head;                 // [layer, head] the heads' entries, for the grid view
};
LogitAttribution direct_logit_attribution(const ActivationCache& cache, const ResidualDecomposition& parts,
                                          int32_t target);

// "Concatenate the heads, then project with W_O" beside "project each head with its slice of
// W_O, then sum", for one layer, on every position.
struct ConcatVsSum {
  int layer = 0;
  RowMatrixXf z_concat;                 // [pos, head*d_head]
  RowMatrixXf W_O;                      // [head*d_head, d_model]
  RowVectorXf b_O;                      // [d_model]
  std::vector<RowMatrixXf> head_results;  // [head] of [pos, d_model] = z_h @ W_O[h]
  RowMatrixXf via_concat;               // [pos, d_model] = z_concat @ W_O + b_O
  RowMatrixXf via_sum;                  // [pos, d_model] = sum_h head_results[h] + b_O
  RowMatrixXf difference;               // [pos, d_model] = via_concat - via_sum
  float max_abs_diff = 0.0f;
  float max_abs_vs_cache = 0.0f;        // max |via_concat - hook_attn_out|
};
ConcatVsSum concat_vs_sum(const ActivationCache& cache, int layer);

struct Prediction {
  int32_t id = 0;
  float probability = 0.0f;
  float logit = 0.0f;
};
// The k most likely next tokens after `pos`, most likely first.
std::vector<Prediction> top_predictions(const ActivationCache& cache, int pos, int k);

}  // namespace hs
