// QK tracing (qk_trace.h): each side's components, projected through the frozen ln1, W_Q (W_K),
// the frozen q/k norm and the rotation, then the top pairs of their bilinear terms.
#include "core/analysis/qk_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>

#include "core/error.h"
#include "core/features/features.h"
#include "core/features/sae.h"
#include "core/model/hooks.h"
#include "core/model/ops.h"
#include "core/model/weights.h"

namespace hs {

namespace {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVectorXd = Eigen::Matrix<double, 1, Eigen::Dynamic>;

// A norm with its scale frozen at one position: v -> (v - mean(v) for LayerNorm) * w / scale.
// Linear, so it maps each component on its own; a bias of the norm is a separate constant.
struct FrozenNorm {
  RowVectorXd w_over_scale;  // [d_model]
  bool centre = false;
  void apply(RowMatrixXd& rows) const {
    if (centre) rows.colwise() -= rows.rowwise().mean();
    rows.array().rowwise() *= w_over_scale.array();
  }
};

// The norm `w` (nullptr: none, the identity) of one row `input` [1, D] as the forward pass
// computes it, frozen at that row's scale.
FrozenNorm freeze_norm(const RowMatrixXf& input, const float* w, const ModelConfig& c) {
  FrozenNorm n;
  RowMatrixXf out;
  VectorXf scale;
  norm_forward(out, &scale, input, w, nullptr, c.norm_eps, c.architecture.norm);
  n.centre = c.architecture.norm == NormKind::LayerNorm;
  n.w_over_scale = Eigen::Map<const RowVectorXf>(w, c.d_model).cast<double>() / double{scale(0)};
  return n;
}

// One side of the score (the query's or the key's): its position, the map from a residual
// component to its share of q_rot (k_rot), and the components gathered so far.
class Side {
 public:
  Side(const ActivationCache& cache, int L, int head, int pos, bool keys) : cache_(cache), keys_(keys), pos_(pos) {
    const ModelConfig& c = cache.config();
    const Weights& W = *cache.weights();
    const LayerWeights& lw = W.layer(L);
    const int dh = c.d_head;
    const Eigen::Index q_width = Eigen::Index{c.n_heads} * dh, kv_width = Eigen::Index{c.n_key_value_heads} * dh;
    // ln1 at this position, as the layer read it.
    const RowMatrixXf x = cache.layer(L).resid_pre.row(pos);
    ln1_ = freeze_norm(x, lw.norm1_w, c);
    W_ = (keys ? W.W_K(L, head) : W.W_Q(L, head)).cast<double>();  // [d_model, d_head]
    // The constant: ln1's bias through the projection, plus the projection's bias.
    constant_ = RowVectorXd::Zero(dh);
    if (lw.norm1_b) constant_.noalias() = Eigen::Map<const RowVectorXf>(lw.norm1_b, c.d_model).cast<double>() * W_;
    const Eigen::Index offset = keys ? q_width + Eigen::Index{head} * dh : Eigen::Index{head} * dh;
    if (lw.b_qkv) constant_ += Eigen::Map<const RowVectorXf>(lw.b_qkv + offset, dh).cast<double>();
    if (c.architecture.qk_norm) {
      // The q/k norm's scale of this head at this position, from the projection the forward pass
      // computed (ln1's output through the packed W_qkv).
      RowMatrixXf normalized, qkv, scales;
      VectorXf unused;
      norm_forward(normalized, &unused, x, lw.norm1_w, lw.norm1_b, c.norm_eps, c.architecture.norm);
      linear_forward(qkv, normalized, W.packed(L).W_qkv, lw.b_qkv);
      if (keys)
        head_rmsnorm_forward(qkv.middleCols(q_width, kv_width), c.n_key_value_heads, dh, lw.k_norm_w, c.norm_eps, &scales);
      else
        head_rmsnorm_forward(qkv.leftCols(q_width), c.n_heads, dh, lw.q_norm_w, c.norm_eps, &scales);
      qk_scale_ = Eigen::Map<const RowVectorXf>(keys ? lw.k_norm_w : lw.q_norm_w, dh).cast<double>() / double{scales(0, head)};
    }
    if (cache.has_rotary()) {
      const RotaryParams& r = rotary_params(c, L);
      RowMatrixXf cos, sin;  // [1, dim/2]: the forward pass's tables at this position
      rotary_tables(cos, sin, rotary_inv_freq(r), pos, 1);
      cos_ = cos.row(0).cast<double>();
      sin_ = sin.row(0).cast<double>();
    }
    sum_ = RowVectorXd::Zero(c.d_model);
  }

  // Adds components (rows of `vectors` [n, d_model], the residual vectors at this position),
  // described by `meta` (n of them).
  void add(RowMatrixXd& vectors, const std::vector<QkComponent>& meta) {
    if (vectors.rows() == 0) return;
    sum_ += vectors.colwise().sum();
    ln1_.apply(vectors);
    RowMatrixXd u = vectors * W_;  // [n, d_head]
    finish(u);
    append(u);
    components.insert(components.end(), meta.begin(), meta.end());
  }
  // The constant row, last.
  void add_constant(int L, int head) {
    RowMatrixXd u = constant_;
    finish(u);
    append(u);
    components.push_back({QkComponent::Kind::Constant, L, head, -1, 0.0f, 0.0});
  }
  int pos() const { return pos_; }
  // Largest |sum of the components - hook_resid_pre| at this position.
  double resid_error(int L) const {
    return (sum_ - cache_.layer(L).resid_pre.row(pos_).cast<double>()).cwiseAbs().maxCoeff();
  }

  // The projected rows as a matrix [n, d_head]: each component's share of q_rot (k_rot), rounded
  // to float (they are made of float activations; float halves what a model with hundreds of
  // thousands of neurons a side holds), and their sum taken before the rounding.
  Eigen::Map<const RowMatrixXf> projected() const {
    return {projected_.data(), static_cast<Eigen::Index>(components.size()), width_};
  }
  const RowVectorXd& projected_sum() const { return projected_sum_; }

  std::vector<QkComponent> components;

 private:
  // The q/k norm with its scale frozen, then the rotation (rotate-half pairs i, i + dim/2).
  void finish(RowMatrixXd& u) const {
    if (qk_scale_.size() > 0) u.array().rowwise() *= qk_scale_.array();
    const Eigen::Index half = cos_.size();
    for (Eigen::Index i = 0; i < half; ++i) {
      const Eigen::VectorXd a = u.col(i), b = u.col(i + half);
      u.col(i) = a * cos_(i) - b * sin_(i);
      u.col(i + half) = b * cos_(i) + a * sin_(i);
    }
  }
  // Rows are appended to a flat buffer (amortised growth: a side gets its components in many
  // blocks, and resizing a matrix each time would copy it each time).
  void append(const RowMatrixXd& u) {
    width_ = u.cols();
    if (projected_sum_.size() == 0) projected_sum_ = RowVectorXd::Zero(width_);
    projected_sum_ += u.colwise().sum();
    const size_t n0 = projected_.size();
    projected_.resize(n0 + static_cast<size_t>(u.size()));
    Eigen::Map<RowMatrixXf>(projected_.data() + n0, u.rows(), u.cols()) = u.cast<float>();
  }

  const ActivationCache& cache_;
  bool keys_ = false;
  int pos_ = 0;
  FrozenNorm ln1_;
  RowMatrixXd W_;
  RowVectorXd constant_, qk_scale_, cos_, sin_, sum_;
  std::vector<float> projected_;  // [n, d_head], row-major
  RowVectorXd projected_sum_;     // [d_head]
  Eigen::Index width_ = 0;
};

// mlp.hook_post of layer l at the given positions only, [positions, d_mlp], with the forward
// pass's kernels (ActivationCache::mlp_post derives every position: a whole MLP pass per layer
// for two rows).
RowMatrixXf mlp_post_rows(const ActivationCache& cache, int l, const std::vector<int>& positions) {
  const ModelConfig& c = cache.config();
  const LayerActivations& a = cache.layer(l);
  const Eigen::Index n = static_cast<Eigen::Index>(positions.size());
  RowMatrixXf out(n, c.d_mlp);
  if (!a.mlp_post.empty()) {
    for (Eigen::Index i = 0; i < n; ++i) out.row(i) = a.mlp_post.row(positions[static_cast<size_t>(i)]);
    return out;
  }
  RowMatrixXf x(n, c.d_model);  // the MLP's input stream: resid_mid, or resid_pre for parallel blocks
  for (Eigen::Index i = 0; i < n; ++i) {
    const int p = positions[static_cast<size_t>(i)];
    if (c.architecture.parallel_blocks)
      x.row(i) = a.resid_pre.row(p);
    else if (!a.resid_mid.empty())
      x.row(i) = a.resid_mid.row(p);
    else
      x.row(i) = a.resid_pre.row(p) + a.attn_out.row(p);
  }
  const LayerWeights& W = cache.weights()->layer(l);
  const PackedLayer& WP = cache.weights()->packed(l);
  RowMatrixXf normalized, pre, up;
  norm_forward(normalized, nullptr, x, W.norm2_w, W.norm2_b, c.norm_eps, c.architecture.norm);
  if (cache.has_gated_mlp()) {
    linear_forward(pre, normalized, WP.W_gate, W.b_gate);
    linear_forward(up, normalized, WP.W_in, W.b_in);
    gated_activation_forward(out, pre, up, c.activation);
  } else {
    linear_forward(pre, normalized, WP.W_in, W.b_in);
    activation_forward(out, pre, c.activation);
  }
  return out;
}

std::string range_text(int n) { return n == 1 ? "0" : "0-" + std::to_string(n - 1); }

// The transcoder of layer l checked for what the decomposition needs: it writes the layer's
// hook_mlp_out, and its output is linear in its latents (no output normalisation).
void check_transcoder(const Sae& t, const ModelConfig& c, int l) {
  const std::string name = "the transcoder given for layer " + std::to_string(l) + " (" + t.name + ")";
  if (!t.is_transcoder())
    throw Error(name + " is an SAE (it reads and writes " + t.hook_in + "); QK tracing takes transcoders, which read an "
                "MLP's input and write its output, or MLP neurons without them.");
  const auto in = parse_hook_key(c, t.hook_in);
  const auto out = parse_hook_key(c, t.hook_out);
  if (!in || in->layer != l)
    throw Error(name + " reads " + t.hook_in + ", which is not in block " + std::to_string(l) + ".");
  if (!out || out->layer != l || out->hook != HookPoint::MlpOut || (t.hook_out_before_post_norm && c.architecture.post_mlp_norm))
    throw Error(name + " writes " + t.hook_out + "; QK tracing needs transcoders writing blocks." + std::to_string(l) +
                ".hook_mlp_out.");
  if (t.norm != SaeNorm::None && t.norm_out)
    throw Error(name + " normalises its input and undoes it on its output, so its output is not a sum of its latents' "
                "decoder rows; QK tracing needs an output linear in the latents.");
  if (t.d_out != c.d_model)
    throw Error(name + " writes " + std::to_string(t.d_out) + " values a position; the model's d_model is " +
                std::to_string(c.d_model) + ".");
}

}  // namespace

std::string_view to_string(QkComponent::Kind kind) {
  switch (kind) {
    case QkComponent::Kind::Embed: return "embed";
    case QkComponent::Kind::PosEmbed: return "pos_embed";
    case QkComponent::Kind::Head: return "head";
    case QkComponent::Kind::AttnBias: return "attn_bias";
    case QkComponent::Kind::Feature: return "feature";
    case QkComponent::Kind::Skip: return "skip";
    case QkComponent::Kind::Error: return "error";
    case QkComponent::Kind::Neuron: return "neuron";
    case QkComponent::Kind::MlpBias: return "mlp_bias";
    case QkComponent::Kind::Constant: return "constant";
  }
  return "?";
}

std::string qk_component_label(const QkTrace& trace, const QkComponent& c, bool query_side,
                               std::span<const std::string> token_text) {
  const std::string at = " @ " + std::to_string(c.pos);
  const std::string L = std::to_string(c.layer);
  switch (c.kind) {
    case QkComponent::Kind::Embed: {
      const size_t p = static_cast<size_t>(c.pos);
      if (p < token_text.size()) return "emb '" + token_text[p] + "'" + at;
      return "emb " + (p < trace.tokens.size() ? std::to_string(trace.tokens[p]) : std::string("?")) + at;
    }
    case QkComponent::Kind::PosEmbed: return "pos" + at;
    case QkComponent::Kind::Head: return "L" + L + "H" + std::to_string(c.index) + at;
    case QkComponent::Kind::AttnBias: return "b_O L" + L + at;
    case QkComponent::Kind::Feature: return "F" + L + ":" + std::to_string(c.index) + at;
    case QkComponent::Kind::Skip: return "skip L" + L + at;
    case QkComponent::Kind::Error: return "err L" + L + at;
    case QkComponent::Kind::Neuron: return "N" + L + ":" + std::to_string(c.index) + at;
    case QkComponent::Kind::MlpBias: return (trace.transcoders ? "b_dec L" : "b_out L") + L + at;
    case QkComponent::Kind::Constant: return (query_side ? "b_Q L" : "b_K L") + L + "H" + std::to_string(c.index);
  }
  return "?";
}

QkTrace qk_trace(const ActivationCache& cache, int layer, int head, int query_pos, int key_pos,
                 const std::vector<std::shared_ptr<const Sae>>& transcoders, const QkOptions& options) {
  const ModelConfig& c = cache.config();
  const Weights& W = *cache.weights();
  const int S = cache.n_pos(), D = c.d_model, dh = c.d_head;
  if (!cache.interventions.empty())
    throw Error("QK tracing explains a plain run, and this run was made with edits; run the prompt without them.");
  if (cache.n_layer() != c.n_layers || S == 0 || cache.layer(0).resid_pre.rows() != S)
    throw Error("QK tracing needs every activation of the run, and this run kept only the logits.");
  if (layer < 0 || layer >= c.n_layers)
    throw Error("layer " + std::to_string(layer) + " is out of range: the model has " + std::to_string(c.n_layers) +
                " layers (" + range_text(c.n_layers) + ").");
  if (head < 0 || head >= c.n_heads)
    throw Error("head " + std::to_string(head) + " is out of range: the model has " + std::to_string(c.n_heads) +
                " heads a layer (" + range_text(c.n_heads) + ").");
  for (const auto& [what, p] : {std::pair{"query", query_pos}, std::pair{"key", key_pos}})
    if (p < 0 || p >= S)
      throw Error(std::string(what) + " position " + std::to_string(p) + " is out of range: the prompt has " +
                  std::to_string(S) + " tokens (positions " + range_text(S) + ").");
  if (key_pos > query_pos)
    throw Error("key position " + std::to_string(key_pos) + " is after query position " + std::to_string(query_pos) +
                ": attention is causal, a query reads only itself and earlier keys.");
  const int window = attention_window(c, layer);
  if (key_pos < first_key(window, query_pos))
    throw Error("key position " + std::to_string(key_pos) + " is outside layer " + std::to_string(layer) +
                "'s sliding window of " + std::to_string(window) + " keys: query " + std::to_string(query_pos) +
                " reads keys " + std::to_string(first_key(window, query_pos)) + "-" + std::to_string(query_pos) +
                ", so this score is masked and there is nothing to trace.");
  const bool features = !transcoders.empty();
  if (features && static_cast<int>(transcoders.size()) != c.n_layers)
    throw Error("QK tracing with transcoders needs one for each of the model's " + std::to_string(c.n_layers) +
                " layers; " + std::to_string(transcoders.size()) + " were given.");
  if (features)
    for (int l = 0; l < layer; ++l) {
      if (!transcoders[static_cast<size_t>(l)]) throw Error("no transcoder was given for layer " + std::to_string(l) + ".");
      check_transcoder(*transcoders[static_cast<size_t>(l)], c, l);
    }

  QkTrace t;
  t.layer = layer;
  t.head = head;
  t.kv_head = c.kv_head(head);
  t.query_pos = query_pos;
  t.key_pos = key_pos;
  t.transcoders = features;
  t.tokens = cache.tokens();
  t.softcap = c.architecture.attn_softcap;
  t.attention_scale = cache.attention_scale(layer);

  // The run's score: the stored one, or the forward pass's expressions on the query's row.
  const LayerActivations& a = cache.layer(layer);
  const ConstRowVectorRef q_rot = a.q.row(query_pos), k_rot = a.k.row(key_pos);
  t.score_before_softcap =
      double{t.attention_scale} * q_rot.segment(Eigen::Index{head} * dh, dh).cast<double>().dot(
                                      k_rot.segment(Eigen::Index{t.kv_head} * dh, dh).cast<double>());
  if (!a.scores_hqk.empty()) {
    t.score = a.scores_hqk[(static_cast<size_t>(head) * S + query_pos) * S + key_pos];
  } else {
    std::vector<float> row(static_cast<size_t>(query_pos) + 1);
    for (int k = 0; k <= query_pos; ++k)
      row[static_cast<size_t>(k)] = q_rot.segment(Eigen::Index{head} * dh, dh).dot(a.k.row(k).segment(Eigen::Index{t.kv_head} * dh, dh));
    cache.finish_scores(layer, query_pos, row.data());
    t.score = row[static_cast<size_t>(key_pos)];
  }

  Side query(cache, layer, head, query_pos, false), key(cache, layer, t.kv_head, key_pos, true);
  std::vector<Side*> sides = {&query, &key};
  using Kind = QkComponent::Kind;
  auto vector_of = [&](ConstRowVectorRef v) { return RowMatrixXd(v.cast<double>()); };

  for (Side* s : sides) {
    RowMatrixXd v = vector_of(cache.embed.row(s->pos()));
    s->add(v, {{Kind::Embed, -1, -1, s->pos()}});
    if (cache.has_pos_embed()) {
      v = vector_of(cache.pos_embed.row(s->pos()));
      s->add(v, {{Kind::PosEmbed, -1, -1, s->pos()}});
    }
  }
  for (int l = 0; l < layer; ++l) {
    const LayerWeights& lw = W.layer(l);
    const LayerActivations& al = cache.layer(l);
    // MLP inputs and outputs of this layer at both positions, computed once for the two sides.
    RowMatrixXf mlp_post, tc_in;
    const Sae* tc = features ? transcoders[static_cast<size_t>(l)].get() : nullptr;
    if (!features) {
      mlp_post = mlp_post_rows(cache, l, {query_pos, key_pos});  // [2, d_mlp]: the query's, the key's
    } else {
      tc_in = hook_rows(cache, tc->hook_in);  // [pos, d_in]
    }
    for (Side* s : sides) {
      const int p = s->pos();
      const Eigen::Index side_row = s == &query ? 0 : 1;
      // The heads: z_h W_O[h], through the post-attention norm frozen at this position.
      const RowMatrixXf z = al.z.row(p);  // [1, n_heads * d_head]
      FrozenNorm post1;
      if (c.architecture.post_attn_norm) {
        RowMatrixXf in;
        linear_forward(in, z, W.packed(l).W_O, lw.b_O);
        post1 = freeze_norm(in, lw.post_attn_norm_w, c);
      }
      RowMatrixXd heads(c.n_heads + (c.architecture.attn_out_bias ? 1 : 0), D);
      std::vector<QkComponent> meta;
      for (int h = 0; h < c.n_heads; ++h) {
        heads.row(h).noalias() = z.middleCols(Eigen::Index{h} * dh, dh).cast<double>() * W.W_O(l, h).cast<double>();
        meta.push_back({Kind::Head, l, h, p});
      }
      if (c.architecture.attn_out_bias) {
        heads.row(c.n_heads) = W.b_O(l).transpose().cast<double>();
        meta.push_back({Kind::AttnBias, l, -1, p});
      }
      if (c.architecture.post_attn_norm) post1.apply(heads);
      s->add(heads, meta);

      if (!features) {
        // Neurons: hook_post x W_out row, through the post-MLP norm frozen at this position; in
        // blocks, so that a wide MLP never needs a [d_mlp, d_model] matrix of doubles.
        const RowMatrixXf post = mlp_post.row(side_row);
        FrozenNorm post2;
        if (c.architecture.post_mlp_norm) {
          RowMatrixXf in;
          linear_forward(in, post, W.packed(l).W_out, lw.b_out);
          post2 = freeze_norm(in, lw.post_mlp_norm_w, c);
        }
        const ConstMatrixRef W_out = W.W_out(l);  // [d_mlp, d_model]
        std::vector<int> live;
        for (int n = 0; n < c.d_mlp; ++n)
          if (post(0, n) != 0.0f) live.push_back(n);
        constexpr size_t kBlock = 512;
        for (size_t b = 0; b < live.size(); b += kBlock) {
          const size_t e = std::min(live.size(), b + kBlock);
          RowMatrixXd block(static_cast<Eigen::Index>(e - b), D);
          meta.clear();
          for (size_t i = b; i < e; ++i) {
            const int n = live[i];
            block.row(static_cast<Eigen::Index>(i - b)) = double{post(0, n)} * W_out.row(n).cast<double>();
            meta.push_back({Kind::Neuron, l, n, p, post(0, n)});
          }
          if (c.architecture.post_mlp_norm) post2.apply(block);
          s->add(block, meta);
        }
        if (c.architecture.mlp_bias) {
          RowMatrixXd bias = Eigen::Map<const RowVectorXf>(lw.b_out, D).cast<double>();
          if (c.architecture.post_mlp_norm) post2.apply(bias);
          s->add(bias, {{Kind::MlpBias, l, -1, p}});
        }
      } else {
        // Transcoder features: activation x decoder row; the skip path; b_dec; and the error,
        // what the real hook_mlp_out holds beyond those (so the parts add up to it exactly).
        const RowMatrixXf x = tc_in.row(p);
        const SaeRun run = run_sae(*tc, x);
        const bool rescale = tc->activation == SaeActivation::TopK && tc->rescale_acts_by_decoder_norm;
        std::vector<int> live;
        for (int u = 0; u < tc->d_sae; ++u)
          if (run.feature_acts(0, u) != 0.0f) live.push_back(u);
        const bool skip = tc->W_skip.size() > 0;
        RowMatrixXd parts(static_cast<Eigen::Index>(live.size()) + (skip ? 1 : 0) + 2, D);
        meta.clear();
        Eigen::Index r = 0;
        for (int u : live) {
          double act = run.feature_acts(0, u);
          if (rescale) act /= double{tc->W_dec_norm(u)};
          parts.row(r++) = act * tc->W_dec.row(u).cast<double>();
          meta.push_back({Kind::Feature, l, u, p, run.feature_acts(0, u)});
        }
        if (skip) {
          parts.row(r++) = x.cast<double>() * tc->W_skip.transpose().cast<double>();
          meta.push_back({Kind::Skip, l, -1, p});
        }
        parts.row(r++) = tc->b_dec.size() > 0 ? RowVectorXd(tc->b_dec.cast<double>()) : RowVectorXd::Zero(D);
        meta.push_back({Kind::MlpBias, l, -1, p});
        parts.row(r) = al.mlp_out.row(p).cast<double>() - parts.topRows(r).colwise().sum();
        meta.push_back({Kind::Error, l, -1, p});
        s->add(parts, meta);
      }
    }
  }
  query.add_constant(layer, head);
  key.add_constant(layer, t.kv_head);

  // The terms: scale * u_i . v_j. Marginals and the total from the side sums.
  const double scale = t.attention_scale;
  const Eigen::Map<const RowMatrixXf> U = query.projected();  // [n_q, d_head]
  const Eigen::Map<const RowMatrixXf> V = key.projected();    // [n_k, d_head]
  const RowVectorXd& sum_u = query.projected_sum();
  const RowVectorXd& sum_v = key.projected_sum();
  t.total = scale * sum_u.dot(sum_v);
  Eigen::VectorXd mq(U.rows()), mk(V.rows());
  for (Eigen::Index i = 0; i < U.rows(); ++i) mq(i) = scale * U.row(i).cast<double>().dot(sum_v);
  for (Eigen::Index j = 0; j < V.rows(); ++j) mk(j) = scale * V.row(j).cast<double>().dot(sum_u);
  t.query = std::move(query.components);
  t.key = std::move(key.components);
  for (size_t i = 0; i < t.query.size(); ++i) t.query[i].marginal = mq(static_cast<Eigen::Index>(i));
  for (size_t j = 0; j < t.key.size(); ++j) t.key[j].marginal = mk(static_cast<Eigen::Index>(j));
  t.query_resid_error = query.resid_error(layer);
  t.key_resid_error = key.resid_error(layer);

  // The top pairs. |u_i . v_j| <= |u_i| |v_j|: visiting both sides by decreasing norm, a row (and
  // then the whole search) stops once that bound is below the n-th largest |term| so far.
  const int nq = static_cast<int>(U.rows()), nk = static_cast<int>(V.rows());
  const int64_t all = int64_t{nq} * nk;
  const int64_t want = options.top <= 0 ? all : std::min<int64_t>(options.top, all);
  Eigen::VectorXd norm_u(nq), norm_v(nk);
  for (int i = 0; i < nq; ++i) norm_u(i) = U.row(i).cast<double>().norm();
  for (int j = 0; j < nk; ++j) norm_v(j) = V.row(j).cast<double>().norm();
  std::vector<int> order_u(static_cast<size_t>(nq)), order_v(static_cast<size_t>(nk));
  std::iota(order_u.begin(), order_u.end(), 0);
  std::iota(order_v.begin(), order_v.end(), 0);
  std::stable_sort(order_u.begin(), order_u.end(), [&](int x, int y) { return norm_u(x) > norm_u(y); });
  std::stable_sort(order_v.begin(), order_v.end(), [&](int x, int y) { return norm_v(x) > norm_v(y); });
  // Larger |term| first, then query, then key: one order for the heap and the result.
  auto before = [](const QkPair& x, const QkPair& y) {
    const double ax = std::abs(x.term), ay = std::abs(y.term);
    if (ax != ay) return ax > ay;
    return x.query != y.query ? x.query < y.query : x.key < y.key;
  };
  std::priority_queue<QkPair, std::vector<QkPair>, decltype(before)> heap(before);  // top: the weakest kept
  const double slack = 1.0 + 1e-12;  // the bound in rounded arithmetic
  for (int i : order_u) {
    if (want == 0) break;
    const bool full = static_cast<int64_t>(heap.size()) == want;
    if (full && nk > 0 && std::abs(scale) * norm_u(i) * norm_v(order_v[0]) * slack < std::abs(heap.top().term)) break;
    const RowVectorXd u = U.row(i).cast<double>();
    for (int j : order_v) {
      if (static_cast<int64_t>(heap.size()) == want &&
          std::abs(scale) * norm_u(i) * norm_v(j) * slack < std::abs(heap.top().term))
        break;
      const QkPair pair{i, j, scale * u.dot(V.row(j).cast<double>())};
      if (static_cast<int64_t>(heap.size()) < want) {
        heap.push(pair);
      } else if (before(pair, heap.top())) {
        heap.pop();
        heap.push(pair);
      }
    }
  }
  t.pairs.reserve(heap.size());
  while (!heap.empty()) {
    t.pairs.push_back(heap.top());
    heap.pop();
  }
  std::sort(t.pairs.begin(), t.pairs.end(), before);
  double listed = 0.0;
  for (const QkPair& p : t.pairs) listed += p.term;
  t.remainder = t.total - listed;
  return t;
}

}  // namespace hs
