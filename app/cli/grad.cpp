// headscope-cli grad: the gradient of a metric with respect to every activation of one run.
#include <climits>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/patching.h"
#include "core/io/export.h"
#include "core/io/npz_reader.h"
#include "core/model/backward.h"

namespace hs::cli {
namespace {

// A token given as --NAME TEXT (one token, the patch command's rule) or --NAME-id N; nullopt when
// neither is given.
std::optional<int32_t> token_option(const Args& a, const hs::Model& m, const std::string& name, const std::string& role) {
  const bool text = a.has(name), id = a.has(name + "-id");
  if (text && id) throw UsageError("give " + name + " TEXT or " + name + "-id N, not both.");
  if (text) return hs::single_token(m, a.text(name), role);
  if (id) return static_cast<int32_t>(a.integer(name + "-id"));
  return std::nullopt;
}

hs::Metric metric_from(const Args& a, const hs::Model& m, hs::MetricKind kind) {
  const bool wants_answer = kind == hs::MetricKind::LogitDiff || kind == hs::MetricKind::Logit ||
                            kind == hs::MetricKind::LogProb;
  const std::string name(hs::to_string(kind));
  if (!wants_answer && (a.has("--answer") || a.has("--answer-id")))
    throw UsageError("--metric " + name + " takes no answer; --answer is for logit_diff, logit and logprob.");
  if (kind != hs::MetricKind::LogitDiff && (a.has("--wrong") || a.has("--wrong-id")))
    throw UsageError("--wrong is for --metric logit_diff only.");
  if (kind != hs::MetricKind::Dot && (a.has("--hook") || a.has("--vector") || a.has("--unit")))
    throw UsageError("--hook, --vector and --unit are for --metric dot only.");
  if (kind == hs::MetricKind::Loss && a.has("--pos"))
    throw UsageError("--metric loss covers every position (each predicting the next); --pos is for the other metrics.");
  const int pos = a.has("--pos") ? static_cast<int>(a.integer("--pos")) : -1;
  hs::Metric metric;
  switch (kind) {
    case hs::MetricKind::LogitDiff: {
      const auto answer = token_option(a, m, "--answer", "the answer");
      const auto wrong = token_option(a, m, "--wrong", "the wrong answer");
      if (!answer || !wrong)
        throw UsageError("--metric logit_diff needs --answer TEXT and --wrong TEXT (or --answer-id N and --wrong-id N).");
      metric = hs::logit_diff_metric(*answer, *wrong, pos);
      break;
    }
    case hs::MetricKind::Logit:
    case hs::MetricKind::LogProb: {
      const auto token = token_option(a, m, "--answer", "the token");
      if (!token) throw UsageError("--metric " + name + " needs the token: --answer TEXT or --answer-id N.");
      metric = kind == hs::MetricKind::Logit ? hs::logit_metric(*token, pos) : hs::logprob_metric(*token, pos);
      break;
    }
    case hs::MetricKind::Loss:
      metric = hs::loss_metric();
      break;
    case hs::MetricKind::Dot: {
      if (!a.has("--hook") || !a.has("--vector"))
        throw UsageError("--metric dot needs --hook KEY (blocks.3.hook_resid_post, ...) and --vector FILE.npy.");
      const std::string key = a.text("--hook");
      const std::optional<hs::HookKey> k = hs::parse_hook_key(m.config(), key);
      if (!k || !hs::hook_exists(m.config(), k->hook))
        throw UsageError("--hook " + key + ": not a key of this model; give a full key such as blocks.0.attn.hook_z "
                         "(`headscope-cli hooks --model DIR` lists them).");
      const hs::Tensor v = hs::read_npy_file(a.text("--vector"));
      metric = hs::dot_metric(k->hook, k->layer, v.data, pos, a.has("--unit") ? static_cast<int>(a.integer("--unit")) : -1);
      break;
    }
  }
  return metric;
}

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
  const std::string metric_name = a.text("--metric");
  const std::optional<hs::MetricKind> kind = hs::parse_metric_kind(metric_name);
  if (!kind) throw UsageError("--metric " + metric_name + ": choose one of " + hs::metric_kind_names() + ".");
  const auto m = load_model(a);
  const hs::Metric metric = metric_from(a, *m, *kind);
  const hs::TextRun r = run_input(a, m);
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
      .options = {model_option(), text_option("the prompt to run"), tokens_option(), no_bos_option(),
                  required({.name = "--metric", .metavar = "KIND", .help = "logit_diff, logit, logprob, loss or dot"},
                           "grad needs --metric logit_diff|logit|logprob|loss|dot."),
                  {.name = "--answer", .metavar = "TEXT", .help = "the answer (logit_diff) or the token (logit, logprob): one token"},
                  {.name = "--wrong", .metavar = "TEXT", .help = "the token subtracted (logit_diff): one token"},
                  {.name = "--answer-id", .metavar = "N", .kind = ValueKind::Integer, .help = "the answer as a token id",
                   .min = 0, .max = INT32_MAX},
                  {.name = "--wrong-id", .metavar = "N", .kind = ValueKind::Integer, .help = "the wrong answer as a token id",
                   .min = 0, .max = INT32_MAX},
                  {.name = "--pos", .metavar = "P", .kind = ValueKind::Integer, .help = "the position the metric reads (default: the last)",
                   .min = 0, .max = INT32_MAX},
                  {.name = "--hook", .metavar = "KEY", .help = "dot: the activation, a full key such as blocks.0.attn.hook_z"},
                  {.name = "--vector", .metavar = "V.npy", .help = "dot: the float32 vector (numpy.save)"},
                  {.name = "--unit", .metavar = "U", .kind = ValueKind::Integer, .help = "dot: one head, key/value head or neuron of the row",
                   .min = 0, .max = INT32_MAX},
                  threads_option("threads (default: the engine's choice)"),
                  output_option(".npz or .json", "grad needs -o OUT.npz or -o OUT.json.")},
      .run = grad,
  };
  return c;
}

}  // namespace hs::cli
