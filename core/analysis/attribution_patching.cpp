// Attribution patching (attribution_patching.h): every estimate is a dot product of the clean
// run's activation minus the corrupted run's with the corrupted run's gradient, read in place from
// the caches' stored rows and GradientCache::rows(); only mlp_post (derived, not stored) and
// AtP*'s per-layer q, k, v are materialised, one layer at a time.
#include "core/analysis/attribution_patching.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/analysis/patching.h"
#include "core/error.h"
#include "core/model/metric.h"
#include "core/model/ops.h"

namespace hs {

std::string_view to_string(PatchMethod m) {
  switch (m) {
    case PatchMethod::Exact: return "exact";
    case PatchMethod::AtP: return "atp";
    case PatchMethod::AtPQK: return "atp_qk";
  }
  return "?";
}

std::optional<PatchMethod> parse_patch_method(std::string_view name) {
  for (PatchMethod m : {PatchMethod::Exact, PatchMethod::AtP, PatchMethod::AtPQK})
    if (name == to_string(m)) return m;
  return std::nullopt;
}

std::string_view to_string(AtpSite s) {
  switch (s) {
    case AtpSite::ResidPre: return "resid_pre";
    case AtpSite::AttnOut: return "attn_out";
    case AtpSite::MlpOut: return "mlp_out";
    case AtpSite::Z: return "z";
    case AtpSite::ZPos: return "z_pos";
    case AtpSite::MlpPost: return "mlp_post";
  }
  return "?";
}

std::optional<AtpSite> parse_atp_site(std::string_view name) {
  for (AtpSite s : kAtpSites)
    if (name == to_string(s)) return s;
  return std::nullopt;
}

HookPoint atp_site_hook(AtpSite s) {
  switch (s) {
    case AtpSite::ResidPre: return HookPoint::ResidPre;
    case AtpSite::AttnOut: return HookPoint::AttnOut;
    case AtpSite::MlpOut: return HookPoint::MlpOut;
    case AtpSite::Z:
    case AtpSite::ZPos: return HookPoint::Z;
    case AtpSite::MlpPost: return HookPoint::MlpPost;
  }
  return HookPoint::Z;
}

std::optional<HookPoint> exact_sweep_site(AtpSite s) {
  if (s == AtpSite::ZPos || s == AtpSite::MlpPost) return std::nullopt;
  return atp_site_hook(s);
}

std::vector<HookPoint> atp_gradient_hooks(std::span<const AtpSite> sites, PatchMethod) {
  // AtP*'s QK fix needs no gradient beyond z's either: dM/dA[t, s] = dM/dz[t] . v[s].
  std::vector<HookPoint> hooks;
  for (AtpSite s : sites) {
    const HookPoint h = atp_site_hook(s);
    if (std::find(hooks.begin(), hooks.end(), h) == hooks.end()) hooks.push_back(h);
  }
  return hooks;
}

GradientCache atp_gradients(const ActivationCache& corrupt, int32_t answer, int32_t wrong,
                            std::span<const AtpSite> sites, PatchMethod method, int threads) {
  if (sites.empty()) throw Error("attribution patching needs at least one site to estimate.");
  GradOptions o;
  o.keep = atp_gradient_hooks(sites, method);  // never empty here: empty would keep every key
  o.threads = threads;
  return backward(corrupt, logit_diff_metric(answer, wrong), o);
}

namespace {

// A per-position activation of a plain run, stored or derived ([pos, width]); the sites other
// than mlp_post are stored by every run (hooks.h), so this copies only mlp_post.
struct SiteRows {
  const PositionRows* stored = nullptr;
  RowMatrixXf derived;
  SiteRows(const ActivationCache& c, HookPoint hook, int l) : stored(c.stored_rows(hook, l)) {
    if (!stored) derived = c.rows(hook, l);
  }
  ConstRowVectorRef row(Eigen::Index p) const {
    return stored ? stored->row(p) : ConstRowVectorRef(derived.row(p).data(), derived.cols());
  }
};

// The rows of head h (its d_head columns starting at col) of a [pos, width] matrix: [pos, d_head].
ConstStridedMatrixRef head_cols(const RowMatrixXf& m, Eigen::Index col, Eigen::Index d_head) {
  return ConstStridedMatrixRef(m.data() + col, m.rows(), d_head, Eigen::OuterStride<>(m.cols()));
}

// Layer l's pattern from q and k, row by row with the forward's operations: the scale, the
// soft-cap and the window (ActivationCache::finish_scores), then the softmax of the kept keys:
// [query, key], zeros above the diagonal and before a sliding window's first key.
void layer_pattern(RowMatrixXf& out, const ConstStridedMatrixRef& q, const ConstStridedMatrixRef& k,
                   const ActivationCache& run, int l) {
  const Eigen::Index S = q.rows();
  const int window = attention_window(run.config(), l);
  out.resize(S, S);
  head_scores_forward(out.data(), S, q.data(), q.outerStride(), S, 0, k.data(), k.outerStride(), S, q.cols());
  for (Eigen::Index i = 0; i < S; ++i) {
    run.finish_scores(l, static_cast<int>(i), out.row(i).data());
    const Eigen::Index first = first_key(window, static_cast<int>(i));
    scaled_softmax_forward(out.row(i).data() + first, i + 1 - first, 1.0f);
    out.row(i).head(first).setZero();
    out.row(i).tail(S - i - 1).setZero();
  }
}

// AtP*'s QK fix for every head of layer l: c[h, t], the estimated change of the metric when
// z[t, h] is recomputed from the clean run's query, keys and values, each part taken alone (see
// hsref.py's _qk_fixed_head_rows, the definition):
//   c[t] = sum_s (A_Q - A + A_K - A)[t, s] dM/dA[t, s] + sum_s A[t, s] (v_clean - v_corrupt)[s] . dM/dz[t]
// with A_Q = softmax(q_clean k_corrupt^T), A_K = softmax(q_corrupt k_clean^T) (scaled, soft-capped
// and windowed as the layer's scores are; the rotated q and k where the model has rotary, the
// key/value head h reads with GQA) and dM/dA = dM/dz v^T.
// Returns [head, pos].
RowMatrixXf qk_fixed_rows(const ActivationCache& clean, const ActivationCache& corrupt, const RowMatrixXf& g_z, int l) {
  const ModelConfig& c = corrupt.config();
  const Eigen::Index S = corrupt.n_pos(), dh = c.d_head;
  const LayerActivations& K = clean.layer(l);
  const LayerActivations& C = corrupt.layer(l);
  // q [pos, n_heads*d_head], k and v [pos, n_kv*d_head] of both runs: one layer at a time.
  const RowMatrixXf q_c = K.q.to_matrix(), q_n = C.q.to_matrix();
  const RowMatrixXf k_c = K.k.to_matrix(), k_n = C.k.to_matrix();
  const RowMatrixXf v_c = K.v.to_matrix(), v_n = C.v.to_matrix();
  RowMatrixXf out(c.n_heads, S);
  RowMatrixXf a_n(S, S), a_q(S, S), a_k(S, S), g_a(S, S);  // [query, key]
  RowMatrixXf dv_z(S, dh);                                   // [query, d_head]
  for (int h = 0; h < c.n_heads; ++h) {
    const Eigen::Index qc = h * dh, kc = Eigen::Index{c.kv_head(h)} * dh;
    const ConstStridedMatrixRef gz = head_cols(g_z, qc, dh);
    // The corrupted pattern recomputed by the same kernel as the other two, so that a part whose
    // clean and corrupted inputs are equal contributes exactly 0.
    layer_pattern(a_n, head_cols(q_n, qc, dh), head_cols(k_n, kc, dh), corrupt, l);
    layer_pattern(a_q, head_cols(q_c, qc, dh), head_cols(k_n, kc, dh), corrupt, l);
    layer_pattern(a_k, head_cols(q_n, qc, dh), head_cols(k_c, kc, dh), corrupt, l);
    g_a.noalias() = gz * head_cols(v_n, kc, dh).transpose();
    a_q += a_k;
    a_q -= 2.0f * a_n;
    // The values' part uses the cache's pattern (the one that multiplied v).
    for (Eigen::Index t = 0; t < S; ++t) a_n.row(t).head(t + 1) = C.pattern.row(h, t);
    dv_z.noalias() = a_n * (head_cols(v_c, kc, dh) - head_cols(v_n, kc, dh));
    out.row(h) = (a_q.cwiseProduct(g_a).rowwise().sum() + dv_z.cwiseProduct(gz).rowwise().sum()).transpose();
  }
  return out;
}

}  // namespace

AtpResult attribution_patching(const ActivationCache& clean, const ActivationCache& corrupt,
                               const GradientCache& corrupt_grad, AtpSite what, PatchMethod method) {
  if (method == PatchMethod::Exact)
    throw Error("attribution_patching estimates a sweep (atp or atp_qk); the exact sweep is patching_sweep.");
  check_patching_runs(clean, corrupt);
  const ModelConfig& c = corrupt.config();
  // The config lives in the Weights, so its address names the model the gradient was taken on.
  if (&corrupt_grad.config() != &c || corrupt_grad.tokens() != corrupt.tokens())
    throw Error("the gradient was taken on another run; attribution patching needs the corrupted run's gradient "
                "(atp_gradients).");
  const Metric& metric = corrupt_grad.metric();
  const HookPoint hook = atp_site_hook(what);
  if (!corrupt_grad.keeps(hook))
    throw Error("the gradient of " + std::string(hook_short_name(hook)) + " was not kept; take it with atp_gradients "
                "for the sites to estimate.");
  AtpResult r;
  r.what = what;
  r.method = method;
  r.metric_clean = static_cast<float>(metric_value(metric, clean));
  r.metric_corrupt = static_cast<float>(metric_value(metric, corrupt));
  check_patching_metrics(r.metric_clean, r.metric_corrupt,
                         metric.kind == MetricKind::LogitDiff ? "logit(answer) - logit(wrong)" : "the metric");
  const int L = c.n_layers, H = c.n_heads;
  const Eigen::Index S = corrupt.n_pos(), dh = c.d_head;
  switch (what) {
    case AtpSite::ResidPre:
    case AtpSite::AttnOut:
    case AtpSite::MlpOut: r.raw.setZero(L, S); break;
    case AtpSite::Z: r.raw.setZero(L, H); break;
    case AtpSite::ZPos: r.raw.setZero(Eigen::Index{L} * H, S); break;
    case AtpSite::MlpPost: r.raw.setZero(L, c.d_mlp); break;
  }
  for (int l = 0; l < L; ++l) {
    // A layer the metric does not depend on has no gradient: its estimate is m_corrupt exactly.
    if (!corrupt_grad.has(hook, l)) continue;
    const RowMatrixXf& g = corrupt_grad.rows(hook, l);  // [pos, width]
    if (method == PatchMethod::AtPQK && (what == AtpSite::Z || what == AtpSite::ZPos)) {
      const RowMatrixXf per_head = qk_fixed_rows(clean, corrupt, g, l);  // [head, pos]
      if (what == AtpSite::Z) r.raw.row(l) = per_head.rowwise().sum().transpose();
      else r.raw.middleRows(Eigen::Index{l} * H, H) = per_head;
      continue;
    }
    const SiteRows a_clean(clean, hook, l), a_corrupt(corrupt, hook, l);
    for (Eigen::Index p = 0; p < S; ++p) {
      const ConstRowVectorRef g_p(g.row(p).data(), g.cols());
      const RowVectorXf delta = a_clean.row(p) - a_corrupt.row(p);
      switch (what) {
        case AtpSite::ResidPre:
        case AtpSite::AttnOut:
        case AtpSite::MlpOut: r.raw(l, p) = delta.dot(g_p); break;
        case AtpSite::Z:
        case AtpSite::ZPos:
          for (int h = 0; h < H; ++h) {
            const float e = delta.segment(h * dh, dh).dot(g_p.segment(h * dh, dh));
            if (what == AtpSite::Z) r.raw(l, h) += e;
            else r.raw(Eigen::Index{l} * H + h, p) = e;
          }
          break;
        case AtpSite::MlpPost: r.raw.row(l) += delta.cwiseProduct(g_p); break;
      }
    }
  }
  // normalized from the estimate itself, before m_corrupt is added in float.
  r.normalized = r.raw / (r.metric_clean - r.metric_corrupt);
  r.raw.array() += r.metric_corrupt;
  return r;
}

}  // namespace hs
