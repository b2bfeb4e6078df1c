// Information-flow routes (core/analysis/info_routes.h) against the float64 reference
// tools/reference/routesref.py (the LM Transparency Tool's algorithm), whose outputs
// tests/fixtures/routes holds (tools/reference/make_routes_fixtures.py): the built-in model (GPT-2
// family), a GQA Llama, a parallel GPT-NeoX and a Gemma 2 with post-norms and a sliding window.
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "core/analysis/info_routes.h"
#include "core/error.h"
#include "core/io/npz_reader.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "tests/core/test_support.h"

namespace {

namespace fs = std::filesystem;

// A share (a number in [0, 1]) from the float32 run against the float64 reference: absolute, well
// above float32 rounding of the activations, and under every fixture's margin (the smallest
// distance of a reference share from the threshold, checked below), so both sides drop the same.
constexpr double kShareTolerance = 1e-5;

struct Reference {
  std::map<std::string, hs::Tensor> a;
  const hs::Tensor& operator[](const std::string& k) const {
    const auto it = a.find(k);
    REQUIRE(it != a.end());
    return it->second;
  }
};

struct Case {
  std::string name;
  std::shared_ptr<const hs::Model> model;
  Reference ref;
  std::shared_ptr<const hs::ActivationCache> cache;
};

Case fixture(const std::string& name) {
  Case c;
  c.name = name;
  const std::map<std::string, std::string> models = {{"llama", "llama_gqa"}, {"neox", "neox_parallel"},
                                                     {"gemma2", "gemma2_window"}};
  c.model = hs::Model::load(name == "builtin" ? hs::test::source_dir() / "resources/models/headscope-tiny"
                                              : hs::test::fixture_model(models.at(name)));
  for (hs::NpzArray& x : hs::read_npz_file(hs::test::source_dir() / "tests/fixtures/routes" / name / "routes.npz"))
    c.ref.a.emplace(x.name, std::move(x.tensor));
  std::vector<int32_t> tokens;
  for (float t : c.ref["tokens"].data) tokens.push_back(static_cast<int32_t>(t));
  c.cache = hs::run_tokens(c.model, tokens).cache;
  return c;
}

const std::vector<std::string> kFixtures = {"builtin", "llama", "neox", "gemma2"};

// LM-TT's graph: one weight per (from, to), heads summed and the residual added onto k = q.
std::map<std::pair<int, int>, double> merged(const hs::InfoRoutes& r, const std::vector<int>* only = nullptr) {
  std::map<std::pair<int, int>, double> m;
  auto add = [&](const hs::RouteEdge& e) { m[{e.from, e.to}] += e.weight; };
  if (only) {
    for (int i : *only) add(r.edges[static_cast<size_t>(i)]);
  } else {
    for (const hs::RouteEdge& e : r.edges) add(e);
  }
  return m;
}

// The sum of the edges into each node.
std::vector<double> into_sums(const hs::InfoRoutes& r) {
  std::vector<double> s(r.nodes.size(), 0.0);
  for (const hs::RouteEdge& e : r.edges) s[static_cast<size_t>(e.to)] += e.weight;
  return s;
}

}  // namespace

TEST_CASE("routes: every raw share matches LM-TT's float64 reference", "[routes]") {
  for (const std::string& name : kFixtures) {
    INFO(name);
    const Case c = fixture(name);
    const hs::ModelConfig& cfg = c.cache->config();
    const int n = c.cache->n_pos(), H = cfg.n_heads, L = cfg.n_layers;
    const auto& attn = c.ref["attn_raw"].data;  // [layer, query_pos, key_pos, head]
    REQUIRE(c.ref["attn_raw"].shape == std::vector<int64_t>{L, n, n, H});
    double worst = 0.0;
    int checked = 0;
    for (int l = 0; l < L; ++l) {
      const hs::LayerShares s = hs::layer_shares(*c.cache, l);
      for (int q = 0; q < n; ++q) {
        const size_t lq = static_cast<size_t>(l * n + q);
        for (int k = 0; k < n; ++k)
          for (int h = 0; h < H; ++h) {
            // Later keys: LM-TT's floor share, the same for every (head, later key) of a query.
            const double ours = k <= q ? s.attn_at(q, k, h) : s.attn_later_key[static_cast<size_t>(q)];
            worst = std::max(worst, std::abs(ours - attn[(lq * n + static_cast<size_t>(k)) * H + static_cast<size_t>(h)]));
            ++checked;
          }
        worst = std::max(worst, std::abs(s.attn_resid[static_cast<size_t>(q)] - c.ref["attn_resid_raw"].data[lq]));
        worst = std::max(worst, std::abs(s.mlp[static_cast<size_t>(q)] - c.ref["mlp_raw"].data[lq]));
        worst = std::max(worst, std::abs(s.mlp_resid[static_cast<size_t>(q)] - c.ref["mlp_resid_raw"].data[lq]));
        checked += 3;
      }
    }
    INFO("largest share error " << worst << " over " << checked << " shares");
    CHECK(worst <= kShareTolerance);
    CHECK(worst < c.ref["margin"].data[0]);
  }
}

TEST_CASE("routes: the thresholded graph and the routes are the reference's", "[routes]") {
  for (const std::string& name : kFixtures) {
    INFO(name);
    const Case c = fixture(name);
    const hs::InfoRoutes r = hs::info_routes(*c.cache);
    const int n = r.n_pos, H = r.n_heads;
    CHECK(r.threshold == 0.04);
    CHECK(r.position == n - 1);
    REQUIRE(static_cast<int>(r.nodes.size()) == n * (1 + 3 * r.n_layers));
    // Per head: each kept (head, key) share after renormalising.
    const auto& kept = c.ref["attn_kept"].data;  // [layer, query_pos, key_pos, head]
    size_t ref_kept = 0;
    for (float x : kept) ref_kept += x > 0.0f;
    size_t ours_kept = 0;
    double worst = 0.0;
    for (const hs::RouteEdge& e : r.edges) {
      if (e.kind != hs::RouteEdgeKind::Attention) continue;
      ++ours_kept;
      const int q = r.nodes[static_cast<size_t>(e.to)].pos, k = r.nodes[static_cast<size_t>(e.from)].pos;
      worst = std::max(worst, std::abs(static_cast<double>(e.weight) - kept[((static_cast<size_t>(e.layer) * n + q) * n + k) * H + e.head]));
    }
    CHECK(ours_kept == ref_kept);
    // LM-TT's own graph: the same node pairs with the same summed weights.
    const auto ours = merged(r);
    const auto& ge = c.ref["graph_edges"];
    REQUIRE(ours.size() == static_cast<size_t>(ge.shape[0]));
    for (int64_t i = 0; i < ge.shape[0]; ++i) {
      const std::pair<int, int> key{static_cast<int>(ge.data[static_cast<size_t>(2 * i)]),
                                    static_cast<int>(ge.data[static_cast<size_t>(2 * i + 1)])};
      const auto it = ours.find(key);
      INFO("edge " << r.node_name(key.first) << " -> " << r.node_name(key.second));
      REQUIRE(it != ours.end());
      worst = std::max(worst, std::abs(it->second - c.ref["graph_weights"].data[static_cast<size_t>(i)]));
    }
    INFO("largest weight error " << worst);
    CHECK(worst <= kShareTolerance);
    // The routes: build_paths_to_predictions' edge set, exactly.
    std::set<std::pair<int, int>> route, ref_route;
    for (const auto& [key, weight] : merged(r, &r.route_edges)) route.insert(key);
    const auto& re = c.ref["route_edges"];
    for (int64_t i = 0; i < re.shape[0]; ++i)
      ref_route.insert({static_cast<int>(re.data[static_cast<size_t>(2 * i)]), static_cast<int>(re.data[static_cast<size_t>(2 * i + 1)])});
    CHECK(route == ref_route);
    CHECK(!route.empty());
  }
}

TEST_CASE("routes: shares sum to 1 where LM-TT normalises, and routes lead to the start node", "[routes]") {
  for (const std::string& name : kFixtures) {
    INFO(name);
    const Case c = fixture(name);
    const int n = c.cache->n_pos(), H = c.cache->config().n_heads;
    // get_contributions: the raw shares of each whole sum to 1 (later keys' floor shares included).
    for (int l = 0; l < c.cache->n_layer(); ++l) {
      const hs::LayerShares s = hs::layer_shares(*c.cache, l);
      for (int q = 0; q < n; ++q) {
        double sum = s.attn_resid[static_cast<size_t>(q)] + s.attn_later_key[static_cast<size_t>(q)] * (n - 1 - q) * H;
        for (int k = 0; k <= q; ++k)
          for (int h = 0; h < H; ++h) sum += s.attn_at(q, k, h);
        CHECK(std::abs(sum - 1.0) <= 1e-12);
        CHECK(std::abs(s.mlp[static_cast<size_t>(q)] + s.mlp_resid[static_cast<size_t>(q)] - 1.0) <= 1e-12);
      }
    }
    // After the threshold: the kept edges into every residual state (A, I) sum to 1, an MLP's
    // output edge carries its input edge's weight, and every kept weight exceeds the threshold
    // (renormalising only raises a kept share).
    const hs::InfoRoutes r = hs::info_routes(*c.cache);
    const std::vector<double> sums = into_sums(r);
    for (size_t i = 0; i < r.nodes.size(); ++i) {
      const hs::RouteNodeKind kind = r.nodes[i].kind;
      if (kind == hs::RouteNodeKind::AfterAttn || kind == hs::RouteNodeKind::AfterMlp) CHECK(std::abs(sums[i] - 1.0) <= 1e-6);
      if (kind == hs::RouteNodeKind::Embedding) CHECK(sums[i] == 0.0);
    }
    std::map<int, float> mlp_in, mlp_out;
    for (const hs::RouteEdge& e : r.edges) {
      CHECK(e.weight > r.threshold);
      if (e.kind == hs::RouteEdgeKind::Mlp) (r.nodes[static_cast<size_t>(e.to)].kind == hs::RouteNodeKind::Mlp ? mlp_in[e.to] : mlp_out[e.from]) = e.weight;
      // Attention moves information forwards only.
      if (e.kind == hs::RouteEdgeKind::Attention)
        CHECK(r.nodes[static_cast<size_t>(e.from)].pos <= r.nodes[static_cast<size_t>(e.to)].pos);
    }
    CHECK(mlp_in == mlp_out);
    // Every route edge ends at the start node or at a node a route edge leaves.
    std::set<int> route_sources;
    for (int i : r.route_edges) route_sources.insert(r.edges[static_cast<size_t>(i)].from);
    for (int i : r.route_edges) {
      const int to = r.edges[static_cast<size_t>(i)].to;
      CHECK((to == r.start_node() || route_sources.count(to) == 1));
    }
  }
}

TEST_CASE("routes: the threshold keeps exactly the shares above it, and a higher one keeps fewer", "[routes]") {
  const Case c = fixture("builtin");
  const int n = c.cache->n_pos(), H = c.cache->config().n_heads;
  std::vector<hs::LayerShares> shares;
  for (int l = 0; l < c.cache->n_layer(); ++l) shares.push_back(hs::layer_shares(*c.cache, l));
  using Key = std::tuple<int, int, int, int, int>;  // layer, from, to, kind, head
  std::set<Key> previous;
  bool first = true;
  for (double threshold : {0.01, 0.04, 0.1, 0.3}) {
    INFO("threshold " << threshold);
    hs::RouteOptions o;
    o.threshold = threshold;
    const hs::InfoRoutes r = hs::info_routes(*c.cache, o);
    size_t expected_attention = 0;
    for (const hs::LayerShares& s : shares)
      for (int q = 0; q < n; ++q)
        for (int k = 0; k <= q; ++k)
          for (int h = 0; h < H; ++h) expected_attention += s.attn_at(q, k, h) > threshold;
    std::set<Key> now;
    size_t attention = 0;
    for (const hs::RouteEdge& e : r.edges) {
      now.insert({e.layer, e.from, e.to, static_cast<int>(e.kind), e.head});
      if (e.kind != hs::RouteEdgeKind::Attention) continue;
      ++attention;
      const int q = r.nodes[static_cast<size_t>(e.to)].pos, k = r.nodes[static_cast<size_t>(e.from)].pos;
      CHECK(shares[static_cast<size_t>(e.layer)].attn_at(q, k, e.head) > threshold);
    }
    CHECK(attention == expected_attention);
    if (!first) {
      CHECK(now.size() < previous.size());
      for (const Key& k : now) CHECK(previous.count(k) == 1);
    }
    previous = std::move(now);
    first = false;
  }
}

TEST_CASE("routes: with parallel blocks the MLP's input edge comes from the stream before the layer", "[routes]") {
  for (const std::string& name : {std::string("neox"), std::string("builtin")}) {
    const Case c = fixture(name);
    const hs::InfoRoutes r = hs::info_routes(*c.cache);
    const bool parallel = name == "neox";
    REQUIRE(c.cache->config().architecture.parallel_blocks == parallel);
    int checked = 0;
    for (const hs::RouteEdge& e : r.edges) {
      if (e.kind != hs::RouteEdgeKind::Mlp || r.nodes[static_cast<size_t>(e.to)].kind != hs::RouteNodeKind::Mlp) continue;
      const hs::RouteNode& from = r.nodes[static_cast<size_t>(e.from)];
      const hs::RouteNode& to = r.nodes[static_cast<size_t>(e.to)];
      CHECK(from.pos == to.pos);
      if (parallel)
        CHECK(e.from == (to.layer == 0 ? r.node_index(hs::RouteNodeKind::Embedding, 0, to.pos)
                                       : r.node_index(hs::RouteNodeKind::AfterMlp, to.layer - 1, to.pos)));
      else
        CHECK(e.from == r.node_index(hs::RouteNodeKind::AfterAttn, to.layer, to.pos));
      ++checked;
    }
    CHECK(checked > 0);
  }
}

TEST_CASE("routes: a 256-token prompt on the built-in model", "[routes]") {
  const auto model = hs::Model::load(hs::test::source_dir() / "resources/models/headscope-tiny");
  std::vector<int32_t> tokens(256);
  for (int i = 0; i < 256; ++i) tokens[static_cast<size_t>(i)] = (i * 37 + 11) % 4000;
  const auto cache = hs::run_tokens(model, tokens).cache;
  const auto start = std::chrono::steady_clock::now();
  const hs::InfoRoutes r = hs::info_routes(*cache);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  WARN("routes of 256 tokens: " << ms << " ms, " << r.edges.size() << " edges, " << r.route_edges.size() << " on the routes");
  CHECK(r.position == 255);
  CHECK(!r.route_edges.empty());
  const std::vector<double> sums = into_sums(r);
  for (size_t i = 0; i < r.nodes.size(); ++i)
    if (r.nodes[i].kind == hs::RouteNodeKind::AfterAttn || r.nodes[i].kind == hs::RouteNodeKind::AfterMlp)
      CHECK(std::abs(sums[i] - 1.0) <= 1e-6);
}

TEST_CASE("routes: bad thresholds, positions and prompts are refused with a message", "[routes]") {
  const auto model = hs::Model::load(hs::test::source_dir() / "resources/models/headscope-tiny");
  const auto cache = hs::run_tokens(model, {4095, 260, 3625}).cache;
  for (double t : {0.0, -0.1, 1.0, 2.0, std::nan("")}) {
    hs::RouteOptions o;
    o.threshold = t;
    CHECK_THROWS_WITH(hs::info_routes(*cache, o),
                      Catch::Matchers::StartsWith("the routes' threshold is a share of a residual stream, between 0 and 1 "
                                                  "(exclusive), such as 0.04; got "));
  }
  for (int p : {3, -2}) {
    hs::RouteOptions o;
    o.position = p;
    CHECK_THROWS_WITH(hs::info_routes(*cache, o), "position " + std::to_string(p) +
                                                      " is outside the prompt (0..2, or -1 for the last).");
  }
  const hs::ActivationCache empty(model->weights(), {});
  CHECK_THROWS_WITH(hs::info_routes(empty), "the prompt is empty: routes need at least one token.");
  CHECK_THROWS_WITH(hs::layer_shares(*cache, 4), "layer 4 is outside the model (0..3).");
}
