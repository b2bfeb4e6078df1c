// headscope-cli graph: the attribution graph of a prompt's next-token prediction over transcoder
// features (or, with --neurons, MLP neurons), pruned and written as Neuronpedia's graph JSON.
#include <chrono>
#include <cstdio>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/attribution_graph.h"
#include "core/analysis/graph_prune.h"
#include "core/io/export.h"
#include "core/features/sae.h"
#include "core/io/graph_json.h"

namespace hs::cli {
namespace {

int graph(const Args& a) {
  if (a.has("--text") == a.has("--tokens")) throw UsageError("graph needs exactly one of --text TEXT or --tokens 1,2,3.");
  const std::string out = a.text("-o");
  output_extension(out, {".json"});
  if (a.has("--raw")) output_extension(a.text("--raw"), {".npz"});
  const double node_threshold = a.number("--node-threshold"), edge_threshold = a.number("--edge-threshold");
  if (node_threshold > 1.0 || edge_threshold > 1.0)
    throw UsageError("--node-threshold and --edge-threshold are shares of the total influence, between 0 and 1.");
  const bool neurons = a.has("--neurons");
  if (neurons && a.has("--transcoders"))
    throw UsageError("graph takes --transcoders DIR or --neurons, not both: a graph's feature nodes are either transcoder "
                     "features or MLP neurons.");
  const auto m = load_model(a);
  std::vector<std::filesystem::path> dirs;
  for (const std::string& d : a.texts("--transcoders")) dirs.emplace_back(d);
  if (dirs.empty() && !neurons) {
    // The model's own (the built-in model ships a transcoder per layer in saes/).
    const std::filesystem::path own = m->dir() / "saes";
    if (!std::filesystem::is_directory(own))
      throw UsageError("graph needs --transcoders DIR (a transcoder set, or a folder of one transcoder per layer); this "
                       "model's folder has no saes/ of its own.");
    dirs.push_back(own);
  }
  const std::vector<std::shared_ptr<const hs::Sae>> transcoders =
      neurons ? std::vector<std::shared_ptr<const hs::Sae>>{} : hs::load_graph_transcoders(dirs, m->config());
  const hs::TextRun r = run_input(a, m);
  hs::GraphOptions options;
  options.max_logits = static_cast<int>(a.integer("--max-logits"));
  options.logit_probability = a.number("--logit-probability");
  // Absent: the graph kind's default (kTranscoderGraphMaxNodes, kNeuronGraphMaxNodes).
  if (a.has("--max-feature-nodes")) options.max_feature_nodes = static_cast<int>(a.integer("--max-feature-nodes"));
  options.batch = static_cast<int>(a.integer("--batch"));
  options.threads = threads(a);
  const auto start = std::chrono::steady_clock::now();
  const hs::AttributionGraph g =
      neurons ? hs::neuron_attribution_graph(*r.cache, options) : hs::attribution_graph(*r.cache, transcoders, options);
  const auto built = std::chrono::steady_clock::now();
  const hs::PrunedGraph pruned = hs::prune_graph(g, node_threshold, edge_threshold);
  const auto done = std::chrono::steady_clock::now();

  hs::GraphLabels labels;
  labels.slug = std::filesystem::path(out).stem().string();
  labels.scan = m->name();
  for (const auto& t : transcoders) labels.transcoder_list.push_back(t->name);
  labels.prompt = r.text.empty() ? m->tokenizer().decode(r.tokens) : r.text;
  for (int32_t t : r.tokens) labels.prompt_tokens.push_back(m->tokenizer().decode(std::span<const int32_t>(&t, 1)));
  for (int32_t t : g.logit_tokens) labels.logit_tokens.push_back(m->tokenizer().decode(std::span<const int32_t>(&t, 1)));
  labels.options = options;
  labels.options.max_feature_nodes = g.max_feature_nodes;
  labels.create_time_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string json = hs::graph_to_json(g, pruned, labels);
  hs::write_file_atomically(out, json);

  if (a.has("--raw")) {
    std::vector<std::string> ids;
    for (int i = 0; i < g.n_nodes(); ++i) ids.push_back(g.node_id(i));
    int width = 0;
    const std::vector<char32_t> id_text = hs::npy_unicode(ids, width);
    std::vector<float> activations;
    std::vector<int32_t> features;  // [n_features, 3]: layer, pos, latent (neuron)
    for (int s : g.selected) {
      const auto& f = g.active[static_cast<size_t>(s)];
      activations.push_back(f.activation);
      features.insert(features.end(), {f.layer, f.pos, f.latent});
    }
    const int64_t N = g.n_nodes(), F = g.n_features(), K = g.n_logits();
    std::vector<int32_t> mask(pruned.node_mask.begin(), pruned.node_mask.end());
    std::vector<NpzArrayView> arrays = {
        {"adjacency", {N, N}, g.adjacency.data()},
        {"node_ids", {N}, id_text.data(), hs::NpyType::Unicode, width},
        {"activations", {F}, activations.data()},
        {"features", {F, 3}, features.data(), hs::NpyType::I32},
        {"logit_tokens", {K}, g.logit_tokens.data(), hs::NpyType::I32},
        {"logit_probs", {K}, g.logit_probs.data()},
        {"node_input", {N}, g.node_input.data()},
        {"node_influence", {N}, pruned.node_influence.data(), hs::NpyType::F64},
        {"node_mask", {N}, mask.data(), hs::NpyType::I32},
        {"tokens", {static_cast<int64_t>(g.tokens.size())}, g.tokens.data(), hs::NpyType::I32},
    };
    hs::write_atomically(a.text("--raw"), [&](std::ostream& s) { hs::write_npz(s, arrays); });
  }
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::fprintf(stderr,
               "graph: %d tokens, %zu active %s, %d logits (p = %.3f); %d of %d nodes and %zu edges kept; built in "
               "%.0f ms, pruned in %.0f ms\n",
               g.n_pos, g.active.size(), neurons ? "neurons" : "features", g.n_logits(), [&] {
                 double p = 0;
                 for (float x : g.logit_probs) p += x;
                 return p;
               }(),
               [&] {
                 int n = 0;
                 for (char k : pruned.node_mask) n += k != 0;
                 return n;
               }(),
               g.n_nodes(), pruned.edges.size(), ms(built - start), ms(done - built));
  return 0;
}

}  // namespace

const CommandSpec& graph_command() {
  static const CommandSpec c{
      .name = "graph",
      .summary = "the attribution graph of the next-token prediction over transcoder features or MLP neurons",
      .synopsis = {"[--model DIR] [--transcoders DIR... | --neurons] (--text TEXT | --tokens 1,2,3) [--no-bos]",
                   "[--node-threshold 0.8] [--edge-threshold 0.98] -o GRAPH.json [--raw RAW.npz]"},
      .help = R"(Usage: headscope-cli graph [--model DIR] [--transcoders DIR... | --neurons] (--text TEXT | --tokens 1,2,3) [--no-bos]
                           [--node-threshold 0.8] [--edge-threshold 0.98] -o GRAPH.json [--raw RAW.npz]

Builds the attribution graph of the prompt's next-token prediction as circuit-tracer does: the
attention patterns and norm scales frozen at the run's values, each MLP replaced by its
transcoder's features plus an error node, so that what is left is linear and reproduces the
run; nodes are the active features, the error nodes, the token embeddings and the top logits
(until their probabilities sum to 0.95, at most 10); an edge is a source's direct linear effect
on a target's input. The graph is pruned by influence on the logits (the nodes holding
--node-threshold of it, then the edges holding --edge-threshold) and written as Neuronpedia's
graph JSON, which Neuronpedia and HeadScope's Graph view open.

--transcoders takes a transcoder folder (SAELens, a circuit-tracer set, Gemma Scope) or a folder
of them, and may be repeated; one transcoder per layer is needed. Without it, the model's own
(the built-in model's saes/) are used.

--neurons builds the graph for any model without transcoders: its feature nodes are MLP neurons.
A neuron at a position after the first is a node when its mlp.hook_post is positive (gated MLPs:
when its gate is open, act(gate) > 0); the others, and position 0's, are constants. Its input is
its mlp.hook_pre, its vector hook_post times its W_out row. The MLP's output is exactly the sum of
its neurons' vectors plus b_out, so there are no error nodes. Neurons are polysemantic: a neuron
node does not name one concept as a transcoder feature is meant to. Rows are computed for the
2048 most influential neurons by default (--max-feature-nodes; 0: all): each row holds one
column per active neuron, tens of thousands at 32 tokens, so all of them would take gigabytes.

--max-feature-nodes bounds the rows computed: by default 7500 transcoder features, as circuit-tracer's
command line does, and 2048 neurons; 0 computes every one. Under the bound the rows are chosen by
their influence on the logits, as circuit-tracer chooses them, and the graph's feature nodes are the
chosen ones. A prompt with fewer active features than the bound gives all of them rows. The
memory of a long prompt's graph is set by this bound, not by the prompt's length squared
(docs/graph.md, "Long prompts").

RAW.npz holds the unpruned graph: adjacency float32 [nodes, nodes] (rows targets, columns
sources; nodes ordered features, errors, tokens, logits), node_ids, features int32 [features, 3]
(layer, position, latent or neuron), activations, logit_tokens, logit_probs, node_input (each
node's input: a feature's pre-activation, a neuron's hook_pre, a logit's demeaned logit),
node_influence, node_mask (kept) and tokens. A neuron graph has no error nodes.
Files are written atomically: on any error, none is left.
)",
      .options = {model_option(),
                  {.name = "--transcoders", .metavar = "DIR", .help = "a transcoder folder or a folder of them (repeatable)",
                   .repeatable = true},
                  {.name = "--neurons", .kind = ValueKind::Flag,
                   .help = "MLP neurons as the feature nodes, without transcoders (any model)"},
                  text_option("the prompt to explain"), tokens_option(), no_bos_option(),
                  {.name = "--node-threshold", .metavar = "F", .kind = ValueKind::Number,
                   .help = "keep the nodes holding this share of the influence on the logits", .default_value = "0.8"},
                  {.name = "--edge-threshold", .metavar = "F", .kind = ValueKind::Number,
                   .help = "keep the edges holding this share of the influence", .default_value = "0.98"},
                  {.name = "--max-logits", .metavar = "N", .kind = ValueKind::Integer,
                   .help = "at most this many logit nodes", .default_value = "10", .min = 1, .max = 1000},
                  {.name = "--logit-probability", .metavar = "P", .kind = ValueKind::Number,
                   .help = "logit nodes until their probabilities sum to this", .default_value = "0.95"},
                  {.name = "--max-feature-nodes", .metavar = "N", .kind = ValueKind::Integer,
                   .help = "compute rows for at most N features, the most influential (0: all; default: 7500 "
                           "transcoder features, 2048 neurons)",
                   .min = 0, .max = 1 << 30},
                  {.name = "--batch", .metavar = "N", .kind = ValueKind::Integer, .help = "targets per backward pass",
                   .default_value = "64", .min = 1, .max = 1 << 16},
                  threads_option("threads (default: all cores)"),
                  output_option(".json", "graph needs -o GRAPH.json."),
                  {.name = "--raw", .metavar = "RAW.npz", .help = "also write the unpruned graph"}},
      .run = graph,
  };
  return c;
}

}  // namespace hs::cli
