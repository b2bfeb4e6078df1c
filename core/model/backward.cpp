// The backward pass (backward.h): forward.cpp read in reverse. Each gradient is a Flow: a matrix
// and whether anything of the metric reaches it yet. A flow that is not live is never computed
// with, and its key is left out of the result: the metric does not depend on it.
#include "core/model/backward.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/model/forward.h"
#include "core/model/ops.h"
#include "core/model/thread_scope.h"

namespace hs {

GradientCache::GradientCache(std::shared_ptr<const Weights> weights, std::vector<int32_t> tokens, Metric metric)
    : weights_(std::move(weights)), tokens_(std::move(tokens)), metric_(std::move(metric)) {
  const size_t n = static_cast<size_t>(kHookCount) * static_cast<size_t>(config().n_layers + 1);
  grads_.resize(n);
  present_.assign(n, 0);
}

size_t GradientCache::slot(HookPoint hook, int l) const {
  const int layer = hook_info(hook).per_layer ? l + 1 : 0;
  return static_cast<size_t>(hook) * static_cast<size_t>(config().n_layers + 1) + static_cast<size_t>(layer);
}

bool GradientCache::has(HookPoint hook, int l) const {
  if (hook_info(hook).per_layer && (l < 0 || l >= config().n_layers)) return false;
  return present_[slot(hook, l)] != 0;
}

bool GradientCache::has(std::string_view key) const {
  const std::optional<HookKey> k = parse_hook_key(config(), key);
  return k && has(k->hook, k->layer);
}

std::vector<std::string> GradientCache::keys() const {
  std::vector<std::string> out;
  const std::span<const HookInfo> table = hook_table();
  for (const HookInfo& h : table)
    if (!h.per_layer && h.hook < HookPoint::ResidPre && has(h.hook, -1)) out.push_back(hook_key(h.hook, -1));
  for (int l = 0; l < config().n_layers; ++l)
    for (const HookInfo& h : table)
      if (h.per_layer && has(h.hook, l)) out.push_back(hook_key(h.hook, l));
  for (const HookInfo& h : table)
    if (!h.per_layer && h.hook > HookPoint::ResidPost && has(h.hook, -1)) out.push_back(hook_key(h.hook, -1));
  return out;
}

const RowMatrixXf& GradientCache::rows(HookPoint hook, int l) const {
  if (!has(hook, l)) {
    const std::string key = hook_key(hook, l);
    if (!hook_exists(config(), hook) || (hook_info(hook).per_layer && (l < 0 || l >= config().n_layers)))
      throw Error("\"" + key + "\" is not a key of this model (`headscope-cli hooks --model DIR` lists them).");
    if (!keeps(hook)) throw Error("the gradient of \"" + key + "\" was not kept (GradOptions::keep).");
    throw Error("the metric (" + std::string(to_string(metric_.kind)) + ") does not depend on \"" + key +
                "\": it has no gradient.");
  }
  return grads_[slot(hook, l)];
}

Tensor GradientCache::get(HookPoint hook, int l) const {
  const RowMatrixXf& g = rows(hook, l);
  return Tensor(hook_shape(config(), hook, n_pos()), std::vector<float>(g.data(), g.data() + g.size()));
}

Tensor GradientCache::get(std::string_view key) const {
  const std::optional<HookKey> k = parse_hook_key(config(), key);
  if (!k || !hook_exists(config(), k->hook))
    throw Error("unknown activation \"" + std::string(key) + "\" (`headscope-cli hooks --model DIR` lists the keys).");
  return get(k->hook, k->layer);
}

bool GradientCache::keeps(HookPoint hook) const {
  return keep_.empty() || std::find(keep_.begin(), keep_.end(), hook) != keep_.end();
}

void GradientCache::set(HookPoint hook, int l, RowMatrixXf grad) {
  const size_t s = slot(hook, l);
  grads_[s] = std::move(grad);
  present_[s] = 1;
}

void attention_backward(RowMatrixXf& d_q, RowMatrixXf& d_k, RowMatrixXf& d_v, const RowMatrixXf& q,
                        const RowMatrixXf& k, const RowMatrixXf& v, const RowMatrixXf& pattern, const ModelConfig& c,
                        float scale, const AttentionBackward& io) {
  const Eigen::Index S = q.rows();
  const int H = c.n_heads, KV = c.n_key_value_heads, dh = c.d_head, group = H / KV;
  d_q.setZero(S, q.cols());
  d_k.setZero(S, k.cols());
  d_v.setZero(S, v.cols());
  if (io.d_pattern) io.d_pattern->resize(H * S, S);
  if (io.d_scores) io.d_scores->resize(H * S, S);
  // One [S, S] pair of buffers per thread, reused over its heads: the pattern's and the scores'
  // gradients of the head in hand (or the caller's rows of them, when kept).
  const int threads = std::max(1, omp_get_max_threads());
  std::vector<RowMatrixXf> scratch_p(static_cast<size_t>(threads)), scratch_s(static_cast<size_t>(threads));
  // With a soft-cap, a third: the head's capped scores, for the cap's derivative.
  std::vector<RowMatrixXf> scratch_y(io.softcap > 0.0f ? static_cast<size_t>(threads) : 0);
  // Key/value groups are independent (each writes its own columns of d_k and d_v); the query
  // heads of one group run in order on one thread, so d_k and d_v sum over them without a race.
#pragma omp parallel for schedule(static) if (S * S * dh * H >= 65536)
  for (int kv = 0; kv < KV; ++kv) {
    RowMatrixXf& dP = scratch_p[static_cast<size_t>(omp_get_thread_num())];
    RowMatrixXf& dS = scratch_s[static_cast<size_t>(omp_get_thread_num())];
    dP.resize(S, S);
    dS.resize(S, S);
    const ConstStridedMatrixRef k_kv(k.data() + kv * dh, S, dh, Eigen::OuterStride<>(k.cols()));  // [key_pos, d_head]
    const ConstStridedMatrixRef v_kv(v.data() + kv * dh, S, dh, Eigen::OuterStride<>(v.cols()));
    for (int h = kv * group; h < (kv + 1) * group; ++h) {
      const ConstMatrixRef P(pattern.data() + h * S * S, S, S);  // [query_pos, key_pos]
      // dM/dpattern = d_z_h @ v^T over every key, the masked ones too (backward.h).
      if (io.d_z) dP.noalias() = io.d_z->middleCols(h * dh, dh) * v_kv.transpose();
      else dP.setZero();
      if (io.pattern_seed) dP += io.pattern_seed->middleRows(h * S, S);
      if (io.d_pattern) io.d_pattern->middleRows(h * S, S) = dP;
      if (io.d_z) d_v.middleCols(kv * dh, dh).noalias() += P.transpose() * io.d_z->middleCols(h * dh, dh);
      // Through the softmax of each query's row of keys first..i (first_key: 0 without a window);
      // masked scores have gradient 0.
      for (Eigen::Index i = 0; i < S; ++i) {
        const Eigen::Index first = first_key(io.window, static_cast<int>(i));
        softmax_backward(dS.row(i).data() + first, P.row(i).data() + first, dP.row(i).data() + first, i + 1 - first);
        dS.row(i).head(first).setZero();
        dS.row(i).tail(S - i - 1).setZero();
      }
      if (io.scores_seed) {
        const ConstMatrixRef seed(io.scores_seed->data() + h * S * S, S, S);
        for (Eigen::Index i = 0; i < S; ++i) {
          const Eigen::Index first = first_key(io.window, static_cast<int>(i));
          dS.row(i).segment(first, i + 1 - first) += seed.row(i).segment(first, i + 1 - first);
        }
      }
      if (io.d_scores) io.d_scores->middleRows(h * S, S) = dS;
      if (io.softcap > 0.0f) {
        // scores = cap * tanh(raw * scale / cap): the capped scores again, with the forward's
        // operations (attention_forward), then the cap's derivative on the kept keys.
        RowMatrixXf& Y = scratch_y[static_cast<size_t>(omp_get_thread_num())];
        Y.resize(S, S);
        head_scores_forward(Y.data(), S, q.data() + h * dh, q.cols(), S, 0, k_kv.data(), k.cols(), S, dh);
        for (Eigen::Index i = 0; i < S; ++i) {
          const Eigen::Index first = first_key(io.window, static_cast<int>(i));
          auto row = Y.row(i).segment(first, i + 1 - first).array();
          row *= scale;
          softcap_forward(row.data(), row.size(), io.softcap);
          softcap_backward(dS.row(i).data() + first, row.data(), row.size(), io.softcap);
        }
      }
      // raw scores = q_h k^T * scale
      d_q.middleCols(h * dh, dh).noalias() = scale * (dS * k_kv);
      d_k.middleCols(kv * dh, dh).noalias() += scale * (dS.transpose() * q.middleCols(h * dh, dh));
    }
  }
}

namespace {

// A gradient on its way back, and whether the metric reaches it.
struct Flow {
  RowMatrixXf m;
  bool live = false;
  // Makes it live, zeros when it was not.
  void ensure(Eigen::Index rows, Eigen::Index cols) {
    if (!live) m.setZero(rows, cols);
    live = true;
  }
  void add(const Flow& o) {
    if (!o.live) return;
    if (!live) m = o.m;
    else m += o.m;
    live = true;
  }
};

class Backward {
 public:
  Backward(const ActivationCache& cache, const Metric& metric, GradientCache& out)
      : cache_(cache), c_(cache.config()), metric_(metric), out_(out), S_(cache.n_pos()) {}

  void run();

 private:
  // Adds the metric's seed when it reads (hook, l): the flow becomes live.
  void seed(HookPoint hook, int l, Flow& f, Eigen::Index rows, Eigen::Index cols) {
    if (!metric_reads(metric_, hook, l)) return;
    f.ensure(rows, cols);
    add_metric_seed(metric_, cache_, f.m);
  }
  void record(HookPoint hook, int l, const Flow& f) {
    if (f.live && hook_exists(c_, hook) && out_.keeps(hook)) out_.set(hook, l, f.m);
  }
  // The same for a flow nothing reads afterwards: moved, not copied (the per-head results and
  // the logits are 2.2 M and 1 M of a 20-token GPT-2-small gradient's 6.5 M floats).
  void record_last(HookPoint hook, int l, Flow&& f) {
    if (f.live && hook_exists(c_, hook) && out_.keeps(hook)) out_.set(hook, l, std::move(f.m));
  }
  // A hook point on the way back: the metric's seed there, if any, then its gradient kept.
  void hook(HookPoint hook, int l, Flow& f, Eigen::Index rows, Eigen::Index cols) {
    seed(hook, l, f, rows, cols);
    record(hook, l, f);
  }
  // The backward of a norm of x; `scale_hook` is its hook_scale (the seed it may carry and the
  // record of its gradient), d_y its output's gradient (maybe not live).
  Flow norm(const Flow& d_y, const RowMatrixXf& x, const float* w, HookPoint scale_hook, int l);
  // A norm after attention (which 1) or the MLP (2), back from d_out (hook_attn_out's or
  // hook_mlp_out's gradient, what joins the stream): ln1_post / ln2_post's hook_normalized, the
  // norm of `input` (its input, given by the caller: the recomputed z @ W_O + b_O or
  // mlp_post @ W_out + b_out), its hook_scale. The gradient at the norm's input.
  Flow post_norm(const Flow& d_out, int l, int which, const std::function<RowMatrixXf()>& input);
  // A q/k norm (keys: the keys'), back from d (at its output, before the rotation) to hook_q or
  // hook_k: its hook_normalized and hook_scale on the way, in place.
  void qk_norm(Flow& d, int l, bool keys);
  Flow logits_to_final_norm(const Flow& d_logits);
  Flow layer(int l, const Flow& d_resid_post);

  const ActivationCache& cache_;
  const ModelConfig& c_;
  const Metric& metric_;
  GradientCache& out_;
  const Eigen::Index S_;
  RowMatrixXf pattern_;  // a layer's patterns [head * S + query, key], reused across layers
  RowMatrixXf rotary_cos_, rotary_sin_;  // rotary models: the angles of every position, once per pass
  RowMatrixXf local_cos_, local_sin_;    // Gemma 3's sliding layers' (Architecture::local_rotary)
};

Flow Backward::norm(const Flow& d_y, const RowMatrixXf& x, const float* w, HookPoint scale_hook, int l) {
  Flow scale_seed, d_x;
  seed(scale_hook, l, scale_seed, S_, 1);
  if (!d_y.live && !scale_seed.live) return d_x;
  VectorXf d_scale;
  norm_backward(d_x.m, &d_scale, d_y.live ? d_y.m : RowMatrixXf(), x, w, c_.norm_eps, c_.architecture.norm,
                scale_seed.live ? scale_seed.m.data() : nullptr);
  d_x.live = true;
  record(scale_hook, l, Flow{RowMatrixXf(d_scale), true});
  return d_x;
}

Flow Backward::post_norm(const Flow& d_out, int l, int which, const std::function<RowMatrixXf()>& input) {
  const HookPoint normalized = which == 1 ? HookPoint::Ln1PostNormalized : HookPoint::Ln2PostNormalized;
  const HookPoint scale = which == 1 ? HookPoint::Ln1PostScale : HookPoint::Ln2PostScale;
  // hook_attn_out (hook_mlp_out) is the norm's output itself: the same gradient, plus a seed.
  Flow d_y = d_out;
  hook(normalized, l, d_y, S_, c_.d_model);
  if (!d_y.live && !metric_reads(metric_, scale, l)) return d_y;
  const LayerWeights& W = cache_.weights()->layer(l);
  return norm(d_y, input(), which == 1 ? W.post_attn_norm_w : W.post_mlp_norm_w, scale, l);
}

void Backward::qk_norm(Flow& d, int l, bool keys) {
  const HookPoint normalized = keys ? HookPoint::KNormNormalized : HookPoint::QNormNormalized;
  const HookPoint scale = keys ? HookPoint::KNormScale : HookPoint::QNormScale;
  const int heads = keys ? c_.n_key_value_heads : c_.n_heads;
  hook(normalized, l, d, S_, Eigen::Index{heads} * c_.d_head);
  Flow scale_seed;
  seed(scale, l, scale_seed, S_, heads);
  if (!d.live && !scale_seed.live) return;
  const LayerWeights& W = cache_.weights()->layer(l);
  Flow d_x, d_scales;
  head_rmsnorm_backward(d_x.m, &d_scales.m, d.live ? d.m : RowMatrixXf(), cache_.pre_rotary(l, keys), heads, c_.d_head,
                        keys ? W.k_norm_w : W.q_norm_w, c_.norm_eps, scale_seed.live ? scale_seed.m.data() : nullptr);
  d_x.live = d_scales.live = true;
  record_last(scale, l, std::move(d_scales));
  d = std::move(d_x);
}

Flow Backward::logits_to_final_norm(const Flow& d_logits) {
  Flow d_ln;
  if (!d_logits.live) return d_ln;
  const PackedMatrix& W_U = cache_.weights()->packed_unembed();  // [d_model, d_vocab]
  const int p = metric_position(metric_, static_cast<int>(S_));
  d_ln.ensure(S_, c_.d_model);
  if (metric_.kind == MetricKind::LogitDiff || metric_.kind == MetricKind::Logit) {
    // One or two logits at one position: their columns of W_U, not a product over the vocabulary.
    RowVectorXf column(c_.d_model);
    for (int32_t t : {metric_.token, metric_.wrong}) {
      if (t < 0) continue;
      W_U.column(t, column.data());
      d_ln.m.row(p) += d_logits.m(p, t) * column;
    }
  } else if (metric_.kind == MetricKind::LogProb) {
    linear_backward_input(d_ln.m.row(p).data(), c_.d_model, d_logits.m.row(p).data(), c_.d_vocab, 1, W_U, 0, c_.d_model,
                          false);
  } else {
    linear_backward_input(d_ln.m, d_logits.m, W_U, 0, c_.d_model);
  }
  return d_ln;
}

Flow Backward::layer(int l, const Flow& d_resid_post) {
  const ModelConfig& c = c_;
  const LayerWeights& W = cache_.weights()->layer(l);
  const PackedLayer& WP = cache_.weights()->packed(l);
  const LayerActivations& a = cache_.layer(l);
  const Eigen::Index D = c.d_model, M = c.d_mlp, H = c.n_heads, dh = c.d_head;
  const Eigen::Index q_width = H * dh, kv_width = Eigen::Index{c.n_key_value_heads} * dh;
  const bool gated = c.architecture.mlp == MlpKind::Gated, parallel = c.architecture.parallel_blocks;
  const bool rotary = c.architecture.positions == PositionKind::Rotary;
  using Hk = HookPoint;

  const RowMatrixXf resid_pre = a.resid_pre.to_matrix();
  Flow d_post = d_resid_post;
  hook(Hk::ResidPost, l, d_post, S_, D);

  // The MLP's pre-activations [pos, d_mlp] (the gate's, gated, and the up projection), derived
  // once when first needed: by the post-MLP norm's input or the activation's backward.
  RowMatrixXf pre, up;
  auto derive_pre = [&] {
    if (pre.size() > 0) return;
    pre = cache_.mlp_pre(l);
    if (gated) up = cache_.mlp_pre_linear(l);
  };

  // The MLP, back from its output (after Gemma's post-MLP norm: what joins the stream).
  Flow d_mlp_out = d_post;
  hook(Hk::MlpOut, l, d_mlp_out, S_, D);
  if (c.architecture.post_mlp_norm)
    d_mlp_out = post_norm(d_mlp_out, l, 2, [&] {
      // mlp_post @ W_out + b_out, as ActivationCache::post_norm_input computes it
      derive_pre();
      RowMatrixXf post, out;
      if (gated) gated_activation_forward(post, pre, up, c.activation);
      else activation_forward(post, pre, c.activation);
      linear_forward(out, post, WP.W_out, W.b_out);
      return out;
    });
  Flow d_act;
  if (d_mlp_out.live) {
    linear_backward_input(d_act.m, d_mlp_out.m, WP.W_out, 0, M);
    d_act.live = true;
  }
  hook(Hk::MlpPost, l, d_act, S_, M);
  Flow d_pre, d_up;  // mlp.hook_pre (the gate, gated) and hook_pre_linear
  if (d_act.live) {
    derive_pre();
    if (gated) {
      gated_activation_backward(d_pre.m, d_up.m, d_act.m, pre, up, c.activation);
      d_up.live = true;
    } else {
      activation_backward(d_pre.m, d_act.m, pre, c.activation);
    }
    d_pre.live = true;
  }
  hook(Hk::MlpPre, l, d_pre, S_, M);
  if (gated) {
    hook(Hk::MlpPreLinear, l, d_up, S_, M);
  }
  Flow d_ln2;
  if (d_pre.live) {
    linear_backward_input(d_ln2.m, d_pre.m, gated ? WP.W_gate : WP.W_in, 0, D);
    d_ln2.live = true;
  }
  if (gated && d_up.live) {
    linear_backward_input(d_ln2.m, d_up.m, WP.W_in, 0, D, d_ln2.live);
    d_ln2.live = true;
  }
  hook(Hk::Ln2Normalized, l, d_ln2, S_, D);
  const Flow d_x2 =
      norm(d_ln2, parallel ? resid_pre : cache_.resid_mid(l), W.norm2_w, Hk::Ln2Scale, l);

  // resid_mid = resid_pre + attn_out; sequential blocks feed it to ln2 too.
  Flow d_mid = d_post;
  if (!parallel) d_mid.add(d_x2);
  hook(Hk::ResidMid, l, d_mid, S_, D);

  // Attention, back from its output (after Gemma's post-attention norm: what joins the stream);
  // hook_result and z are before that norm.
  Flow d_attn_out = d_mid;
  hook(Hk::AttnOut, l, d_attn_out, S_, D);
  if (c.architecture.post_attn_norm)
    d_attn_out = post_norm(d_attn_out, l, 1, [&] { return cache_.post_norm_input(l, 1); });
  // attn_out = sum over heads of result_h + b_O: each head's result has attn_out's gradient.
  Flow result_seed;
  seed(Hk::Result, l, result_seed, S_, H * D);
  if (out_.keeps(Hk::Result) && (d_attn_out.live || result_seed.live)) {
    Flow d_result;
    d_result.ensure(S_, H * D);
    if (d_attn_out.live)
      for (Eigen::Index h = 0; h < H; ++h) d_result.m.middleCols(h * D, D) = d_attn_out.m;
    if (result_seed.live) d_result.m += result_seed.m;
    record_last(Hk::Result, l, std::move(d_result));
  }
  Flow d_z;
  if (d_attn_out.live) {
    linear_backward_input(d_z.m, d_attn_out.m, WP.W_O, 0, q_width);
    d_z.live = true;
  }
  if (result_seed.live) {
    // result_h = z_h @ W_O[h]: the seed's head block back through that head's rows of W_O.
    d_z.ensure(S_, q_width);
    for (Eigen::Index h = 0; h < H; ++h)
      linear_backward_input(d_z.m.data() + h * dh, q_width, result_seed.m.data() + h * D, H * D, S_, WP.W_O, h * dh,
                            (h + 1) * dh, true);
  }
  hook(Hk::Z, l, d_z, S_, q_width);

  Flow pattern_seed, scores_seed;
  seed(Hk::Pattern, l, pattern_seed, H * S_, S_);
  seed(Hk::AttnScores, l, scores_seed, H * S_, S_);
  Flow d_q, d_k, d_v;  // rotated q and k (what the scores read), v
  if (d_z.live || pattern_seed.live || scores_seed.live) {
    pattern_.setZero(H * S_, S_);
    for (int h = 0; h < H; ++h)
      for (Eigen::Index i = 0; i < S_; ++i) pattern_.row(h * S_ + i).head(i + 1) = a.pattern.row(h, i);
    Flow d_pattern, d_scores;
    AttentionBackward io;
    io.d_z = d_z.live ? &d_z.m : nullptr;
    io.pattern_seed = pattern_seed.live ? &pattern_seed.m : nullptr;
    io.scores_seed = scores_seed.live ? &scores_seed.m : nullptr;
    if (out_.keeps(Hk::Pattern) && (d_z.live || pattern_seed.live)) io.d_pattern = &d_pattern.m;
    if (out_.keeps(Hk::AttnScores)) io.d_scores = &d_scores.m;
    io.window = attention_window(c, l);
    io.softcap = c.architecture.attn_softcap;
    attention_backward(d_q.m, d_k.m, d_v.m, a.q.to_matrix(), a.k.to_matrix(), a.v.to_matrix(), pattern_, c,
                       cache_.attention_scale(l), io);
    d_pattern.live = io.d_pattern != nullptr;
    d_scores.live = io.d_scores != nullptr;
    record(Hk::Pattern, l, d_pattern);
    record(Hk::AttnScores, l, d_scores);
    d_q.live = d_k.live = true;
    d_v.live = d_z.live;
  }
  if (rotary) {
    seed(Hk::RotQ, l, d_q, S_, q_width);
    seed(Hk::RotK, l, d_k, S_, kv_width);
    record(Hk::RotQ, l, d_q);
    record(Hk::RotK, l, d_k);
    // hook_q and hook_k sit before the rotation: its transpose carries the gradient back, with
    // the layer's angles (forward.cpp: Gemma 3's sliding layers have their own).
    const bool local = c.architecture.local_rotary && attention_window(c, l) > 0;
    const RowMatrixXf& cos = local ? local_cos_ : rotary_cos_;
    const RowMatrixXf& sin = local ? local_sin_ : rotary_sin_;
    if (d_q.live) rotary_backward(d_q.m, c.n_heads, c.d_head, c.architecture.rotary.dim, cos, sin);
    if (d_k.live) rotary_backward(d_k.m, c.n_key_value_heads, c.d_head, c.architecture.rotary.dim, cos, sin);
  }
  if (c.architecture.qk_norm) {
    // Gemma 3 and Qwen3 normalize each query and key head between the projection and the rotation.
    qk_norm(d_q, l, false);
    qk_norm(d_k, l, true);
  }
  seed(Hk::Q, l, d_q, S_, q_width);
  seed(Hk::K, l, d_k, S_, kv_width);
  seed(Hk::V, l, d_v, S_, kv_width);
  record(Hk::Q, l, d_q);
  record(Hk::K, l, d_k);
  record(Hk::V, l, d_v);

  // ln1 -> the fused Q | K | V product.
  Flow d_ln1;
  if (d_q.live || d_k.live || d_v.live) {
    RowMatrixXf d_qkv = RowMatrixXf::Zero(S_, q_width + 2 * kv_width);
    if (d_q.live) d_qkv.leftCols(q_width) = d_q.m;
    if (d_k.live) d_qkv.middleCols(q_width, kv_width) = d_k.m;
    if (d_v.live) d_qkv.rightCols(kv_width) = d_v.m;
    linear_backward_input(d_ln1.m, d_qkv, WP.W_qkv, 0, D);
    d_ln1.live = true;
  }
  hook(Hk::Ln1Normalized, l, d_ln1, S_, D);
  const Flow d_x1 = norm(d_ln1, resid_pre, W.norm1_w, Hk::Ln1Scale, l);

  Flow d_pre_resid = d_mid;
  d_pre_resid.add(d_x1);
  if (parallel) d_pre_resid.add(d_x2);
  hook(Hk::ResidPre, l, d_pre_resid, S_, D);
  return d_pre_resid;
}

void Backward::run() {
  const Eigen::Index D = c_.d_model;
  if (c_.architecture.positions == PositionKind::Rotary)
    rotary_tables(rotary_cos_, rotary_sin_, rotary_inv_freq(c_.architecture.rotary), 0, S_);
  if (c_.architecture.positions == PositionKind::Rotary && c_.architecture.local_rotary)
    rotary_tables(local_cos_, local_sin_, rotary_inv_freq(c_.architecture.rotary_local), 0, S_);
  Flow d_logits;
  seed(HookPoint::Logits, -1, d_logits, S_, c_.d_vocab);
  Flow d_lnf;
  if (const float cap = c_.architecture.final_softcap; cap > 0.0f && d_logits.live) {
    // The metric reads the capped logits (the cache's); the unembedding's output is before the cap.
    Flow d_uncapped = d_logits;
    for (Eigen::Index i = 0; i < S_; ++i)
      softcap_backward(d_uncapped.m.row(i).data(), cache_.logits.row(i).data(), c_.d_vocab, cap);
    d_lnf = logits_to_final_norm(d_uncapped);
  } else {
    d_lnf = logits_to_final_norm(d_logits);
  }
  record_last(HookPoint::Logits, -1, std::move(d_logits));
  hook(HookPoint::LnFinalNormalized, -1, d_lnf, S_, D);
  const int L = c_.n_layers;
  Flow d_resid = norm(d_lnf, cache_.resid_post(L - 1), cache_.weights()->final_norm_w(), HookPoint::LnFinalScale, -1);
  for (int l = L - 1; l >= 0; --l) d_resid = layer(l, d_resid);
  // resid_pre of layer 0 = hook_embed + hook_pos_embed.
  Flow d_embed = d_resid;
  hook(HookPoint::Embed, -1, d_embed, S_, D);
  if (cache_.has_pos_embed()) {
    Flow d_pos = d_resid;
    hook(HookPoint::PosEmbed, -1, d_pos, S_, D);
  }
}

}  // namespace

GradientCache backward(const ActivationCache& cache, const Metric& metric, const GradOptions& options) {
  const ModelConfig& c = cache.config();
  // Edits at hook_embed are the one kind allowed (integrated gradients runs on x' + alpha (x - x')):
  // nothing here recomputes hook_embed or anything before it from the tokens. The pass reads the
  // stored, edited values (the first resid_pre holds the edited embedding) and derives the rest
  // from them as the cache does; the tokens are read only as the loss's targets. So the gradient
  // is that of the edited run, at hook_embed with respect to the edited value, as a TransformerLens
  // backward hook sees it behind a forward hook that replaced the embedding.
  for (const Intervention& i : cache.interventions)
    if (i.hook != HookPoint::Embed)
      throw Error("the backward pass differentiates a plain run (or one edited only at hook_embed), and this run "
                  "was made with edits (" + describe(i) + "); run the prompt without them.");
  if (cache.n_layer() != c.n_layers || (c.n_layers > 0 && cache.layer(0).resid_pre.rows() != cache.n_pos()))
    throw Error("the backward pass needs every activation of the run, and this run kept only the logits.");
  check_metric(metric, c, cache.n_pos());
  const ThreadScope threads(options.threads > 0 ? options.threads : auto_threads(c, cache.n_pos()));
  GradientCache out(cache.weights(), cache.tokens(), metric);
  out.set_keep(options.keep);
  out.metric_value = metric_value(metric, cache);
  Backward(cache, metric, out).run();
  return out;
}

}  // namespace hs
