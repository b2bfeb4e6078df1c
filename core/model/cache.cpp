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

// The per-layer key suffixes of the contract, in forward order (TransformerLens's). Each is
// marked with the part of the architecture it needs.
enum class Needs { Always, Rotary, NormScales, Gated };
constexpr std::pair<const char*, Needs> kLayerKeys[] = {
    {"hook_resid_pre", Needs::Always},        {"ln1.hook_scale", Needs::NormScales},
    {"ln1.hook_normalized", Needs::NormScales}, {"attn.hook_q", Needs::Always},
    {"attn.hook_k", Needs::Always},           {"attn.hook_v", Needs::Always},
    {"attn.hook_rot_q", Needs::Rotary},       {"attn.hook_rot_k", Needs::Rotary},
    {"attn.hook_attn_scores", Needs::Always}, {"attn.hook_pattern", Needs::Always},
    {"attn.hook_z", Needs::Always},           {"attn.hook_result", Needs::Always},
    {"hook_attn_out", Needs::Always},         {"hook_resid_mid", Needs::Always},
    {"ln2.hook_scale", Needs::NormScales},    {"ln2.hook_normalized", Needs::NormScales},
    {"mlp.hook_pre", Needs::Always},          {"mlp.hook_pre_linear", Needs::Gated},
    {"mlp.hook_post", Needs::Always},         {"hook_mlp_out", Needs::Always},
    {"hook_resid_post", Needs::Always},
};

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
  float scale = c.scale_attn_weights ? 1.0f / std::sqrt(static_cast<float>(c.d_head)) : 1.0f;
  if (c.scale_attn_by_inverse_layer_idx) scale /= static_cast<float>(l + 1);
  return scale;
}

std::vector<std::string> ActivationCache::keys() const {
  std::vector<std::string> out = {"hook_embed"};
  if (has_pos_embed()) out.push_back("hook_pos_embed");
  auto wanted = [&](Needs n) {
    switch (n) {
      case Needs::Always: return true;
      case Needs::Rotary: return has_rotary();
      case Needs::NormScales: return has_norm_scales();
      case Needs::Gated: return has_gated_mlp();
    }
    return false;
  };
  for (int l = 0; l < n_layer(); ++l)
    for (const auto& [k, needs] : kLayerKeys)
      if (wanted(needs)) out.push_back("blocks." + std::to_string(l) + "." + k);
  if (has_norm_scales()) out.push_back("ln_final.hook_scale");
  out.push_back("ln_final.hook_normalized");
  out.push_back("logits");
  return out;
}

bool ActivationCache::has(std::string_view key) const {
  for (const auto& k : keys())
    if (k == key) return true;
  return false;
}

RowMatrixXf ActivationCache::head_pattern(int l, int h) const {
  const int64_t S = n_pos();
  RowMatrixXf p = RowMatrixXf::Zero(S, S);
  for (int64_t i = 0; i < S; ++i) p.row(i).head(i + 1) = pattern_row(l, h, static_cast<int>(i));
  return p;
}

ConstRowVectorRef ActivationCache::pattern_row(int l, int h, int q) const { return layer(l).pattern.row(h, q); }

RowMatrixXf ActivationCache::resid_mid(int l) const {
  RowMatrixXf r = layer(l).resid_pre.to_matrix();
  r += layer(l).attn_out.to_matrix();
  return r;
}

RowMatrixXf ActivationCache::resid_post(int l) const {
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
  RowVectorXf r = a.resid_pre.row(pos) + a.attn_out.row(pos);
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
  s.noalias() = a.q.middle_cols(h * c.d_head, c.d_head) * a.k.middle_cols(c.kv_head(h) * c.d_head, c.d_head).transpose();
  const float scale = attention_scale(l);
  for (int64_t i = 0; i < S; ++i) {
    s.row(i).head(i + 1).array() *= scale;
    s.row(i).tail(S - i - 1).setConstant(kNegInf);
  }
  return s;
}

Tensor ActivationCache::get(std::string_view key) const {
  const ModelConfig& c = config();
  const int64_t S = n_pos(), D = c.d_model, H = c.n_heads, KV = c.n_key_value_heads, dh = c.d_head, M = c.d_mlp;
  if (key == "hook_embed") return from_matrix(embed, {S, D});
  if (key == "hook_pos_embed" && has_pos_embed()) return from_matrix(pos_embed, {S, D});
  if (key == "ln_final.hook_normalized") return from_matrix(ln_final_normalized, {S, D});
  if (key == "ln_final.hook_scale" && has_norm_scales())
    return Tensor({S, 1}, std::vector<float>(ln_final_scale.data(), ln_final_scale.data() + S));
  if (key == "logits") return from_matrix(logits, {S, c.d_vocab});

  const std::string_view prefix = "blocks.";
  if (key.substr(0, prefix.size()) == prefix) {
    std::string_view rest = key.substr(prefix.size());
    int l = -1;
    const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), l);
    if (ec == std::errc() && ptr < rest.data() + rest.size() && *ptr == '.' && l >= 0 && l < c.n_layers) {
      if (layers_.empty())
        throw Error("activation \"" + std::string(key) + "\" was not kept: this run kept only the logits.");
      const std::string_view suffix(ptr + 1, static_cast<size_t>(rest.data() + rest.size() - ptr - 1));
      const LayerActivations& a = layer(l);
      if (suffix == "hook_resid_pre") return from_matrix(a.resid_pre, {S, D});
      if (suffix == "attn.hook_q") return has_rotary() ? from_matrix(pre_rotary(l, false), {S, H, dh}) : from_matrix(a.q, {S, H, dh});
      if (suffix == "attn.hook_k") return has_rotary() ? from_matrix(pre_rotary(l, true), {S, KV, dh}) : from_matrix(a.k, {S, KV, dh});
      if (has_rotary() && suffix == "attn.hook_rot_q") return from_matrix(a.q, {S, H, dh});
      if (has_rotary() && suffix == "attn.hook_rot_k") return from_matrix(a.k, {S, KV, dh});
      if (has_norm_scales() && (suffix == "ln1.hook_scale" || suffix == "ln2.hook_scale" ||
                                suffix == "ln1.hook_normalized" || suffix == "ln2.hook_normalized")) {
        VectorXf scale;
        const RowMatrixXf normalized = block_norm(l, suffix[2] == '1' ? 1 : 2, &scale);
        if (suffix.ends_with("hook_scale")) return Tensor({S, 1}, std::vector<float>(scale.data(), scale.data() + S));
        return from_matrix(normalized, {S, D});
      }
      if (has_gated_mlp() && suffix == "mlp.hook_pre_linear") return from_matrix(mlp_pre_linear(l), {S, M});
      if (suffix == "attn.hook_v") return from_matrix(a.v, {S, KV, dh});
      if (suffix == "attn.hook_z") return from_matrix(a.z, {S, H, dh});
      if (suffix == "attn.hook_pattern") {
        Tensor t({H, S, S});
        for (int h = 0; h < H; ++h)
          for (int64_t i = 0; i < S; ++i) {
            const ConstRowVectorRef row = pattern_row(l, h, static_cast<int>(i));
            std::copy_n(row.data(), i + 1, t.data.data() + (h * S + i) * S);
          }
        return t;
      }
      if (suffix == "attn.hook_attn_scores") {
        Tensor t({H, S, S});
        for (int h = 0; h < H; ++h) {
          const RowMatrixXf s = head_scores(l, h);
          std::memcpy(t.data.data() + h * S * S, s.data(), sizeof(float) * static_cast<size_t>(S * S));
        }
        return t;
      }
      if (suffix == "attn.hook_result") {
        if (!a.result_phd.empty()) return Tensor({S, H, D}, a.result_phd);
        Tensor t({S, H, D});
        for (int h = 0; h < H; ++h) {
          const RowMatrixXf r = head_result(l, h);
          for (int64_t p = 0; p < S; ++p)
            RowVectorRef(t.data.data() + (p * H + h) * D, D) = r.row(p);
        }
        return t;
      }
      if (suffix == "hook_attn_out") return from_matrix(a.attn_out, {S, D});
      if (suffix == "hook_resid_mid") return from_matrix(resid_mid(l), {S, D});
      if (suffix == "mlp.hook_pre") return from_matrix(mlp_pre(l), {S, M});
      if (suffix == "mlp.hook_post") return from_matrix(mlp_post(l), {S, M});
      if (suffix == "hook_mlp_out") return from_matrix(a.mlp_out, {S, D});
      if (suffix == "hook_resid_post") return from_matrix(resid_post(l), {S, D});
    }
  }
  throw Error("unknown activation \"" + std::string(key) + "\": keys are hook_embed, " +
              (has_pos_embed() ? "hook_pos_embed, " : "") +
              "blocks.{layer}.hook_resid_pre ... blocks.{layer}.hook_resid_post "
              "(layer 0.." + std::to_string(c.n_layers - 1) + "), ln_final.hook_normalized and logits.");
}

size_t ActivationCache::stored_bytes() const {
  size_t n = embed.bytes() + pos_embed.bytes() + ln_final_normalized.bytes() +
             static_cast<size_t>(ln_final_scale.size()) * sizeof(float) + logits.bytes();
  for (const auto& a : layers_)
    n += a.resid_pre.bytes() + a.q.bytes() + a.k.bytes() + a.v.bytes() + a.z.bytes() + a.q_pre_rotary.bytes() +
         a.k_pre_rotary.bytes() + a.attn_out.bytes() + a.mlp_pre.bytes() + a.mlp_pre_linear.bytes() +
         a.mlp_out.bytes() + a.pattern.bytes() + (a.scores_hqk.size() + a.result_phd.size()) * sizeof(float);
  return n;
}

}  // namespace hs
