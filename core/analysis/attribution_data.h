// What the Attribution view and the attention view's edge attributions show beside the
// attributions themselves (attribution.h): the metric they explain, chosen the way the
// Contributions view chooses its target, the neurons worth listing, and the exact ablation of
// one head that checks its first-order estimate.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/analysis/attribution.h"
#include "core/analysis/top_k.h"
#include "core/model/cache.h"
#include "core/model/metric.h"

namespace hs {

class Model;

// The metric at one position: logit(target), or logit(target) - logit(versus). No target: the
// top prediction after that position (as analyze_position chooses it).
struct TargetMetric {
  Metric metric;
  int pos = 0;                       // clamped into [0, n_pos)
  int32_t target = 0;
  bool target_is_prediction = true;  // no target was given
  std::optional<int32_t> versus;
  double value = 0.0;                // the metric on the run, in double
};
// Throws hs::Error for a token outside the vocabulary, or versus == target (the difference of a
// logit with itself is 0 whatever the model does).
TargetMetric target_metric(const ActivationCache& cache, int pos, std::optional<int32_t> target,
                           std::optional<int32_t> versus);

// The k neurons with the largest |estimate| (ComponentAttribution::neurons, [layer, d_mlp]),
// largest first; on equal magnitude the lower layer, then the lower neuron, first.
struct NeuronEstimate {
  int layer = 0;
  int neuron = 0;
  float value = 0.0f;
};
std::vector<NeuronEstimate> top_neurons(const RowMatrixXf& neurons, int k);

// What zero-ablating head (layer, head) at every position does to the metric, exactly:
// M(run with attn.hook_z of that head zeroed) - M(run). `plain` must be a run of `model`
// without interventions; the estimate -z . dM/dz (component_attribution) is this to first order.
double head_zero_ablation_effect(const Model& model, const ActivationCache& plain, const Metric& metric, int layer,
                                 int head, int threads = 1);

}  // namespace hs
