// Explaining one prediction with gradients (issue 23 part 5), for a metric of one run (metric.h:
// the logit or logit difference the Contributions view targets, a log-probability, ...):
//   - input-token attributions on the token embeddings x = hook_embed: gradient x input, or
//     integrated gradients from a baseline x' that keeps position 0 and has zero token embeddings
//     at every other position (learned position embeddings stay and are not attributed), by the
//     midpoint rule with N steps; attributions[p] = sum_d (x - x')[p, d] * gbar[p, d] (0 at p = 0),
//     with the completeness error sum(attr) - (M(x) - M(x')) beside it;
//   - every head's, MLP layer's and neuron's estimated effect of zero-ablating it, -a . dM/da
//     (a = the head's z, the layer's mlp_out, the neuron's post, over every position): the
//     first-order estimate that an exact ablation (ablation.h) checks;
//   - one head's attention-edge attributions A[q, k] * dM/dA[q, k].
// tools/reference/hsref.py's attribute() is the definition the tests hold this to.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/backward.h"
#include "core/model/cache.h"
#include "core/model/metric.h"
#include "core/tensor/eigen.h"

namespace hs {

enum class InputAttributionMethod : uint8_t { GradXInput, IntegratedGradients };
std::string_view to_string(InputAttributionMethod m);  // "grad_x_input", "integrated_gradients"
std::optional<InputAttributionMethod> parse_input_attribution_method(std::string_view name);

struct AttributionControl {
  int threads = 0;                  // 0: the forward pass's choice
  std::function<bool()> cancelled;  // true: stop between passes, throwing hs::Cancelled
};

struct InputAttribution {
  InputAttributionMethod method = InputAttributionMethod::GradXInput;
  int steps = 0;                      // integrated gradients' steps (0 for grad x input)
  std::vector<double> attributions;   // [pos]; 0 at position 0
  double metric = 0.0;                // M(x)
  double baseline_metric = 0.0;       // M(x')
  double completeness_error = 0.0;    // sum(attributions) - (metric - baseline_metric)
};

// The attributions of `metric` on the run `cache` was made by (a full cache without
// interventions). Integrated gradients runs `steps` forward and backward passes (steps >= 1).
// Throws hs::Error for a metric that does not fit (check_metric), hs::Cancelled when asked.
InputAttribution input_attribution(const ActivationCache& cache, const Metric& metric, InputAttributionMethod method,
                                   int steps = 32, const AttributionControl& control = {});

// Sentences to show beside an integrated-gradients result whose completeness error is large
// (over 5% of |metric - baseline_metric|, and over 1e-3): its attributions do not add up to the
// change they split, so they are an estimate at this number of steps. Empty otherwise, and for
// gradient x input (whose completeness error measures how far M is from linear, not a flaw).
std::vector<std::string> input_attribution_warnings(const InputAttribution& a);

// -a . dM/da for every head, MLP layer and neuron, from a gradient that keeps attn.hook_z,
// hook_mlp_out and mlp.hook_post (component_gradient_hooks()).
struct ComponentAttribution {
  RowMatrixXf heads;     // [layer, head]
  VectorXf mlp_layers;   // [layer]
  RowMatrixXf neurons;   // [layer, d_mlp]
};
std::vector<HookPoint> component_gradient_hooks();
ComponentAttribution component_attribution(const ActivationCache& cache, const GradientCache& grad);

// A[q, k] * dM/dA[q, k] of head (layer, head): [query, key], zeros above the diagonal. The
// gradient must keep attn.hook_pattern.
RowMatrixXf attention_edge_attribution(const ActivationCache& cache, const GradientCache& grad, int layer, int head);

}  // namespace hs
