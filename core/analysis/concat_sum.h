// Concat-vs-sum: the attention output computed both ways TransformerLens describes, to show that
// they agree. A pure read of the cache and the weights; the Concat vs Sum view draws it.
#pragma once

#include <vector>

#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

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
  // With a post-attention norm (Gemma's post_attention_layernorm, TransformerLens's ln1_post),
  // via_concat is that norm's input and the norm is a step of its own before hook_attn_out.
  bool has_post_norm = false;
  VectorXf post_norm_scale;             // [pos] sqrt(mean(via_concat^2) + eps); empty without the norm
  RowMatrixXf post_normed;              // [pos, d_model] the norm of via_concat (= hook_attn_out)
  // [pos, d_model] sum_h head_contribution(h) + b_O through the norm with its scale frozen at
  // this run's value: the linear split of hook_attn_out the decompositions use.
  RowMatrixXf via_frozen_sum;
  float max_abs_frozen_vs_cache = 0.0f; // max |via_frozen_sum - hook_attn_out|
  float max_abs_vs_cache = 0.0f;        // max |via_concat (post_normed with the norm) - hook_attn_out|
};
ConcatVsSum concat_vs_sum(const ActivationCache& cache, int layer);

}  // namespace hs
