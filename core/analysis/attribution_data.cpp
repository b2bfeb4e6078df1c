#include "core/analysis/attribution_data.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/model/intervention.h"
#include "core/model/model.h"

namespace hs {

TargetMetric target_metric(const ActivationCache& cache, int pos, std::optional<int32_t> target,
                           std::optional<int32_t> versus) {
  const int n_pos = cache.n_pos();
  if (n_pos <= 0) throw Error("there is no token to explain: the run is empty.");
  TargetMetric t;
  t.pos = std::clamp(pos < 0 ? n_pos - 1 : pos, 0, n_pos - 1);
  t.target_is_prediction = !target.has_value();
  if (target) {
    t.target = *target;
  } else {
    const std::vector<Prediction> top = top_predictions(cache, t.pos, 1);
    if (top.empty()) throw Error("the run's logits at this position are not finite: there is no prediction to explain.");
    t.target = top.front().id;
  }
  t.versus = versus;
  if (versus && *versus == t.target)
    throw Error("the second token is the target itself: logit(target) - logit(target) is 0 whatever the model does. "
                "Pick another second token, or none for the target's logit alone.");
  t.metric = versus ? logit_diff_metric(t.target, *versus, t.pos) : logit_metric(t.target, t.pos);
  check_metric(t.metric, cache.config(), n_pos);
  t.value = metric_value(t.metric, cache);
  return t;
}

std::vector<NeuronEstimate> top_neurons(const RowMatrixXf& neurons, int k) {
  std::vector<NeuronEstimate> all;
  all.reserve(static_cast<size_t>(neurons.size()));
  for (Eigen::Index l = 0; l < neurons.rows(); ++l)
    for (Eigen::Index n = 0; n < neurons.cols(); ++n)
      if (std::isfinite(neurons(l, n))) all.push_back({static_cast<int>(l), static_cast<int>(n), neurons(l, n)});
  const size_t shown = std::min(all.size(), static_cast<size_t>(std::max(0, k)));
  std::partial_sort(all.begin(), all.begin() + static_cast<long>(shown), all.end(),
                    [](const NeuronEstimate& a, const NeuronEstimate& b) {
                      const float ma = std::abs(a.value), mb = std::abs(b.value);
                      if (ma != mb) return ma > mb;
                      return a.layer != b.layer ? a.layer < b.layer : a.neuron < b.neuron;
                    });
  all.resize(shown);
  return all;
}

double head_zero_ablation_effect(const Model& model, const ActivationCache& plain, const Metric& metric, int layer,
                                 int head, int threads) {
  if (!plain.interventions.empty())
    throw Error("the exact ablation compares against a plain run, and this run was made with edits (" +
                describe(plain.interventions.front()) + ").");
  RunOptions options;
  options.threads = threads;
  options.logits_only = true;  // the metric reads the logits only
  options.interventions = {zero_ablation(layer, head)};
  check_interventions(options.interventions, *model.weights(), plain.n_pos());
  const std::shared_ptr<const ActivationCache> ablated = model.run(plain.tokens(), options);
  return metric_value(metric, *ablated) - metric_value(metric, plain);
}

}  // namespace hs
