// headscope-cli grad: the gradient of a metric with respect to every activation of one run.
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/io/export.h"
#include "core/model/backward.h"

namespace hs::cli {
namespace {

void write_grad_json(std::ostream& out, const hs::GradientCache& g) {
  out << "{\"metric\": ";
  std::ostringstream metric;
  metric.precision(17);
  metric << g.metric_value;
  out << metric.str() << ", \"metric_name\": \"" << hs::to_string(g.metric().kind) << "\", \"tokens\": [";
  for (size_t i = 0; i < g.tokens().size(); ++i) out << (i ? ", " : "") << g.tokens()[i];
  out << "], \"grads\": {";
  bool first = true;
  for (const std::string& key : g.keys()) {
    const hs::Tensor t = g.get(key);
    out << (first ? "" : ", ") << "\"" << key << "\": {\"shape\": [";
    for (size_t i = 0; i < t.shape.size(); ++i) out << (i ? ", " : "") << t.shape[i];
    out << "], \"data\": [";
    for (size_t i = 0; i < t.data.size(); ++i) {
      if (i) out << ",";
      write_json_float(out, t.data[i]);
    }
    out << "]}";
    first = false;
  }
  out << "}}\n";
}

void write_grad_npz(std::ostream& out, const hs::GradientCache& g) {
  const double metric = g.metric_value;
  const std::vector<int32_t>& tokens = g.tokens();
  std::vector<hs::Tensor> grads;
  std::vector<std::string> keys = g.keys();
  for (const std::string& key : keys) grads.push_back(g.get(key));
  std::vector<hs::NpzArrayView> arrays;
  arrays.push_back({"metric", {1}, &metric, hs::NpyType::F64});
  arrays.push_back({"tokens", {static_cast<int64_t>(tokens.size())}, tokens.data(), hs::NpyType::I32});
  for (size_t i = 0; i < keys.size(); ++i) arrays.push_back({keys[i] + ".grad", grads[i].shape, grads[i].data.data()});
  hs::write_npz(out, arrays);
}

int grad(const Args& a) {
  if (a.has("--text") == a.has("--tokens")) throw UsageError("grad needs exactly one of --text TEXT or --tokens 1,2,3.");
  const std::string out = a.text("-o");
  const std::string ext = output_extension(out, {".json", ".npz"});
  const auto m = load_model(a);
  const hs::Metric metric = metric_from(a, *m);
  const hs::TextRun r = run_input(a, m, {}, /*for_gradient=*/true);
  hs::GradOptions o;
  o.threads = threads(a);
  const hs::GradientCache g = hs::backward(*r.cache, metric, o);
  hs::write_atomically(out, [&](std::ostream& s) {
    if (ext == ".npz") write_grad_npz(s, g);
    else write_grad_json(s, g);
  });
  return 0;
}

}  // namespace

const CommandSpec& grad_command() {
  static const CommandSpec c{
      .name = "grad",
      .summary = "the gradient of a metric with respect to every activation of a run (a backward pass)",
      .synopsis = {"[--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] --metric logit_diff|logit|logprob|loss|dot",
                   "[--answer TEXT --wrong TEXT | --answer-id N --wrong-id N] [--pos P] [--hook KEY --vector V.npy [--unit U]]",
                   "-o OUT.npz|OUT.json"},
      .help = R"(Usage: headscope-cli grad [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos]
                          --metric logit_diff|logit|logprob|loss|dot [--answer TEXT --wrong TEXT |
                          --answer-id N --wrong-id N] [--pos P] [--hook KEY --vector V.npy [--unit U]]
                          -o OUT.npz|OUT.json

Runs the model once, then backward: the derivative of the metric with respect to every
activation of the cache it depends on, as a TransformerLens backward hook sees it (the total
derivative at that hook point; docs/DESIGN.md, "The backward pass"). Metrics, at position P
(default: the last):
  logit_diff  logit(answer) - logit(wrong)
  logit       logit(answer)            logprob  log softmax(logits)[answer]
  loss        the mean next-token loss over the prompt (positions 0..S-2 predicting 1..S-1; no --pos)
  dot         the activation of --hook KEY at P, dotted with the float32 vector in --vector V.npy:
              the whole row, or with --unit U one head, key/value head or neuron of it; for
              attn.hook_pattern and attn.hook_attn_scores the query row P of one head (U) or of all
              (head-major), masked scores left out.
--answer and --wrong must each be exactly one token (often with a leading space: " Paris"), or
give ids with --answer-id and --wrong-id.

OUT ending in .npz: "metric" (float64, shape (1,)), "tokens" (int32 [pos]) and, for every key the
metric depends on, "KEY.grad" (float32, the shape `headscope-cli run -o x.npz` gives KEY). Keys
the metric does not depend on are left out (those after the hook of a dot product, the other
branch of a parallel block, ...); a key that depends on it at some positions only is written
whole, with zeros at the others. OUT ending in .json: {"metric", "metric_name", "tokens",
"grads": {KEY: {"shape": [...], "data": [flat, row-major]}}}. Written atomically.
With key/value heads, hook_k and hook_v gradients are summed over the query heads sharing them;
masked attention scores have gradient 0; attn.hook_pattern's gradient above the diagonal is
dM/dz[q] . v[k], as TransformerLens's autograd gives it.
)",
      .options = concat({{model_option(), text_option("the prompt to run"), tokens_option(), no_bos_option()},
                       metric_options("grad", true),
                       {threads_option("threads (default: the engine's choice)"),
                        output_option(".npz or .json", "grad needs -o OUT.npz or -o OUT.json.")}}),
      .run = grad,
  };
  return c;
}

}  // namespace hs::cli
