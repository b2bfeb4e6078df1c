// Explaining one prediction with gradients (attribution.h). Input attributions run the model on
// x' + alpha (x - x') by a callable edit at hook_embed (intervention.h) and differentiate each such
// run (backward() accepts edits at hook_embed only: nothing it does recomputes the embedding);
// the component and edge estimates read the gradient's rows in place.
#include "core/analysis/attribution.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>

#include "core/error.h"
#include "core/model/forward.h"

namespace hs {

std::string_view to_string(InputAttributionMethod m) {
  switch (m) {
    case InputAttributionMethod::GradXInput: return "grad_x_input";
    case InputAttributionMethod::IntegratedGradients: return "integrated_gradients";
  }
  return "grad_x_input";
}

std::optional<InputAttributionMethod> parse_input_attribution_method(std::string_view name) {
  for (InputAttributionMethod m : {InputAttributionMethod::GradXInput, InputAttributionMethod::IntegratedGradients})
    if (to_string(m) == name) return m;
  return std::nullopt;
}

namespace {

void require_plain_full_run(const ActivationCache& cache, const char* what) {
  if (!cache.interventions.empty())
    throw Error(std::string(what) + " explains a plain run, and this run was made with edits (" +
                describe(cache.interventions.front()) + "); run the prompt without them.");
  if (cache.n_layer() != cache.config().n_layers ||
      (cache.n_layer() > 0 && cache.layer(0).resid_pre.rows() != cache.n_pos()))
    throw Error(std::string(what) + " needs every activation of the run, and this run kept only the logits.");
}

// The gradient must be of this very run: the same weights (the config is theirs), the same tokens,
// and the metric's value on this cache (a run with edits would give another).
void require_gradient_of(const ActivationCache& cache, const GradientCache& grad) {
  if (&grad.config() != &cache.config() || grad.tokens() != cache.tokens())
    throw Error("the gradient is of another run (other weights or tokens) than the activations it is paired with; "
                "differentiate this run (backward() on its cache).");
  const double m = metric_value(grad.metric(), cache);
  if (std::abs(m - grad.metric_value) > 1e-5 * std::max(1.0, std::abs(m)))
    throw Error("the gradient is of another run than these activations: its metric was " +
                std::to_string(grad.metric_value) + " and is " + std::to_string(m) +
                " on this run (one with edits?); differentiate this run (backward() on its cache).");
}

void require_kept(const GradientCache& grad, HookPoint hook) {
  if (!grad.keeps(hook))
    throw Error("the gradient does not keep " + std::string(hook_name(hook)) +
                " (GradOptions::keep: component_gradient_hooks() for heads and neurons, attn.hook_pattern for edges).");
}

// The run on x' + alpha (x - x'), as hook_embed: `delta` = x - x', `base` = x' ([pos, d_model]).
std::shared_ptr<ActivationCache> run_at(const ActivationCache& cache, const RowMatrixXf& base, const RowMatrixXf& delta,
                                        float alpha, bool logits_only, int threads) {
  auto edit = std::make_shared<CallableEdit>();
  edit->name = "integrated gradients' interpolated embedding";
  edit->position_local = true;
  edit->edit = [&base, &delta, alpha](Eigen::Ref<RowMatrixXf> rows, Eigen::Index first) {
    rows = base.middleRows(first, rows.rows()) + alpha * delta.middleRows(first, rows.rows());
  };
  RunOptions o;
  o.logits_only = logits_only;
  o.threads = threads;
  o.interventions.push_back(call_at(HookPoint::Embed, -1, std::move(edit)));
  return forward(cache.weights(), cache.tokens(), o);
}

// sum_d delta[p, d] * g[p, d] for every position: one pass's contribution to the attributions.
std::vector<double> row_dots(const RowMatrixXf& delta, const RowMatrixXf& g) {
  std::vector<double> out(static_cast<size_t>(delta.rows()), 0.0);
  for (Eigen::Index p = 0; p < delta.rows(); ++p)
    for (Eigen::Index d = 0; d < delta.cols(); ++d) out[static_cast<size_t>(p)] += double{delta(p, d)} * g(p, d);
  return out;
}

}  // namespace

InputAttribution input_attribution(const ActivationCache& cache, const Metric& metric, InputAttributionMethod method,
                                   int steps, const AttributionControl& control) {
  require_plain_full_run(cache, "an input attribution");
  const ModelConfig& c = cache.config();
  const int S = cache.n_pos();
  check_metric(metric, c, S);
  const bool ig = method == InputAttributionMethod::IntegratedGradients;
  if (ig && steps < 1)
    throw Error("integrated gradients needs at least 1 step (the midpoint rule's intervals); " + std::to_string(steps) +
                " was given.");
  auto stop_if_asked = [&] {
    if (control.cancelled && control.cancelled()) throw Cancelled();
  };

  // x = hook_embed [pos, d_model]; x' keeps position 0 and is zero elsewhere, so delta's row 0 is 0.
  const RowMatrixXf x = cache.embed.to_matrix();
  RowMatrixXf base = RowMatrixXf::Zero(x.rows(), x.cols());
  base.row(0) = x.row(0);
  const RowMatrixXf delta = x - base;

  InputAttribution out;
  out.method = method;
  out.steps = ig ? steps : 0;
  out.metric = metric_value(metric, cache);
  // A dot product reads an activation, so its baseline needs a full cache; the others the logits.
  stop_if_asked();
  out.baseline_metric =
      metric_value(metric, *run_at(cache, base, delta, 0.0f, metric.kind != MetricKind::Dot, control.threads));

  GradOptions keep_embed;
  keep_embed.keep = {HookPoint::Embed};
  keep_embed.threads = control.threads;
  std::vector<double> attr(static_cast<size_t>(S), 0.0);
  if (!ig) {
    stop_if_asked();
    attr = row_dots(delta, backward(cache, metric, keep_embed).rows(HookPoint::Embed, -1));
  } else {
    // Step k differentiates the run at alpha_k = (k + 0.5) / steps. A model small enough that one
    // pass runs on one thread (auto_threads) runs several steps at once instead, one per thread;
    // each step's row sums are kept apart and added in order, so the result does not depend on
    // how many threads ran them.
    const int workers = control.threads > 0 ? control.threads : omp_get_num_procs();
    const bool across_steps = workers > 1 && steps > 1 && (control.threads > 0 || auto_threads(c, S) == 1);
    const int pass_threads = across_steps ? 1 : control.threads;
    std::vector<std::vector<double>> per_step(static_cast<size_t>(steps));
    auto step = [&](int k) {
      const float alpha = static_cast<float>((k + 0.5) / steps);
      const auto run = run_at(cache, base, delta, alpha, false, pass_threads);
      GradOptions o = keep_embed;
      o.threads = pass_threads;
      per_step[static_cast<size_t>(k)] = row_dots(delta, backward(*run, metric, o).rows(HookPoint::Embed, -1));
    };
    if (!across_steps) {
      for (int k = 0; k < steps; ++k) {
        stop_if_asked();
        step(k);
      }
    } else {
      // An exception may not leave an OpenMP region: the first is kept and thrown after it, and
      // the steps not yet begun are skipped. `cancelled` is asked under a lock, one thread at a time.
      std::exception_ptr failure;
      bool failed = false;
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::min(workers, steps))
      for (int k = 0; k < steps; ++k) {
        bool skip;
#pragma omp atomic read
        skip = failed;
        if (skip) continue;
        try {
          bool stop = false;
#pragma omp critical(hs_attribution_cancelled)
          stop = control.cancelled && control.cancelled();
          if (stop) throw Cancelled();
          step(k);
        } catch (...) {
#pragma omp critical(hs_attribution_failure)
          if (!failure) failure = std::current_exception();
#pragma omp atomic write
          failed = true;
        }
      }
      if (failure) std::rethrow_exception(failure);
    }
    for (const std::vector<double>& s : per_step)
      for (int p = 0; p < S; ++p) attr[static_cast<size_t>(p)] += s[static_cast<size_t>(p)];
    for (double& a : attr) a /= steps;
  }
  attr[0] = 0.0;  // x - x' is 0 there
  out.attributions = std::move(attr);
  double total = 0.0;
  for (double a : out.attributions) total += a;
  out.completeness_error = total - (out.metric - out.baseline_metric);
  return out;
}

std::vector<std::string> input_attribution_warnings(const InputAttribution& a) {
  if (a.method != InputAttributionMethod::IntegratedGradients) return {};
  const double change = std::abs(a.metric - a.baseline_metric), err = std::abs(a.completeness_error);
  if (err <= 1e-3 || err <= 0.05 * change) return {};
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "the attributions add up to %.4g but the metric changes by %.4g from the baseline (completeness "
                "error %.4g at %d steps):",
                a.metric - a.baseline_metric + a.completeness_error, a.metric - a.baseline_metric, a.completeness_error,
                a.steps);
  return {std::string(buf) +
          " they are an estimate; more steps narrow it unless the path is steep near the baseline (an RMSNorm "
          "model's zero embeddings are; docs/attribution.md)."};
}

std::vector<HookPoint> component_gradient_hooks() { return {HookPoint::Z, HookPoint::MlpOut, HookPoint::MlpPost}; }

ComponentAttribution component_attribution(const ActivationCache& cache, const GradientCache& grad) {
  require_plain_full_run(cache, "a component attribution");
  require_gradient_of(cache, grad);
  for (HookPoint h : component_gradient_hooks()) require_kept(grad, h);
  const ModelConfig& c = cache.config();
  const int L = c.n_layers, H = c.n_heads, dh = c.d_head, S = cache.n_pos();
  ComponentAttribution out;
  out.heads = RowMatrixXf::Zero(L, H);
  out.mlp_layers = VectorXf::Zero(L);
  out.neurons = RowMatrixXf::Zero(L, c.d_mlp);
  // A layer the metric does not reach (after a dot product's hook) has no gradient: zero-ablating
  // any of its parts leaves the metric as it is, and its estimates stay 0.
  for (int l = 0; l < L; ++l) {
    const LayerActivations& a = cache.layer(l);
    if (grad.has(HookPoint::Z, l)) {
      const RowMatrixXf& g = grad.rows(HookPoint::Z, l);  // [pos, n_heads*d_head]
      for (int h = 0; h < H; ++h) {
        double sum = 0.0;
        for (int p = 0; p < S; ++p) {
          const float* z = a.z.row_data(p) + h * dh;
          for (int j = 0; j < dh; ++j) sum += double{z[j]} * g(p, h * dh + j);
        }
        out.heads(l, h) = static_cast<float>(-sum);
      }
    }
    if (grad.has(HookPoint::MlpOut, l)) {
      const RowMatrixXf& g = grad.rows(HookPoint::MlpOut, l);  // [pos, d_model]
      double sum = 0.0;
      for (int p = 0; p < S; ++p) {
        const float* y = a.mlp_out.row_data(p);
        for (int d = 0; d < c.d_model; ++d) sum += double{y[d]} * g(p, d);
      }
      out.mlp_layers(l) = static_cast<float>(-sum);
    }
    if (grad.has(HookPoint::MlpPost, l)) {
      const RowMatrixXf& g = grad.rows(HookPoint::MlpPost, l);  // [pos, d_mlp]
      const RowMatrixXf post = cache.mlp_post(l);               // [pos, d_mlp], derived
      for (int n = 0; n < c.d_mlp; ++n) {
        double sum = 0.0;
        for (int p = 0; p < S; ++p) sum += double{post(p, n)} * g(p, n);
        out.neurons(l, n) = static_cast<float>(-sum);
      }
    }
  }
  return out;
}

RowMatrixXf attention_edge_attribution(const ActivationCache& cache, const GradientCache& grad, int layer, int head) {
  require_plain_full_run(cache, "an attention-edge attribution");
  require_gradient_of(cache, grad);
  const ModelConfig& c = cache.config();
  if (layer < 0 || layer >= c.n_layers || head < 0 || head >= c.n_heads)
    throw Error("head L" + std::to_string(layer) + "H" + std::to_string(head) + " does not exist: this model has " +
                std::to_string(c.n_layers) + " layers of " + std::to_string(c.n_heads) + " heads.");
  require_kept(grad, HookPoint::Pattern);
  const int S = cache.n_pos();
  RowMatrixXf out = RowMatrixXf::Zero(S, S);  // [query_pos, key_pos]
  if (!grad.has(HookPoint::Pattern, layer)) return out;  // the metric does not reach this layer
  const RowMatrixXf& g = grad.rows(HookPoint::Pattern, layer);  // [head * S + query, key]
  for (int q = 0; q < S; ++q) {
    const ConstRowVectorRef A = cache.pattern_row(layer, head, q);  // keys 0..q
    for (int k = 0; k <= q; ++k) out(q, k) = A(k) * g(head * S + q, k);
  }
  return out;
}

}  // namespace hs
