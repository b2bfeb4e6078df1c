// The GPT-2 forward pass. Read top to bottom, this file is the model: embeddings, then per block
// LayerNorm -> attention -> residual add -> LayerNorm -> MLP -> residual add, then the final
// LayerNorm and the unembedding. Every intermediate lands in the ActivationCache.
#include "core/model/forward.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace hs {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// out[S, D] = (x - mean) / sqrt(var + eps) * w + b, row by row; scale_out[S] = sqrt(var + eps).
void layernorm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                       float eps) {
  const Eigen::Index S = x.rows(), D = x.cols();
  out.resize(S, D);
  ConstRowVectorRef wv(w, D), bv(b, D);
  if (scale_out) scale_out->resize(S);
  for (Eigen::Index i = 0; i < S; ++i) {
    const float mean = x.row(i).mean();
    const RowVectorXf centred = x.row(i).array() - mean;
    const float var = centred.squaredNorm() / static_cast<float>(D);
    const float scale = std::sqrt(var + eps);
    out.row(i) = (centred.array() / scale) * wv.array() + bv.array();
    if (scale_out) (*scale_out)(i) = scale;
  }
}

// out[S, N] = x[S, K] @ W[K, N] + b[N]; W is a Conv1D weight stored [in, out].
void linear_forward(RowMatrixXf& out, const RowMatrixXf& x, const float* W, const float* b, Eigen::Index N) {
  const Eigen::Index K = x.cols();
  ConstMatrixRef Wm(W, K, N);
  out.resize(x.rows(), N);
  out.noalias() = x * Wm;
  out.rowwise() += ConstRowVectorRef(b, N);
}

void activation_forward(RowMatrixXf& out, const RowMatrixXf& pre, Activation act) {
  out.resize(pre.rows(), pre.cols());
  auto x = pre.array();
  switch (act) {
    case Activation::GeluNew: {
      // gelu_new: the tanh approximation GPT-2 was trained with.
      constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
      out.array() = 0.5f * x * (1.0f + (k * (x + 0.044715f * x * x * x)).tanh());
      break;
    }
    case Activation::GeluErf:
      out = pre.unaryExpr([](float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); });
      break;
    case Activation::Relu:
      out.array() = x.max(0.0f);
      break;
    case Activation::Silu:
      out.array() = x / (1.0f + (-x).exp());
      break;
  }
}

// Attention is the only layer that mixes information across positions. For each head:
// scores = q_h k_h^T * scale (masked above the diagonal), pattern = softmax(scores), z_h = pattern v_h.
void attention_forward(LayerActivations& a, int n_head, int d_head, float scale, bool store_scores) {
  const Eigen::Index S = a.q.rows();
  const size_t SS = static_cast<size_t>(S * S);
  a.pattern_hqk.assign(static_cast<size_t>(n_head) * SS, 0.0f);
  if (store_scores) a.scores_hqk.assign(static_cast<size_t>(n_head) * SS, kNegInf);
  a.z.resize(S, static_cast<Eigen::Index>(n_head) * d_head);
#pragma omp parallel for schedule(static) if (S >= 64)
  for (int h = 0; h < n_head; ++h) {
    const auto q_h = a.q.middleCols(h * d_head, d_head);
    const auto k_h = a.k.middleCols(h * d_head, d_head);
    const auto v_h = a.v.middleCols(h * d_head, d_head);
    MatrixRef pattern(a.pattern_hqk.data() + h * SS, S, S);
    pattern.noalias() = q_h * k_h.transpose();
    for (Eigen::Index i = 0; i < S; ++i) {
      auto row = pattern.row(i).head(i + 1).array();
      row *= scale;
      if (store_scores) {
        float* srow = a.scores_hqk.data() + h * SS + static_cast<size_t>(i * S);
        for (Eigen::Index j = 0; j <= i; ++j) srow[j] = row(j);
      }
      const float m = row.maxCoeff();
      row = (row - m).exp();
      row /= row.sum();
      pattern.row(i).tail(S - i - 1).setZero();
    }
    a.z.middleCols(h * d_head, d_head).noalias() = pattern * v_h;
  }
}

void check_tokens(const ModelConfig& c, std::span<const int32_t> tokens) {
  if (tokens.empty()) throw Error("the prompt is empty: give at least one token (with --text, BOS is added).");
  if (tokens.size() > static_cast<size_t>(c.n_ctx))
    throw Error("the prompt is " + std::to_string(tokens.size()) + " tokens but this model's context is " +
                std::to_string(c.n_ctx) + " (n_positions); shorten the text.");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= c.d_vocab)
      throw Error("token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(c.d_vocab) + ").");
}

}  // namespace

std::shared_ptr<ActivationCache> forward(std::shared_ptr<const Weights> weights, std::span<const int32_t> tokens,
                                         const RunOptions& options) {
  const ModelConfig& c = weights->config();
  check_tokens(c, tokens);
  auto cache = std::make_shared<ActivationCache>(weights, std::vector<int32_t>(tokens.begin(), tokens.end()));
  const Eigen::Index S = static_cast<Eigen::Index>(tokens.size()), D = c.d_model;

  // hook_embed, hook_pos_embed [pos, d_model]
  cache->embed.resize(S, D);
  cache->pos_embed.resize(S, D);
  for (Eigen::Index i = 0; i < S; ++i) {
    cache->embed.row(i) = ConstRowVectorRef(weights->wte() + static_cast<int64_t>(tokens[i]) * D, D);
    cache->pos_embed.row(i) = ConstRowVectorRef(weights->wpe() + i * D, D);
  }
  RowMatrixXf resid = cache->embed + cache->pos_embed;  // [pos, d_model]

  LayerActivations scratch;  // reused across layers when only logits are kept
  RowMatrixXf normalized, qkv;
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& W = weights->layer(l);
    LayerActivations& a = options.logits_only ? scratch : cache->layer(l);
    a.resid_pre = resid;

    layernorm_forward(normalized, nullptr, a.resid_pre, W.ln1_w, W.ln1_b, c.layer_norm_eps);
    linear_forward(qkv, normalized, W.attn_w, W.attn_b, 3 * D);
    a.q = qkv.leftCols(D);
    a.k = qkv.middleCols(D, D);
    a.v = qkv.rightCols(D);
    attention_forward(a, c.n_head, c.d_head, cache->attention_scale(l), options.store_scores);

    // Two ways to the same attn_out: the concatenated heads through all of W_O at once, and each
    // head through its own rows of W_O, summed. Both are computed; their gap is float rounding.
    linear_forward(a.attn_out, a.z, W.proj_w, W.proj_b, D);
    RowMatrixXf by_head_sum = RowMatrixXf::Zero(S, D);
    if (options.store_results) a.result_phd.assign(static_cast<size_t>(S * c.n_head * D), 0.0f);
    RowMatrixXf r_h(S, D);
    for (int h = 0; h < c.n_head; ++h) {
      r_h.noalias() = a.z.middleCols(h * c.d_head, c.d_head) * weights->W_O(l, h);
      by_head_sum += r_h;
      if (options.store_results)
        for (Eigen::Index p = 0; p < S; ++p)
          RowVectorRef(a.result_phd.data() + (p * c.n_head + h) * D, D) = r_h.row(p);
    }
    by_head_sum.rowwise() += ConstRowVectorRef(W.proj_b, D);
    a.concat_vs_sum_max_abs_diff = S > 0 ? (a.attn_out - by_head_sum).cwiseAbs().maxCoeff() : 0.0f;

    a.resid_mid = a.resid_pre + a.attn_out;
    layernorm_forward(normalized, nullptr, a.resid_mid, W.ln2_w, W.ln2_b, c.layer_norm_eps);
    linear_forward(a.mlp_pre, normalized, W.fc_w, W.fc_b, c.d_mlp);
    activation_forward(a.mlp_post, a.mlp_pre, c.activation);
    linear_forward(a.mlp_out, a.mlp_post, W.mlp_proj_w, W.mlp_proj_b, D);
    a.resid_post = a.resid_mid + a.mlp_out;
    resid = a.resid_post;
  }
  if (options.logits_only) cache->layers().clear();

  layernorm_forward(cache->ln_final_normalized, &cache->ln_final_scale, resid, weights->ln_f_w(), weights->ln_f_b(),
                    c.layer_norm_eps);
  // logits [pos, d_vocab] = ln_final [pos, d_model] @ W_U; W_U's rows are kept [d_vocab, d_model].
  ConstMatrixRef unembed(weights->unembed_rows(), c.d_vocab, D);
  cache->logits.resize(S, c.d_vocab);
  cache->logits.noalias() = cache->ln_final_normalized * unembed.transpose();
  return cache;
}

}  // namespace hs
