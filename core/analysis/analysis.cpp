#include "core/analysis/analysis.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/model/ops.h"

namespace hs {
namespace {

void check_pos(const ActivationCache& cache, int pos) {
  if (pos < 0 || pos >= cache.n_pos())
    throw Error("position " + std::to_string(pos) + " is outside the prompt (0.." + std::to_string(cache.n_pos() - 1) + ").");
  if (cache.n_layer() == 0) throw Error("this run kept only the logits; run again with the full cache.");
}

void check_layer(const ActivationCache& cache, int layer) {
  if (layer < 0 || layer >= cache.n_layer())
    throw Error("layer " + std::to_string(layer) + " does not exist (0.." + std::to_string(cache.n_layer() - 1) + ").");
}

// One head's write into the residual stream at one position: z_h[pos] @ W_O[h], [d_model].
RowVectorXf head_write(const ActivationCache& cache, int l, int h, int pos) {
  const int dh = cache.config().d_head;
  return cache.layer(l).z.row(pos).segment(h * dh, dh) * cache.weights()->W_O(l, h);
}

}  // namespace

float frozen_final_norm_dot(const Eigen::Ref<const RowVectorXf>& x, const RowVectorXf& direction, float scale,
                            NormKind norm) {
  const float dot = norm == NormKind::LayerNorm ? x.dot(direction) - x.mean() * direction.sum() : x.dot(direction);
  return dot / scale;
}

RowMatrixXf head_write_norms(const ActivationCache& cache, int pos) {
  check_pos(cache, pos);
  const ModelConfig& c = cache.config();
  RowMatrixXf norms(c.n_layers, c.n_heads);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; ++h) norms(l, h) = head_write(cache, l, h, pos).norm();
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
    for (int h = 0; h < c.n_heads; ++h)
      add("L" + std::to_string(l) + "H" + std::to_string(h), ComponentKind::Head, l, h, head_write(cache, l, h, pos));
    if (attn_bias) add("L" + std::to_string(l) + " b_O", ComponentKind::AttnBias, l, -1, cache.weights()->b_O(l).transpose());
    add("L" + std::to_string(l) + " MLP", ComponentKind::Mlp, l, -1, cache.layer(l).mlp_out.row(pos));
  }
  d.residual = cache.final_residual(pos);
  d.sum_of_parts = d.components.colwise().sum();
  d.max_abs_error = (d.sum_of_parts - d.residual).cwiseAbs().maxCoeff();
  d.norms.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) d.norms[static_cast<size_t>(i)] = d.components.row(i).norm();
  return d;
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
  a.logit = cache.logits(pos, target);
  a.max_abs_error = static_cast<float>(std::abs(total + a.bias_term - a.logit));
  return a;
}

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
  r.max_abs_vs_cache = (r.via_concat - a.attn_out.to_matrix()).cwiseAbs().maxCoeff();
  return r;
}

std::vector<Prediction> top_predictions(const ActivationCache& cache, int pos, int k) {
  if (pos < 0 || pos >= cache.n_pos()) throw Error("position " + std::to_string(pos) + " is outside the prompt.");
  const auto row = cache.logits.row(pos);
  const int V = static_cast<int>(row.size());
  k = std::clamp(k, 0, V);
  const float m = row.maxCoeff();
  double z = 0.0;
  for (int i = 0; i < V; ++i) z += std::exp(static_cast<double>(row(i) - m));
  std::vector<int> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return row(a) > row(b); });
  std::vector<Prediction> out;
  for (int i = 0; i < k; ++i) {
    const int id = idx[static_cast<size_t>(i)];
    out.push_back({id, static_cast<float>(std::exp(static_cast<double>(row(id) - m)) / z), row(id)});
  }
  return out;
}

}  // namespace hs
