#include "core/model/cache.h"

#include <charconv>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/model/ops.h"

namespace hs {
namespace {

Tensor from_matrix(const RowMatrixXf& m, std::vector<int64_t> shape) {
  return Tensor(std::move(shape), std::vector<float>(m.data(), m.data() + m.size()));
}

Tensor from_matrix(const PositionRows& m, std::vector<int64_t> shape) {
  Tensor t(std::move(shape));
  for (Eigen::Index i = 0; i < m.rows(); ++i) std::copy_n(m.row_data(i), m.cols(), t.data.data() + i * m.cols());
  return t;
}

}  // namespace

ActivationCache::ActivationCache(std::shared_ptr<const Weights> weights, std::vector<int32_t> tokens)
    : weights_(std::move(weights)), tokens_(std::move(tokens)) {
  layers_.resize(static_cast<size_t>(weights_->config().n_layers));
}

float ActivationCache::attention_scale(int l) const {
  const ModelConfig& c = config();
  if (c.architecture.attn_scale > 0.0f) return c.architecture.attn_scale;
  float scale = c.scale_attn_weights ? 1.0f / std::sqrt(static_cast<float>(c.d_head)) : 1.0f;
  if (c.scale_attn_by_inverse_layer_idx) scale /= static_cast<float>(l + 1);
  return scale;
}

std::vector<std::string> ActivationCache::keys() const {
  std::vector<std::string> out;
  auto add = [&](const HookInfo& h, int l) {
    if (hook_exists(config(), h.hook)) out.push_back(hook_key(h.hook, l));
  };
  const std::span<const HookInfo> table = hook_table();
  for (const HookInfo& h : table)
    if (!h.per_layer && h.hook < HookPoint::ResidPre) add(h, -1);
  for (int l = 0; l < n_layer(); ++l)
    for (const HookInfo& h : table)
      if (h.per_layer) add(h, l);
  for (const HookInfo& h : table)
    if (!h.per_layer && h.hook > HookPoint::ResidPost) add(h, -1);
  return out;
}

bool ActivationCache::has(std::string_view key) const {
  const std::optional<HookKey> k = parse_hook_key(config(), key);
  return k && hook_exists(config(), k->hook) && k->layer < n_layer();
}

RowMatrixXf ActivationCache::head_pattern(int l, int h) const {
  const int64_t S = n_pos();
  RowMatrixXf p = RowMatrixXf::Zero(S, S);
  for (int64_t i = 0; i < S; ++i) p.row(i).head(i + 1) = pattern_row(l, h, static_cast<int>(i));
  return p;
}

ConstRowVectorRef ActivationCache::pattern_row(int l, int h, int q) const { return layer(l).pattern.row(h, q); }

RowMatrixXf ActivationCache::resid_mid(int l) const {
  if (!layer(l).resid_mid.empty()) return layer(l).resid_mid.to_matrix();
  RowMatrixXf r = layer(l).resid_pre.to_matrix();
  r += layer(l).attn_out.to_matrix();
  return r;
}

RowMatrixXf ActivationCache::resid_post(int l) const {
  if (!layer(l).resid_post.empty()) return layer(l).resid_post.to_matrix();
  RowMatrixXf r = resid_mid(l);
  r += layer(l).mlp_out.to_matrix();
  return r;
}

namespace {

// One of a layer's MLP input projections of ln2's output, as the forward pass computes it.
RowMatrixXf mlp_projection(const ActivationCache& cache, int l, bool gate) {
  const LayerWeights& W = cache.weights()->layer(l);
  const PackedLayer& WP = cache.weights()->packed(l);
  RowMatrixXf out;
  linear_forward(out, cache.block_norm(l, 2, nullptr), gate ? WP.W_gate : WP.W_in, gate ? W.b_gate : W.b_in);
  return out;
}

}  // namespace

RowMatrixXf ActivationCache::pre_rotary(int l, bool keys) const {
  const PositionRows& stored = keys ? layer(l).k_pre_rotary : layer(l).q_pre_rotary;
  if (stored.rows() > 0) return stored.to_matrix();
  const ModelConfig& c = config();
  const int64_t q_width = static_cast<int64_t>(c.n_heads) * c.d_head;
  const int64_t kv_width = static_cast<int64_t>(c.n_key_value_heads) * c.d_head;
  RowMatrixXf qkv;  // [pos, Q | K | V], as the forward pass computes it
  linear_forward(qkv, block_norm(l, 1, nullptr), weights_->packed(l).W_qkv, weights_->layer(l).b_qkv);
  return keys ? RowMatrixXf(qkv.middleCols(q_width, kv_width)) : RowMatrixXf(qkv.leftCols(q_width));
}

RowMatrixXf ActivationCache::mlp_pre(int l) const {
  const PositionRows& stored = layer(l).mlp_pre;
  return stored.rows() > 0 ? stored.to_matrix() : mlp_projection(*this, l, has_gated_mlp());
}

RowMatrixXf ActivationCache::mlp_pre_linear(int l) const {
  const PositionRows& stored = layer(l).mlp_pre_linear;
  return stored.rows() > 0 ? stored.to_matrix() : mlp_projection(*this, l, false);
}

RowMatrixXf ActivationCache::mlp_post(int l) const {
  if (!layer(l).mlp_post.empty()) return layer(l).mlp_post.to_matrix();
  RowMatrixXf out;
  if (has_gated_mlp())
    gated_activation_forward(out, mlp_pre(l), mlp_pre_linear(l), config().activation);
  else
    activation_forward(out, mlp_pre(l), config().activation);
  return out;
}

RowMatrixXf ActivationCache::block_norm(int l, int which, VectorXf* scale) const {
  const ModelConfig& c = config();
  const LayerWeights& W = weights_->layer(l);
  const float* w = which == 1 ? W.norm1_w : W.norm2_w;
  const float* b = which == 1 ? W.norm1_b : W.norm2_b;
  // The forward pass's own kernel on the same rows (resid_mid is derived with the forward pass's
  // sum), so the values are the ones the layer read. Parallel blocks feed both norms resid_pre.
  RowMatrixXf out;
  if (which == 1 || c.architecture.parallel_blocks)
    norm_forward(out, scale, layer(l).resid_pre.to_matrix(), w, b, c.norm_eps, c.architecture.norm);
  else
    norm_forward(out, scale, resid_mid(l), w, b, c.norm_eps, c.architecture.norm);
  return out;
}

RowVectorXf ActivationCache::final_residual(int pos) const {
  const LayerActivations& a = layer(n_layer() - 1);
  if (!a.resid_post.empty()) return a.resid_post.row(pos);
  RowVectorXf r = a.resid_mid.empty() ? RowVectorXf(a.resid_pre.row(pos) + a.attn_out.row(pos))
                                      : RowVectorXf(a.resid_mid.row(pos));
  r += a.mlp_out.row(pos);
  return r;
}

RowMatrixXf ActivationCache::head_result(int l, int h) const {
  const LayerActivations& a = layer(l);
  const ModelConfig& c = config();
  if (!a.result_phd.empty()) {
    RowMatrixXf r(n_pos(), c.d_model);
    for (int p = 0; p < n_pos(); ++p)
      r.row(p) = ConstRowVectorRef(a.result_phd.data() + (static_cast<int64_t>(p) * c.n_heads + h) * c.d_model, c.d_model);
    return r;
  }
  RowMatrixXf r(n_pos(), c.d_model);
  a.z.for_each_block(0, n_pos(), [&](Eigen::Index i, const ConstStridedMatrixRef& z) {
    head_result_forward(r.row(i).data(), c.d_model, z, h, c.d_head, weights_->packed(l).W_O);
  });
  return r;
}

RowMatrixXf ActivationCache::head_scores(int l, int h) const {
  const LayerActivations& a = layer(l);
  const ModelConfig& c = config();
  const int64_t S = n_pos();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (!a.scores_hqk.empty()) return ConstMatrixRef(a.scores_hqk.data() + h * S * S, S, S);
  // The same operations in the same order as the forward pass, so the values are identical.
  RowMatrixXf s(S, S);
  const RowMatrixXf q = a.q.middle_cols(h * c.d_head, c.d_head), k = a.k.middle_cols(c.kv_head(h) * c.d_head, c.d_head);
  head_scores_forward(s.data(), S, q.data(), c.d_head, S, 0, k.data(), c.d_head, S, c.d_head);
  for (int64_t i = 0; i < S; ++i) {
    finish_scores(l, static_cast<int>(i), s.row(i).data());
    s.row(i).tail(S - i - 1).setConstant(kNegInf);
  }
  return s;
}

void ActivationCache::finish_scores(int l, int q, float* row) const {
  const ModelConfig& c = config();
  const int first = first_key(attention_window(c, l), q);
  // The same expressions as attention_forward, on the same segment.
  auto kept = Eigen::Map<Eigen::ArrayXf>(row + first, q + 1 - first);
  kept *= attention_scale(l);
  if (c.architecture.attn_softcap > 0.0f) softcap_forward(kept.data(), kept.size(), c.architecture.attn_softcap);
  std::fill(row, row + first, -std::numeric_limits<float>::infinity());
}

bool ActivationCache::has_post_norm(int which) const {
  return which == 1 ? config().architecture.post_attn_norm : config().architecture.post_mlp_norm;
}

RowMatrixXf ActivationCache::post_norm_input(int l, int which) const {
  const LayerWeights& W = weights_->layer(l);
  const PackedLayer& WP = weights_->packed(l);
  RowMatrixXf out;
  if (which == 1)
    linear_forward(out, layer(l).z.to_matrix(), WP.W_O, W.b_O);
  else
    linear_forward(out, mlp_post(l), WP.W_out, W.b_out);
  return out;
}

VectorXf ActivationCache::post_norm_scale(int l, int which) const {
  const ModelConfig& c = config();
  const LayerWeights& W = weights_->layer(l);
  RowMatrixXf normalized;
  VectorXf scale;
  norm_forward(normalized, &scale, post_norm_input(l, which), which == 1 ? W.post_attn_norm_w : W.post_mlp_norm_w,
               nullptr, c.norm_eps, c.architecture.norm);
  return scale;
}

void ActivationCache::apply_frozen_post_norm(int l, int which, RowMatrixXf& rows) const {
  if (!has_post_norm(which)) return;
  const LayerWeights& W = weights_->layer(l);
  const ConstRowVectorRef w(which == 1 ? W.post_attn_norm_w : W.post_mlp_norm_w, config().d_model);
  const VectorXf scale = post_norm_scale(l, which);
  for (Eigen::Index p = 0; p < rows.rows(); ++p) rows.row(p) = (rows.row(p).array() / scale(p)) * w.array();
}

RowMatrixXf ActivationCache::head_contribution(int l, int h) const {
  RowMatrixXf r = head_result(l, h);
  apply_frozen_post_norm(l, 1, r);
  return r;
}

RowMatrixXf ActivationCache::qk_normalized(int l, bool keys, RowMatrixXf* scales) const {
  const ModelConfig& c = config();
  RowMatrixXf x = pre_rotary(l, keys);
  const LayerWeights& W = weights_->layer(l);
  head_rmsnorm_forward(x, keys ? c.n_key_value_heads : c.n_heads, c.d_head, keys ? W.k_norm_w : W.q_norm_w, c.norm_eps,
                       scales);
  return x;
}

RowVectorXf ActivationCache::logits_before_softcap(int pos) const {
  const ModelConfig& c = config();
  if (!(c.architecture.final_softcap > 0.0f)) return logits.row(pos);
  // The unembedding's kernel on the kept row of ln_final, as the forward pass ran it.
  RowMatrixXf out(1, c.d_vocab);
  const RowMatrixXf x = ln_final_normalized.row(pos);
  unembed_forward(out, x, weights_->packed_unembed());
  return out.row(0);
}

float ActivationCache::logit_before_softcap(int pos, int32_t token) const {
  const ModelConfig& c = config();
  if (!(c.architecture.final_softcap > 0.0f)) return logits(pos, token);
  RowVectorXf u(c.d_model);
  weights_->unembed_row(token, u.data());  // the unembedding has no bias in any family
  const float* x = ln_final_normalized.row(pos).data();
  double sum = 0.0;
  for (int i = 0; i < c.d_model; ++i) sum += static_cast<double>(x[i]) * u[i];
  return static_cast<float>(sum);
}

Tensor ActivationCache::get(std::string_view key) const {
  const ModelConfig& c = config();
  const std::optional<HookKey> k = parse_hook_key(c, key);
  if (k && hook_exists(c, k->hook)) {
    if (k->layer >= 0 && layers_.empty())
      throw Error("activation \"" + std::string(key) + "\" was not kept: this run kept only the logits.");
    return get(k->hook, k->layer);
  }
  throw Error("unknown activation \"" + std::string(key) + "\": keys are hook_embed, " +
              (has_pos_embed() ? "hook_pos_embed, " : "") +
              "blocks.{layer}.hook_resid_pre ... blocks.{layer}.hook_resid_post "
              "(layer 0.." + std::to_string(c.n_layers - 1) + "), ln_final.hook_normalized and logits.");
}

const PositionRows* ActivationCache::stored_rows(HookPoint hook, int l) const {
  using H = HookPoint;
  switch (hook) {
    case H::Embed: return &embed;
    case H::PosEmbed: return &pos_embed;
    case H::LnFinalNormalized: return &ln_final_normalized;
    case H::Logits: return &logits;
    default: break;
  }
  if (!hook_info(hook).per_layer || l < 0 || l >= n_layer()) return nullptr;
  const LayerActivations& a = layer(l);
  auto unless_empty = [](const PositionRows& r) { return r.empty() ? nullptr : &r; };
  switch (hook) {
    case H::ResidPre: return &a.resid_pre;
    case H::Q: return has_rotary() ? unless_empty(a.q_pre_rotary) : &a.q;
    case H::K: return has_rotary() ? unless_empty(a.k_pre_rotary) : &a.k;
    case H::V: return &a.v;
    case H::RotQ: return &a.q;
    case H::RotK: return &a.k;
    case H::Z: return &a.z;
    case H::AttnOut: return &a.attn_out;
    case H::ResidMid: return unless_empty(a.resid_mid);
    case H::MlpPre: return unless_empty(a.mlp_pre);
    case H::MlpPreLinear: return unless_empty(a.mlp_pre_linear);
    case H::MlpPost: return unless_empty(a.mlp_post);
    case H::MlpOut: return &a.mlp_out;
    case H::ResidPost: return unless_empty(a.resid_post);
    default: return nullptr;
  }
}

RowMatrixXf ActivationCache::rows(HookPoint hook, int l) const {
  using H = HookPoint;
  if (const PositionRows* stored = stored_rows(hook, l)) return stored->to_matrix();
  switch (hook) {
    case H::Ln1Scale:
    case H::Ln2Scale:
    case H::Ln1Normalized:
    case H::Ln2Normalized: {
      VectorXf scale;
      const RowMatrixXf normalized = block_norm(l, hook == H::Ln1Scale || hook == H::Ln1Normalized ? 1 : 2, &scale);
      if (hook == H::Ln1Scale || hook == H::Ln2Scale) return scale;
      return normalized;
    }
    case H::Q: return pre_rotary(l, false);
    case H::K: return pre_rotary(l, true);
    case H::QNormScale:
    case H::KNormScale: {
      RowMatrixXf scales;
      qk_normalized(l, hook == H::KNormScale, &scales);
      return scales;
    }
    case H::QNormNormalized: return qk_normalized(l, false, nullptr);
    case H::KNormNormalized: return qk_normalized(l, true, nullptr);
    case H::Ln1PostScale: return post_norm_scale(l, 1);
    case H::Ln2PostScale: return post_norm_scale(l, 2);
    case H::Ln1PostNormalized:
    case H::Ln2PostNormalized: {
      const int which = hook == H::Ln1PostNormalized ? 1 : 2;
      const LayerWeights& W = weights_->layer(l);
      RowMatrixXf out;
      norm_forward(out, nullptr, post_norm_input(l, which), which == 1 ? W.post_attn_norm_w : W.post_mlp_norm_w,
                   nullptr, config().norm_eps, config().architecture.norm);
      return out;
    }
    case H::Result: {
      const ModelConfig& c = config();
      const int64_t S = n_pos(), D = c.d_model, Hn = c.n_heads;
      if (!layer(l).result_phd.empty()) return ConstMatrixRef(layer(l).result_phd.data(), S, Hn * D);
      RowMatrixXf t(S, Hn * D);
      for (int h = 0; h < Hn; ++h) t.middleCols(h * D, D) = head_result(l, static_cast<int>(h));
      return t;
    }
    case H::ResidMid: return resid_mid(l);
    case H::MlpPre: return mlp_pre(l);
    case H::MlpPreLinear: return mlp_pre_linear(l);
    case H::MlpPost: return mlp_post(l);
    case H::ResidPost: return resid_post(l);
    case H::LnFinalScale: return ln_final_scale;
    default: break;
  }
  throw Error("activation \"" + hook_key(hook, l) + "\" is indexed by head first, not by position.");
}

Tensor ActivationCache::get(HookPoint hook, int l) const {
  const ModelConfig& c = config();
  const int64_t S = n_pos(), H = c.n_heads;
  std::vector<int64_t> shape = hook_shape(c, hook, S);
  if (hook == HookPoint::Pattern) {
    Tensor t(std::move(shape));
    for (int h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const ConstRowVectorRef row = pattern_row(l, h, static_cast<int>(i));
        std::copy_n(row.data(), i + 1, t.data.data() + (h * S + i) * S);
      }
    return t;
  }
  if (hook == HookPoint::AttnScores) {
    Tensor t(std::move(shape));
    for (int h = 0; h < H; ++h) {
      const RowMatrixXf s = head_scores(l, h);
      std::memcpy(t.data.data() + h * S * S, s.data(), sizeof(float) * static_cast<size_t>(S * S));
    }
    return t;
  }
  if (hook == HookPoint::Result && !layer(l).result_phd.empty()) return Tensor(std::move(shape), layer(l).result_phd);
  if (const PositionRows* stored = stored_rows(hook, l)) return from_matrix(*stored, std::move(shape));
  return from_matrix(rows(hook, l), std::move(shape));
}

size_t ActivationCache::stored_bytes() const {
  size_t n = embed.bytes() + pos_embed.bytes() + ln_final_normalized.bytes() +
             static_cast<size_t>(ln_final_scale.size()) * sizeof(float) + logits.bytes();
  for (const auto& a : layers_)
    n += a.resid_pre.bytes() + a.q.bytes() + a.k.bytes() + a.v.bytes() + a.z.bytes() + a.q_pre_rotary.bytes() +
         a.k_pre_rotary.bytes() + a.attn_out.bytes() + a.mlp_pre.bytes() + a.mlp_pre_linear.bytes() +
         a.mlp_out.bytes() + a.resid_mid.bytes() + a.mlp_post.bytes() + a.resid_post.bytes() + a.pattern.bytes() + (a.scores_hqk.size() + a.result_phd.size()) * sizeof(float);
  return n;
}

}  // namespace hs
