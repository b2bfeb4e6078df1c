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
  float max_abs_vs_cache = 0.0f;        // max |via_concat - hook_attn_out|
};
ConcatVsSum concat_vs_sum(const ActivationCache& cache, int layer);

}  // namespace hs
