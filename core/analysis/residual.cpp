#include "core/analysis/residual.h"

#include <string>
#include <utility>

#include "core/error.h"

namespace hs {
namespace {

void check_pos(const ActivationCache& cache, int pos) {
  if (pos < 0 || pos >= cache.n_pos())
    throw Error("position " + std::to_string(pos) + " is outside the prompt (0.." + std::to_string(cache.n_pos() - 1) + ").");
  if (cache.n_layer() == 0) throw Error("this run kept only the logits; run again with the full cache.");
}

// What layer l's post-attention norm (Gemma's post_attention_layernorm) multiplies a part of
// position pos's attention output by when its scale is frozen at this run's value: w / scale(pos)
// per column ([d_model], the same as ActivationCache::apply_frozen_post_norm); ones without the
// norm. Computed once per layer: the scale needs the whole layer's output.
RowVectorXf frozen_post_attn_factor(const ActivationCache& cache, int l, int pos) {
  const int D = cache.config().d_model;
  if (!cache.has_post_norm(1)) return RowVectorXf::Ones(D);
  const float scale = cache.post_norm_scale(l, 1)(pos);
  return ConstRowVectorRef(cache.weights()->layer(l).post_attn_norm_w, D) / scale;
}

// One head's write into the residual stream at one position, [d_model]: z_h[pos] @ W_O[h] times
// the layer's frozen post-norm factor, so that the heads (and b_O) sum to hook_attn_out.
RowVectorXf head_write(const ActivationCache& cache, int l, int h, int pos, const RowVectorXf& post_factor) {
  const int dh = cache.config().d_head;
  const RowVectorXf result = cache.layer(l).z.row(pos).segment(h * dh, dh) * cache.weights()->W_O(l, h);
  return result.cwiseProduct(post_factor);
}

}  // namespace

RowMatrixXf head_write_norms(const ActivationCache& cache, int pos) {
  check_pos(cache, pos);
  const ModelConfig& c = cache.config();
  RowMatrixXf norms(c.n_layers, c.n_heads);
  for (int l = 0; l < c.n_layers; ++l) {
    const RowVectorXf post_factor = frozen_post_attn_factor(cache, l, pos);
    for (int h = 0; h < c.n_heads; ++h) norms(l, h) = head_write(cache, l, h, pos, post_factor).norm();
  }
  return norms;
}

ResidualDecomposition decompose_residual(const ActivationCache& cache, int pos) {
  check_pos(cache, pos);
  const ModelConfig& c = cache.config();
  ResidualDecomposition d;
  d.pos = pos;
  // The parts the architecture has: the position embedding only when learned, a layer's b_O only
  // when its attention output has a bias.
  const bool pos_embed = cache.has_pos_embed(), attn_bias = c.architecture.attn_out_bias;
  const int n = 1 + pos_embed + c.n_layers * (c.n_heads + attn_bias + 1);
  d.components.resize(n, c.d_model);
  int row = 0;
  auto add = [&](std::string label, ComponentKind kind, int layer, int head, const RowVectorXf& v) {
    d.labels.push_back(std::move(label));
    d.kinds.push_back(kind);
    d.layers.push_back(layer);
    d.heads.push_back(head);
    d.components.row(row++) = v;
  };
  add("embed", ComponentKind::Embed, -1, -1, cache.embed.row(pos));
  if (pos_embed) add("pos_embed", ComponentKind::PosEmbed, -1, -1, cache.pos_embed.row(pos));
  for (int l = 0; l < c.n_layers; ++l) {
    const RowVectorXf post_factor = frozen_post_attn_factor(cache, l, pos);
    for (int h = 0; h < c.n_heads; ++h)
      add("L" + std::to_string(l) + "H" + std::to_string(h), ComponentKind::Head, l, h,
          head_write(cache, l, h, pos, post_factor));
    if (attn_bias)
      add("L" + std::to_string(l) + " b_O", ComponentKind::AttnBias, l, -1,
          cache.weights()->b_O(l).transpose().cwiseProduct(post_factor));
    add("L" + std::to_string(l) + " MLP", ComponentKind::Mlp, l, -1, cache.layer(l).mlp_out.row(pos));
  }
  d.residual = cache.final_residual(pos);
  d.sum_of_parts = d.components.colwise().sum();
  d.max_abs_error = (d.sum_of_parts - d.residual).cwiseAbs().maxCoeff();
  d.norms.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) d.norms[static_cast<size_t>(i)] = d.components.row(i).norm();
  return d;
}

}  // namespace hs
