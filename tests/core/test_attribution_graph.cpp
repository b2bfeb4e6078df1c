// Attribution graphs (core/analysis/attribution_graph.h, graph_prune.h, core/io/graph_json.h)
// against the float64 reference tools/reference/graphref.py (PyTorch autograd on the frozen
// replacement model), whose outputs tests/fixtures/graph holds: the built-in model with its four
// transcoders, and a tiny Llama with a plain and a skip transcoder; and MLP neurons as nodes on the
// same two models (GELU, gated SiLU), a parallel-block NeoX, a Gemma 3 (post-norms) and a Gemma 2
// (soft-caps: the logit nodes' inputs are before the final cap).
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>

#include "core/analysis/attribution_graph.h"
#include "core/analysis/graph_prune.h"
#include "core/error.h"
#include "core/features/sae.h"
#include "core/io/graph_json.h"
#include "core/io/npz_reader.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "tests/core/test_support.h"

namespace {

namespace fs = std::filesystem;

struct Reference {
  std::map<std::string, hs::Tensor> a;
  const hs::Tensor& operator[](const std::string& k) const {
    const auto it = a.find(k);
    REQUIRE(it != a.end());
    return it->second;
  }
  int n_nodes() const { return static_cast<int>(a.at("n_nodes").data[0]); }
  // The unpruned adjacency, dense.
  Eigen::MatrixXd adjacency() const {
    const int N = n_nodes();
    Eigen::MatrixXd A = Eigen::MatrixXd::Zero(N, N);
    const auto& r = a.at("edge_rows").data;
    const auto& c = a.at("edge_cols").data;
    const auto& v = a.at("edge_values").data;
    for (size_t i = 0; i < v.size(); ++i) A(static_cast<int>(r[i]), static_cast<int>(c[i])) = v[i];
    return A;
  }
};

Reference read_reference(const fs::path& dir) {
  Reference ref;
  for (hs::NpzArray& x : hs::read_npz_file(dir / "graph.npz")) ref.a.emplace(x.name, std::move(x.tensor));
  return ref;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::shared_ptr<const hs::Model> model;
  std::vector<std::shared_ptr<const hs::Sae>> transcoders;
  Reference ref;
  fs::path dir;
  bool neurons = false;
};

Case fixture(const std::string& name) {
  Case c;
  c.dir = hs::test::source_dir() / "tests/fixtures/graph" / name;
  c.neurons = name.ends_with("_neurons");
  if (name == "builtin_neurons") {
    c.model = hs::Model::load(hs::test::source_dir() / "resources/models/headscope-tiny");
  } else if (name == "llama_neurons") {
    c.model = hs::Model::load(hs::test::fixture_model("llama_gqa"));
  } else if (name == "neox_neurons") {
    c.model = hs::Model::load(hs::test::fixture_model("neox_parallel"));
  } else if (name == "gemma_neurons") {
    c.model = hs::Model::load(hs::test::fixture_model("gemma3_local_global"));
  } else if (name == "gemma2_neurons") {
    c.model = hs::Model::load(hs::test::fixture_model("gemma2_window"));
  } else if (name == "builtin") {
    c.model = hs::Model::load(hs::test::source_dir() / "resources/models/headscope-tiny");
    c.transcoders = hs::load_graph_transcoders({c.model->dir() / "saes"}, c.model->config());
  } else {
    c.model = hs::Model::load(hs::test::fixture_model("llama_gqa"));
    c.transcoders = hs::load_graph_transcoders({c.dir / "transcoders"}, c.model->config());
  }
  c.ref = read_reference(c.dir);
  return c;
}

// Every active unit a row, as the reference has (options.max_feature_nodes -1: 0).
hs::AttributionGraph build(const Case& c, hs::GraphOptions options = {}) {
  std::vector<int32_t> tokens;
  for (float t : c.ref["tokens"].data) tokens.push_back(static_cast<int32_t>(t));
  const hs::TextRun r = hs::run_tokens(c.model, tokens);
  if (options.max_feature_nodes < 0) options.max_feature_nodes = 0;
  return c.neurons ? hs::neuron_attribution_graph(*r.cache, options) : hs::attribution_graph(*r.cache, c.transcoders, options);
}

// An edge of a row computed in another pass than the full graph's: passes of other sizes and
// layers round their products differently, so within 1e-6 of the row's largest edge; an edge the
// full graph has as exactly zero (a source the target cannot reach) is exactly zero.
bool same_edge(float ours, float theirs, const hs::AttributionGraph& full, int full_row) {
  if (theirs == 0.0f) return ours == 0.0f;
  return std::abs(ours - theirs) <= 1e-6f * full.adjacency.row(full_row).cwiseAbs().maxCoeff();
}

const char* const kAllFixtures[] = {"builtin", "llama", "builtin_neurons", "llama_neurons", "neox_neurons", "gemma_neurons",
                                     "gemma2_neurons"};

}  // namespace

TEST_CASE("attribution graphs match the float64 reference edge by edge, and every row adds up to its node's input") {
  for (const std::string name : kAllFixtures) {
    INFO(name);
    const Case c = fixture(name);
    const hs::AttributionGraph g = build(c);
    const Reference& ref = c.ref;
    // Neuron graphs have no error nodes: their MLP outputs are the sum of the neurons' vectors.
    CHECK((g.unit == hs::AttributionGraph::Unit::Neuron) == c.neurons);
    CHECK(g.n_errors() == (c.neurons ? 0 : g.n_layers * g.n_pos));
    // The nodes: every active feature in circuit-tracer's order, the same logits.
    const auto& feats = ref["active_features"];
    REQUIRE(g.n_features() == static_cast<int>(feats.shape[0]));
    REQUIRE(g.n_nodes() == ref.n_nodes());
    for (int i = 0; i < g.n_features(); ++i) {
      const auto& f = g.active[static_cast<size_t>(g.selected[static_cast<size_t>(i)])];
      REQUIRE(f.layer == static_cast<int>(feats.data[static_cast<size_t>(3 * i)]));
      REQUIRE(f.pos == static_cast<int>(feats.data[static_cast<size_t>(3 * i + 1)]));
      REQUIRE(f.latent == static_cast<int>(feats.data[static_cast<size_t>(3 * i + 2)]));
      CHECK(std::abs(f.activation - ref["activations"].data[static_cast<size_t>(i)]) <=
            1e-4f * (1.0f + std::abs(ref["activations"].data[static_cast<size_t>(i)])));
      CHECK(f.pos > 0);  // position 0 holds no feature node
    }
    REQUIRE(g.n_logits() == static_cast<int>(ref["logit_tokens"].shape[0]));
    for (int i = 0; i < g.n_logits(); ++i) {
      CHECK(g.logit_tokens[static_cast<size_t>(i)] == static_cast<int32_t>(ref["logit_tokens"].data[static_cast<size_t>(i)]));
      CHECK(std::abs(g.logit_probs[static_cast<size_t>(i)] - ref["logit_probs"].data[static_cast<size_t>(i)]) <= 1e-5f);
    }
    // Every edge to 1e-4 of its row's scale.
    const Eigen::MatrixXd A = ref.adjacency();
    int checked = 0;
    for (int i = 0; i < g.n_nodes(); ++i) {
      const double scale = A.row(i).cwiseAbs().maxCoeff();
      if (scale == 0.0) {
        CHECK(g.adjacency.row(i).cwiseAbs().maxCoeff() == 0.0f);
        continue;
      }
      const double err = (g.adjacency.row(i).cast<double>() - A.row(i)).cwiseAbs().maxCoeff();
      INFO("node " << g.node_id(i) << ": largest edge error " << err << " of a row scale " << scale);
      CHECK(err <= 1e-4 * scale);
      ++checked;
    }
    CHECK(checked == g.n_features() + g.n_logits());
    // Completeness: a node's incoming edges plus its bias terms (the reference's constant) are its
    // input, which the graph took from the real run.
    for (int i = 0; i < g.n_nodes(); ++i) {
      const double input = g.node_input[static_cast<size_t>(i)];
      const double sum = g.adjacency.row(i).cast<double>().sum() + ref["node_constant"].data[static_cast<size_t>(i)];
      const double size = g.adjacency.row(i).cast<double>().cwiseAbs().sum() + std::abs(input) + 1.0;
      INFO("node " << g.node_id(i));
      CHECK(std::abs(input - ref["node_input"].data[static_cast<size_t>(i)]) <= 1e-4 * (1.0 + std::abs(input)));
      CHECK(std::abs(sum - input) <= 1e-5 * size);
    }
  }
}

TEST_CASE("pruning keeps the reference's nodes and edges, and its JSON is circuit-tracer's") {
  for (const std::string name : kAllFixtures) {
    INFO(name);
    const Case c = fixture(name);
    const hs::AttributionGraph g = build(c);
    hs::GraphPruner pruner(g);
    const hs::PrunedGraph p = pruner.prune(0.8, 0.98);
    const Reference& ref = c.ref;
    // Influences to 1e-4 of their own value plus 1e-6 of the largest: a node reached only through
    // edges far below its rows' scale carries their float32 rounding (relatively larger), and
    // builds without FMA (the sanitized one) round them differently from -march=native.
    double max_influence = 0.0;
    for (float v : ref["node_influence"].data) max_influence = std::max(max_influence, double{v});
    for (int i = 0; i < g.n_nodes(); ++i) {
      INFO("node " << g.node_id(i));
      CHECK(p.kept(i) == (ref["node_mask"].data[static_cast<size_t>(i)] != 0.0f));
      CHECK(std::abs(p.node_influence[static_cast<size_t>(i)] - ref["node_influence"].data[static_cast<size_t>(i)]) <=
            1e-4 * ref["node_influence"].data[static_cast<size_t>(i)] + 1e-6 * max_influence);
      CHECK(std::abs(p.cumulative_scores[static_cast<size_t>(i)] - ref["cumulative_scores"].data[static_cast<size_t>(i)]) <= 1e-5);
    }
    std::vector<std::pair<int, int>> want;
    for (size_t k = 0; k < ref["kept_rows"].data.size(); ++k)
      want.emplace_back(static_cast<int>(ref["kept_rows"].data[k]), static_cast<int>(ref["kept_cols"].data[k]));
    CHECK(p.edges == want);

    // The JSON: the same nodes and links as the reference's, readable back.
    hs::GraphLabels labels;
    labels.slug = "test";
    labels.scan = c.model->name();
    for (int32_t t : g.tokens) labels.prompt_tokens.push_back(c.model->tokenizer().decode(std::span<const int32_t>(&t, 1)));
    const hs::GraphFile ours = hs::read_graph_json(hs::graph_to_json(g, p, labels), "ours");
    const hs::GraphFile theirs = hs::read_graph_json(read_text(c.dir / "graph.json"), "graph.json");
    REQUIRE(ours.nodes.size() == theirs.nodes.size());
    for (size_t i = 0; i < ours.nodes.size(); ++i) {
      CHECK(ours.nodes[i].node_id == theirs.nodes[i].node_id);
      CHECK(ours.nodes[i].feature == theirs.nodes[i].feature);
      CHECK(ours.nodes[i].feature_type == theirs.nodes[i].feature_type);
      CHECK(ours.nodes[i].layer == theirs.nodes[i].layer);
    }
    REQUIRE(ours.links.size() == theirs.links.size());
    for (size_t i = 0; i < ours.links.size(); ++i) {
      CHECK(ours.links[i].source == theirs.links[i].source);
      CHECK(ours.links[i].target == theirs.links[i].target);
      CHECK(std::abs(ours.links[i].weight - theirs.links[i].weight) <= 1e-4 * (1.0 + std::abs(theirs.links[i].weight)));
    }
    CHECK(ours.prompt_tokens == theirs.prompt_tokens);
  }
}

TEST_CASE("a graph with max_feature_nodes computes rows for the most influential features only") {
  // The GQA Llama has a skip transcoder: its rows reach the layers below through W_skip too.
  const std::string name = GENERATE("builtin", "llama");
  INFO(name);
  const Case c = fixture(name);
  const hs::AttributionGraph full = build(c);
  hs::GraphOptions options;
  options.max_feature_nodes = 40;
  options.batch = 8;
  options.update_interval = 2;
  const hs::AttributionGraph part = build(c, options);
  REQUIRE(part.n_features() == 40);
  REQUIRE(part.active.size() == full.active.size());
  // A selected feature's row and its edges from the nodes both graphs have are the full graph's.
  std::map<int, int> full_node;  // active index -> node in the full graph
  for (int i = 0; i < full.n_features(); ++i) full_node[full.selected[static_cast<size_t>(i)]] = i;
  for (int i = 0; i < part.n_features(); ++i) {
    const int fi = full_node.at(part.selected[static_cast<size_t>(i)]);
    for (int j = 0; j < part.n_features(); ++j)
      CHECK(same_edge(part.adjacency(i, j), full.adjacency(fi, full_node.at(part.selected[static_cast<size_t>(j)])), full, fi));
    for (int j = 0; j < part.n_errors() + part.n_pos; ++j)
      CHECK(same_edge(part.adjacency(i, part.n_features() + j), full.adjacency(fi, full.n_features() + j), full, fi));
  }
  // The first rows chosen (update_interval x batch = 16) are the features the logit rows alone
  // weigh most: circuit-tracer's compute_partial_influences after phase 3.
  std::vector<double> influence(static_cast<size_t>(full.n_features()), 0.0);
  for (int k = 0; k < full.n_logits(); ++k) {
    const auto row = full.adjacency.row(full.logit_node(k)).cast<double>().cwiseAbs();
    const double sum = std::max(row.sum(), 1e-8);
    for (int i = 0; i < full.n_features(); ++i)
      influence[static_cast<size_t>(i)] += full.logit_probs[static_cast<size_t>(k)] * row(i) / sum;
  }
  std::vector<int> order(influence.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return influence[static_cast<size_t>(x)] > influence[static_cast<size_t>(y)]; });
  for (int k = 0; k < 16; ++k)
    CHECK(std::find(part.selected.begin(), part.selected.end(), full.selected[static_cast<size_t>(order[static_cast<size_t>(k)])]) !=
          part.selected.end());
  CHECK(part.logit_tokens == full.logit_tokens);
}

TEST_CASE("a batch too large for one pass's buffers runs as several passes with the same rows") {
  const Case c = fixture("builtin");
  // A long prompt (the fixture's tokens repeated): at 160 positions one pass holds about a
  // hundred of the built-in model's targets, so a batch of 256 is split.
  std::vector<int32_t> tokens;
  for (float t : c.ref["tokens"].data) tokens.push_back(static_cast<int32_t>(t));
  const size_t n = tokens.size();
  while (tokens.size() < 160) tokens.push_back(tokens[1 + tokens.size() % (n - 1)]);
  const hs::TextRun r = hs::run_tokens(c.model, tokens);
  // The same rows chosen in the same order: update_interval x batch is the queue either way.
  hs::GraphOptions split;
  split.max_feature_nodes = 300;
  split.batch = 256;
  split.update_interval = 1;
  hs::GraphOptions whole = split;
  whole.batch = 64;
  whole.update_interval = 4;
  const hs::AttributionGraph a = hs::attribution_graph(*r.cache, c.transcoders, split);
  const hs::AttributionGraph b = hs::attribution_graph(*r.cache, c.transcoders, whole);
  REQUIRE(a.selected == b.selected);
  REQUIRE(a.n_features() == 300);
  const float scale = b.adjacency.cwiseAbs().maxCoeff();
  CHECK(scale > 0.0f);
  CHECK((a.adjacency - b.adjacency).cwiseAbs().maxCoeff() <= 1e-5f * scale);
  // The default bound is circuit-tracer's command line's, recorded with the graph.
  CHECK(a.max_feature_nodes == 300);
  const hs::TextRun short_run = hs::run_tokens(c.model, std::vector<int32_t>(tokens.begin(), tokens.begin() + 8));
  CHECK(hs::attribution_graph(*short_run.cache, c.transcoders).max_feature_nodes == hs::kTranscoderGraphMaxNodes);
}

TEST_CASE("a graph reports its progress on the calling thread and stops with hs::Cancelled when asked") {
  const Case c = fixture("builtin");
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<double> fractions;
  bool other_thread = false;
  hs::GraphOptions options;
  options.batch = 4;
  options.threads = 2;
  options.progress = [&](double f) {
    other_thread = other_thread || std::this_thread::get_id() != caller;
    fractions.push_back(f);
  };
  const hs::AttributionGraph full = build(c, options);
  REQUIRE(!fractions.empty());
  CHECK(!other_thread);
  CHECK(std::is_sorted(fractions.begin(), fractions.end()));
  CHECK(fractions.back() <= 1.0);
  CHECK(fractions.front() > 0.0);
  // The same graph as without a callback (its passes are of another size).
  const hs::AttributionGraph plain = build(c);
  REQUIRE(plain.n_nodes() == full.n_nodes());
  for (int i = 0; i < full.n_nodes(); ++i)
    for (int j = 0; j < full.n_nodes(); ++j) CHECK(same_edge(full.adjacency(i, j), plain.adjacency(i, j), plain, i));

  // Cancelled after the first report: the graph stops with hs::Cancelled.
  int asked = 0;
  options.progress = nullptr;
  options.cancelled = [&] { return ++asked >= 1; };
  CHECK_THROWS_AS(build(c, options), hs::Cancelled);
  CHECK(asked >= 1);
}

TEST_CASE("a neuron graph computes rows for the most influential neurons, kNeuronGraphMaxNodes by default") {
  const Case c = fixture("builtin_neurons");
  const hs::AttributionGraph full = build(c);
  hs::GraphOptions options;
  options.max_feature_nodes = 60;
  options.batch = 8;
  options.update_interval = 2;
  const hs::AttributionGraph part = build(c, options);
  REQUIRE(part.n_features() == 60);
  REQUIRE(part.active.size() == full.active.size());
  std::map<int, int> full_node;  // active index -> node in the full graph
  for (int i = 0; i < full.n_features(); ++i) full_node[full.selected[static_cast<size_t>(i)]] = i;
  for (int i = 0; i < part.n_features(); ++i) {
    const int fi = full_node.at(part.selected[static_cast<size_t>(i)]);
    for (int j = 0; j < part.n_features(); ++j)
      CHECK(same_edge(part.adjacency(i, j), full.adjacency(fi, full_node.at(part.selected[static_cast<size_t>(j)])), full, fi));
    for (int j = 0; j < part.n_pos; ++j)
      CHECK(same_edge(part.adjacency(i, part.token_node(j)), full.adjacency(fi, full.token_node(j)), full, fi));
  }
  // The default: a longer prompt has more active neurons than the limit.
  const hs::TextRun r = hs::run_tokens(c.model, {4095, 260, 3625, 2855, 13, 260, 3625});
  const hs::AttributionGraph d = hs::neuron_attribution_graph(*r.cache);
  REQUIRE(static_cast<int>(d.active.size()) > hs::kNeuronGraphMaxNodes);
  CHECK(d.max_feature_nodes == hs::kNeuronGraphMaxNodes);
  CHECK(d.n_features() == hs::kNeuronGraphMaxNodes);
  CHECK(d.n_nodes() == hs::kNeuronGraphMaxNodes + d.n_pos + d.n_logits());
  for (const auto& f : d.active) CHECK((f.pos > 0 && f.activation > 0.0f));
}

TEST_CASE("is_neuron_node: a positive hook_post, or a gated MLP's open gate") {
  CHECK(hs::is_neuron_node(0.5f, 0.0f, false));
  CHECK_FALSE(hs::is_neuron_node(-0.1f, 0.0f, false));
  CHECK_FALSE(hs::is_neuron_node(0.0f, 0.0f, false));
  // Gated: post = act(gate) x up. act(gate) > 0 with up < 0 writes W_out's row negated: a node.
  CHECK(hs::is_neuron_node(-2.0f, -4.0f, true));
  CHECK(hs::is_neuron_node(2.0f, 4.0f, true));
  // act(gate) < 0 (a closed SiLU gate's small negative value): not a node, whatever up's sign.
  CHECK_FALSE(hs::is_neuron_node(-0.1f, 0.5f, true));
  CHECK_FALSE(hs::is_neuron_node(0.1f, -0.5f, true));
  CHECK_FALSE(hs::is_neuron_node(0.0f, 1.0f, true));
}

TEST_CASE("graphs refuse what they cannot explain, naming it") {
  const auto m = hs::Model::load(hs::test::source_dir() / "resources/models/headscope-tiny");
  const fs::path saes = m->dir() / "saes";
  // An SAE given as a transcoder folder.
  REQUIRE_THROWS_WITH(hs::load_graph_transcoders({saes / "resid_pre_2"}, m->config()),
                      Catch::Contains("not a transcoder"));
  // Layers without one.
  REQUIRE_THROWS_WITH(hs::load_graph_transcoders({saes / "transcoder_0", saes / "transcoder_2"}, m->config()),
                      Catch::Contains("layers 1, 3"));
  // Two for one layer.
  REQUIRE_THROWS_WITH(hs::load_graph_transcoders({saes, saes / "transcoder_1"}, m->config()),
                      Catch::Contains("two transcoders read layer 1"));
  // A folder with none.
  REQUIRE_THROWS_WITH(hs::load_graph_transcoders({hs::test::source_dir() / "docs"}, m->config()),
                      Catch::Contains("holds no transcoder"));
  // Graph files that are not.
  REQUIRE_THROWS_WITH(hs::read_graph_json("{\"metadata\": {\"prompt_tokens\": [\"a\"]}, \"nodes\": [], \"links\": [{\"source\": "
                                          "\"x\", \"target\": \"y\", \"weight\": 1}]}",
                                          "g.json"),
                      Catch::Contains("not one of the nodes"));
  REQUIRE_THROWS_WITH(hs::read_graph_json("[1, 2]", "g.json"), Catch::Contains("not a JSON object"));
}
