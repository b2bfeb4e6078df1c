// headscope-cli attribute: which input tokens (and, with --components, which heads, MLP layers and
// neurons) a metric of one run is attributed to, by gradients (core/analysis/attribution.h).
#include <algorithm>
#include <climits>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/attribution.h"
#include "core/io/export.h"

namespace hs::cli {
namespace {

using nlohmann::json;

// Each layer's `top` neurons by |estimate|, largest first: [{"neuron", "attribution"}].
json top_neurons_json(const hs::RowMatrixXf& neurons, int top) {
  json out = json::array();
  std::vector<int> order(static_cast<size_t>(neurons.cols()));
  for (Eigen::Index l = 0; l < neurons.rows(); ++l) {
    std::iota(order.begin(), order.end(), 0);
    const size_t n = std::min(order.size(), static_cast<size_t>(top));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(), [&](int a, int b) {
      const float x = std::abs(neurons(l, a)), y = std::abs(neurons(l, b));
      return x != y ? x > y : a < b;
    });
    json layer = json::array();
    for (size_t i = 0; i < n; ++i)
      layer.push_back({{"neuron", order[i]}, {"attribution", neurons(l, order[i])}});
    out.push_back(std::move(layer));
  }
  return out;
}

int attribute(const Args& a) {
  if (a.has("--text") == a.has("--tokens"))
    throw UsageError("attribute needs exactly one of --text TEXT or --tokens 1,2,3.");
  const std::string out = a.text("-o");
  output_extension(out, {".json"});
  const std::string method_name = a.text("--method");
  const std::optional<hs::InputAttributionMethod> method = hs::parse_input_attribution_method(method_name);
  if (!method) throw UsageError("--method " + method_name + ": choose grad_x_input or integrated_gradients.");
  if (*method == hs::InputAttributionMethod::GradXInput && a.has("--steps"))
    throw UsageError("--steps is for --method integrated_gradients; grad_x_input takes one gradient, at the input.");
  if (a.has("--top-neurons") && !a.flag("--components"))
    throw UsageError("--top-neurons is for --components: give both, or neither.");
  const int steps = static_cast<int>(a.integer("--steps"));
  const auto m = load_model(a);
  const hs::Metric metric = metric_from(a, *m);
  const hs::TextRun r = run_input(a, m, {}, /*for_gradient=*/true);
  hs::AttributionControl control;
  control.threads = threads(a);
  const hs::InputAttribution in = hs::input_attribution(*r.cache, metric, *method, steps, control);
  const std::vector<std::string> warnings = hs::input_attribution_warnings(in);
  for (const std::string& w : warnings) std::cerr << "headscope-cli: warning: " << w << "\n";
  json j = {{"tokens", r.tokens},
            {"labels", r.token_labels},
            {"method", std::string(hs::to_string(in.method))},
            {"steps", in.steps},
            {"metric_name", std::string(hs::to_string(metric.kind))},
            {"metric", in.metric},
            {"baseline_metric", in.baseline_metric},
            {"completeness_error", in.completeness_error},
            {"attributions", in.attributions},
            {"warnings", warnings}};
  if (a.flag("--components")) {
    hs::GradOptions o;
    o.keep = hs::component_gradient_hooks();
    o.threads = threads(a);
    const hs::ComponentAttribution c = hs::component_attribution(*r.cache, hs::backward(*r.cache, metric, o));
    j["heads"] = matrix_json(c.heads);
    j["mlp_layers"] = std::vector<float>(c.mlp_layers.data(), c.mlp_layers.data() + c.mlp_layers.size());
    j["top_neurons"] = top_neurons_json(c.neurons, static_cast<int>(a.integer("--top-neurons")));
  }
  hs::write_file_atomically(out, j.dump() + "\n");
  return 0;
}

}  // namespace

const CommandSpec& attribute_command() {
  static const CommandSpec c{
      .name = "attribute",
      .summary = "which input tokens (and heads, MLP layers, neurons) a metric is attributed to, by gradients",
      .synopsis = {"[--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] --method grad_x_input|integrated_gradients",
                   "[--steps N] --metric logit_diff|logit|logprob|loss [--answer TEXT --wrong TEXT |",
                   "--answer-id N --wrong-id N] [--pos P] [--components [--top-neurons K]] -o OUT.json"},
      .help = R"(Usage: headscope-cli attribute [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos]
                               --method grad_x_input|integrated_gradients [--steps N]
                               --metric logit_diff|logit|logprob|loss [--answer TEXT --wrong TEXT |
                               --answer-id N --wrong-id N] [--pos P] [--components [--top-neurons K]]
                               -o OUT.json

Splits a metric of one run over the input tokens, on their token embeddings x = hook_embed
(learned position embeddings stay as they are and are not attributed). The baseline x' keeps
position 0 and has zero token embeddings at every other position; attributions[p] =
sum over d_model of (x - x')[p] * g[p], 0 at position 0, where g is
  grad_x_input          dM/dx at the input (one backward pass), or
  integrated_gradients  the mean of dM/dx at x' + alpha (x - x') over alpha = (k + 0.5) / N,
                        k = 0..N-1 (the midpoint rule; N = --steps, default 32; N passes).
The metrics are grad's (headscope-cli grad --help), at position P (default: the last).
Writes one JSON object: "tokens", "labels", "method", "steps" (0 for grad_x_input),
"metric_name", "metric" (M(x)), "baseline_metric" (M(x')), "attributions" ([pos]),
"completeness_error" (sum(attributions) - (metric - baseline_metric): for integrated gradients
the error of the midpoint rule, -> 0 as N grows; for grad_x_input how far M is from linear in x)
and "warnings" (also printed: an integrated-gradients error over 5% of the change it splits).
With --components also every component's estimated effect of zero-ablating it, -a . dM/da over
every position (one more backward pass): "heads" ([layer][head], a = attn.hook_z of the head),
"mlp_layers" ([layer], a = hook_mlp_out) and "top_neurons" ([layer][K] of {"neuron",
"attribution"}, a = mlp.hook_post of the neuron; the K largest by magnitude, default 10).
docs/attribution.md says what these estimate and where they fail.
)",
      .options = concat({{model_option(), text_option("the prompt to run"), tokens_option(), no_bos_option(),
                          required({.name = "--method", .metavar = "METHOD", .help = "grad_x_input or integrated_gradients"},
                                   "attribute needs --method grad_x_input|integrated_gradients."),
                          {.name = "--steps", .metavar = "N", .kind = ValueKind::Integer,
                           .help = "integrated gradients' steps (forward and backward passes)", .default_value = "32",
                           .min = 1, .max = 4096}},
                         metric_options("attribute", false),
                         {{.name = "--components", .kind = ValueKind::Flag,
                           .help = "add every head's, MLP layer's and top neuron's estimated ablation effect"},
                          {.name = "--top-neurons", .metavar = "K", .kind = ValueKind::Integer,
                           .help = "with --components: the neurons listed per layer", .default_value = "10", .min = 1,
                           .max = INT32_MAX},
                          threads_option("threads (default: the engine's choice)"),
                          output_option(".json", "attribute needs -o OUT.json.")}}),
      .run = attribute,
  };
  return c;
}

}  // namespace hs::cli
