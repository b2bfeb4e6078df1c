#include "core/analysis/concat_sum.h"

#include "core/error.h"
#include "core/model/ops.h"

namespace hs {
namespace {

void check_layer(const ActivationCache& cache, int layer) {
  if (layer < 0 || layer >= cache.n_layer())
    throw Error("layer " + std::to_string(layer) + " does not exist (0.." + std::to_string(cache.n_layer() - 1) + ").");
}

}  // namespace

ConcatVsSum concat_vs_sum(const ActivationCache& cache, int layer) {
  check_layer(cache, layer);
  const ModelConfig& c = cache.config();
  const LayerActivations& a = cache.layer(layer);
  ConcatVsSum r;
  r.layer = layer;
  r.z_concat = a.z.to_matrix();
  r.W_O = cache.weights()->W_O_all(layer);
  r.b_O = cache.weights()->b_O(layer).transpose();
  // The forward pass's own kernel (linear_forward: W_O on the concatenated heads), so that
  // via_concat reproduces hook_attn_out, and with the forward pass's thread policy.
  linear_forward(r.via_concat, r.z_concat, cache.weights()->packed(layer).W_O, r.b_O.data());
  r.via_sum = RowMatrixXf::Zero(cache.n_pos(), c.d_model);
  for (int h = 0; h < c.n_heads; ++h) {
    r.head_results.push_back(cache.head_result(layer, h));
    r.via_sum += r.head_results.back();
  }
  r.via_sum.rowwise() += r.b_O;
  r.difference = r.via_concat - r.via_sum;
  r.max_abs_diff = r.difference.cwiseAbs().maxCoeff();
  const RowMatrixXf attn_out = a.attn_out.to_matrix();  // [pos, d_model]
  r.has_post_norm = cache.has_post_norm(1);
  if (!r.has_post_norm) {
    r.max_abs_vs_cache = (r.via_concat - attn_out).cwiseAbs().maxCoeff();
    return r;
  }
  // The norm the forward pass applies (Gemma2DecoderLayer.forward: post_attention_layernorm on
  // o_proj's output), with the forward pass's kernel, then the same sum through it with the scale
  // frozen (ActivationCache::apply_frozen_post_norm), which equals it row by row.
  norm_forward(r.post_normed, &r.post_norm_scale, r.via_concat, cache.weights()->layer(layer).post_attn_norm_w, nullptr,
               c.norm_eps, c.architecture.norm);
  r.via_frozen_sum = r.via_sum;
  cache.apply_frozen_post_norm(layer, 1, r.via_frozen_sum);
  r.max_abs_vs_cache = (r.post_normed - attn_out).cwiseAbs().maxCoeff();
  r.max_abs_frozen_vs_cache = (r.via_frozen_sum - attn_out).cwiseAbs().maxCoeff();
  return r;
}

}  // namespace hs
