// QK tracing (core/analysis/qk_trace.h) against the float64 reference tools/reference/qkref.py,
// whose traces tests/fixtures/qk holds (written by tools/reference/make_qk_fixtures.py): the
// built-in model with its transcoders and with neurons, llama_gqa (rotary, GQA) with a plain and a
// skip transcoder and with neurons, gemma2_window (post-norms, soft-cap, a sliding layer),
// qwen3_qknorm and gemma3_local_global (q/k norms, local rotary) with neurons.
//
// Tolerance: the reference runs its own float64 forward and HeadScope's run is float32, so each
// term may differ by the float32 rounding of the activations it is made of. Every term is held to
// 1e-5 of the largest |term| of the reference; the marginals, the total and the scores (sums of
// up to a million terms) to 1e-5 of the largest of the reference's |marginal|s and |score|.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/analysis/attribution_graph.h"
#include "core/analysis/qk_trace.h"
#include "core/error.h"
#include "core/features/features.h"
#include "core/features/sae.h"
#include "core/io/npz_reader.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "tests/core/test_support.h"

namespace {

namespace fs = std::filesystem;
using Key = std::array<int, 4>;  // kind, layer, index, pos

struct Fixture {
  nlohmann::json spec;
  std::shared_ptr<const hs::Model> model;
  std::vector<std::shared_ptr<const hs::Sae>> transcoders;
  std::map<std::string, hs::Tensor> ref;
  std::shared_ptr<const hs::ActivationCache> cache;

  const hs::Tensor& operator[](const std::string& k) const {
    const auto it = ref.find(k);
    REQUIRE(it != ref.end());
    return it->second;
  }
  double scalar(const std::string& k) const { return (*this)[k].data.at(0); }
  int layer() const { return spec["layer"]; }
  int head() const { return spec["head"]; }
  int query() const { return spec["query"]; }
  int key() const { return spec["key"]; }
  hs::QkTrace trace(int top) const {
    return hs::qk_trace(*cache, layer(), head(), query(), key(), transcoders, hs::QkOptions{top});
  }
};

const std::vector<std::string>& case_names() {
  static const std::vector<std::string> names = {"builtin_features", "builtin_neurons", "llama_features", "llama_neurons",
                                                 "gemma2_neurons",   "qwen3_neurons",   "gemma3_neurons"};
  return names;
}

Fixture load(const std::string& name) {
  Fixture f;
  const fs::path dir = hs::test::source_dir() / "tests/fixtures/qk" / name;
  std::ifstream in(dir / "case.json");
  f.spec = nlohmann::json::parse(in);
  f.model = hs::Model::load(hs::test::source_dir() / f.spec["model"].get<std::string>());
  std::vector<fs::path> dirs;
  for (const auto& d : f.spec["transcoders"]) dirs.push_back(hs::test::source_dir() / d.get<std::string>());
  if (!dirs.empty()) f.transcoders = hs::load_graph_transcoders(dirs, f.model->config());
  for (hs::NpzArray& x : hs::read_npz_file(dir / "qk.npz")) f.ref.emplace(x.name, std::move(x.tensor));
  std::vector<int32_t> tokens = f.spec["tokens"].get<std::vector<int32_t>>();
  f.cache = hs::run_tokens(f.model, tokens).cache;
  return f;
}

// The reference's components of one side by key, and their projected rows [n, d_head].
std::map<Key, int> keys_of(const hs::Tensor& keys) {
  std::map<Key, int> out;
  for (int64_t i = 0; i < keys.shape[0]; ++i) {
    Key k;
    for (int j = 0; j < 4; ++j) k[static_cast<size_t>(j)] = static_cast<int>(keys.data[static_cast<size_t>(4 * i + j)]);
    out.emplace(k, static_cast<int>(i));
  }
  return out;
}

Key key_of(const hs::QkComponent& c) { return {static_cast<int>(c.kind), c.layer, c.index, c.pos}; }

Eigen::MatrixXd rows_of(const hs::Tensor& t) {
  Eigen::MatrixXd m(t.shape[0], t.shape[1]);
  for (int64_t i = 0; i < t.shape[0]; ++i)
    for (int64_t j = 0; j < t.shape[1]; ++j) m(i, j) = t.data[static_cast<size_t>(i * t.shape[1] + j)];
  return m;
}

}  // namespace

TEST_CASE("QK tracing: every term, marginal and score matches the float64 reference", "[qk]") {
  for (const std::string& name : case_names()) {
    INFO(name);
    const Fixture f = load(name);
    const hs::QkTrace t = f.trace(0);  // every pair
    const std::map<Key, int> ref_q = keys_of(f["query_keys"]), ref_k = keys_of(f["key_keys"]);
    // The same components on each side: every one of ours is the reference's (a neuron whose float32
    // hook_post is exactly 0 is left out, its float64 one may not be: see below).
    std::vector<int> q_row, k_row;
    for (const hs::QkComponent& c : t.query) {
      const auto it = ref_q.find(key_of(c));
      INFO(hs::qk_component_label(t, c, true));
      REQUIRE(it != ref_q.end());
      q_row.push_back(it->second);
    }
    for (const hs::QkComponent& c : t.key) {
      const auto it = ref_k.find(key_of(c));
      INFO(hs::qk_component_label(t, c, false));
      REQUIRE(it != ref_k.end());
      k_row.push_back(it->second);
    }
    const double s = f.scalar("scale");
    const Eigen::MatrixXd terms = s * rows_of(f["query_u"]) * rows_of(f["key_v"]).transpose();  // [n_q, n_k]
    const double scale = terms.cwiseAbs().maxCoeff(), tol = 1e-5 * scale;
    // The reference's components we do not have carry nothing above the tolerance.
    std::vector<char> q_seen(ref_q.size(), 0), k_seen(ref_k.size(), 0);
    for (int r : q_row) q_seen[static_cast<size_t>(r)] = 1;
    for (int r : k_row) k_seen[static_cast<size_t>(r)] = 1;
    for (size_t r = 0; r < q_seen.size(); ++r)
      if (!q_seen[r]) CHECK(terms.row(static_cast<Eigen::Index>(r)).cwiseAbs().maxCoeff() <= tol);
    for (size_t r = 0; r < k_seen.size(); ++r)
      if (!k_seen[r]) CHECK(terms.col(static_cast<Eigen::Index>(r)).cwiseAbs().maxCoeff() <= tol);
    CHECK(ref_q.size() - t.query.size() <= 2);
    CHECK(ref_k.size() - t.key.size() <= 2);
    REQUIRE(t.pairs.size() == t.query.size() * t.key.size());
    double worst = 0.0;
    for (const hs::QkPair& p : t.pairs)
      worst = std::max(worst, std::abs(p.term - terms(q_row[static_cast<size_t>(p.query)], k_row[static_cast<size_t>(p.key)])));
    CHECK(worst <= tol);
    double worst_marginal = 0.0;  // ours sum over our components, the reference's over its own
    for (size_t i = 0; i < t.query.size(); ++i)
      worst_marginal = std::max(worst_marginal, std::abs(t.query[i].marginal - terms.row(q_row[i]).sum()));
    for (size_t j = 0; j < t.key.size(); ++j)
      worst_marginal = std::max(worst_marginal, std::abs(t.key[j].marginal - terms.col(k_row[j]).sum()));
    const double sum_tol = 1e-5 * std::max({terms.rowwise().sum().cwiseAbs().maxCoeff(), terms.colwise().sum().cwiseAbs().maxCoeff(),
                                            std::abs(f.scalar("score_before_softcap"))});
    CHECK(worst_marginal <= sum_tol);
    CHECK(std::abs(t.total - f.scalar("total")) <= sum_tol);
    CHECK(std::abs(t.score_before_softcap - f.scalar("score_before_softcap")) <= sum_tol);
    CHECK(std::abs(double{t.score} - f.scalar("score")) <= sum_tol);
    std::printf("qk %-16s %4zu x %4zu components: max |term - ref| %.2e (largest |term| %.3g), |marginal - ref| %.2e "
                "(tolerance / 1e-5: %.3g), |score - ref| %.2e\n",
                name.c_str(), t.query.size(), t.key.size(), worst, scale, worst_marginal, sum_tol * 1e5,
                std::abs(t.score_before_softcap - f.scalar("score_before_softcap")));
  }
}

TEST_CASE("QK tracing: the listed pairs plus the remainder are the run's score, and the top pairs are the largest", "[qk]") {
  for (const std::string& name : case_names()) {
    INFO(name);
    const Fixture f = load(name);
    const hs::QkTrace all = f.trace(0), top = f.trace(10);
    double listed = 0.0, sum_abs = 0.0;
    for (const hs::QkPair& p : top.pairs) listed += p.term;
    for (const hs::QkPair& p : all.pairs) sum_abs += std::abs(p.term);
    // The terms are computed in double from float32 activations: the sum matches the run's
    // score (before a cap) to float32 rounding of the terms' magnitudes.
    const double tol = 1e-6 * sum_abs;
    CHECK(std::abs(listed + top.remainder - top.score_before_softcap) <= tol);
    CHECK(std::abs(top.total - top.score_before_softcap) <= tol);
    if (top.softcap > 0.0f)
      CHECK(std::abs(top.softcap * std::tanh(top.total / top.softcap) - top.score) <= tol);
    else
      CHECK(std::abs(top.total - top.score) <= tol);
    // The remainder is the sum of the terms not listed.
    double rest = 0.0;
    for (size_t i = top.pairs.size(); i < all.pairs.size(); ++i) rest += all.pairs[i].term;
    CHECK(std::abs(top.remainder - rest) <= tol);
    // The pruned search finds the same pairs as the full list, in the same order.
    REQUIRE(top.pairs.size() == std::min<size_t>(10, all.pairs.size()));
    for (size_t i = 0; i < top.pairs.size(); ++i) {
      CHECK(top.pairs[i].query == all.pairs[i].query);
      CHECK(top.pairs[i].key == all.pairs[i].key);
      CHECK(top.pairs[i].term == all.pairs[i].term);
    }
    bool sorted = true;
    for (size_t i = 1; i < all.pairs.size(); ++i) sorted = sorted && std::abs(all.pairs[i - 1].term) >= std::abs(all.pairs[i].term);
    CHECK(sorted);
    // Each side's components add up to the stream the layer read.
    double resid = 0.0;
    for (int64_t i = 0; i < f.cache->n_pos(); ++i)
      resid = std::max(resid, double{f.cache->layer(f.layer()).resid_pre.row(i).cwiseAbs().maxCoeff()});
    CHECK(top.query_resid_error <= 1e-5 * resid);
    CHECK(top.key_resid_error <= 1e-5 * resid);
  }
}

TEST_CASE("QK tracing refuses edges it cannot trace, with messages", "[qk]") {
  const Fixture f = load("gemma2_neurons");  // 3 layers, 4 heads, 8 tokens; layer 2 slides (4 keys)
  const hs::ActivationCache& c = *f.cache;
  using Catch::Contains;
  CHECK_THROWS_WITH(hs::qk_trace(c, 3, 0, 7, 5, {}), Contains("layer 3 is out of range: the model has 3 layers (0-2)"));
  CHECK_THROWS_WITH(hs::qk_trace(c, 1, 4, 7, 5, {}), Contains("head 4 is out of range: the model has 4 heads a layer (0-3)"));
  CHECK_THROWS_WITH(hs::qk_trace(c, 1, 0, 8, 5, {}),
                    Contains("query position 8 is out of range: the prompt has 8 tokens (positions 0-7)"));
  CHECK_THROWS_WITH(hs::qk_trace(c, 1, 0, 7, -1, {}), Contains("key position -1 is out of range"));
  CHECK_THROWS_WITH(hs::qk_trace(c, 1, 0, 3, 5, {}),
                    Contains("key position 5 is after query position 3: attention is causal"));
  CHECK_THROWS_WITH(hs::qk_trace(c, 2, 0, 7, 2, {}),
                    Contains("key position 2 is outside layer 2's sliding window of 4 keys: query 7 reads keys 4-7"));
  CHECK_NOTHROW(hs::qk_trace(c, 2, 0, 7, 4, {}));  // the window's first key
  // Runs it cannot explain: one made with an edit, one that kept only the logits.
  hs::RunOptions edited;
  edited.interventions.push_back(hs::zero_ablation(0, 1));
  const auto ablated = hs::run_tokens(f.model, f.spec["tokens"].get<std::vector<int32_t>>(), edited).cache;
  CHECK_THROWS_WITH(hs::qk_trace(*ablated, 1, 0, 7, 5, {}), Contains("this run was made with edits"));
  hs::RunOptions logits;
  logits.logits_only = true;
  const auto bare = hs::run_tokens(f.model, f.spec["tokens"].get<std::vector<int32_t>>(), logits).cache;
  CHECK_THROWS_WITH(hs::qk_trace(*bare, 1, 0, 7, 5, {}), Contains("this run kept only the logits"));
  // Transcoders: one per layer, and transcoders rather than SAEs.
  const Fixture b = load("builtin_features");
  std::vector<std::shared_ptr<const hs::Sae>> three(b.transcoders.begin(), b.transcoders.end() - 1);
  CHECK_THROWS_WITH(hs::qk_trace(*b.cache, 3, 5, 6, 3, three),
                    Contains("needs one for each of the model's 4 layers; 3 were given"));
  std::vector<std::shared_ptr<const hs::Sae>> with_sae = b.transcoders;
  with_sae[1] = hs::sae_at_layer(hs::load_sae_folder(b.model->dir() / "saes" / "resid_pre_2"), -1);
  CHECK_THROWS_WITH(hs::qk_trace(*b.cache, 3, 5, 6, 3, with_sae), Contains("is an SAE"));
  CHECK_THROWS_WITH(hs::qk_trace(*b.cache, 3, 5, 6, 3, std::vector<std::shared_ptr<const hs::Sae>>(4, b.transcoders[0])),
                    Contains("reads blocks.0.ln2.hook_normalized, which is not in block 1"));
}

TEST_CASE("QK tracing labels components as the Graph view prints them", "[qk]") {
  hs::QkTrace t;
  t.tokens = {4095, 262, 3290, 1110};
  using K = hs::QkComponent::Kind;
  const std::vector<std::string> text = {"<|endoftext|>", " the", " dog", " ran"};
  CHECK(hs::qk_component_label(t, {K::Head, 1, 3, 5}, true) == "L1H3 @ 5");
  CHECK(hs::qk_component_label(t, {K::Feature, 2, 117, 4}, true) == "F2:117 @ 4");
  CHECK(hs::qk_component_label(t, {K::Error, 2, -1, 4}, false) == "err L2 @ 4");
  CHECK(hs::qk_component_label(t, {K::Neuron, 1, 530, 3}, false) == "N1:530 @ 3");
  CHECK(hs::qk_component_label(t, {K::Embed, -1, -1, 1}, true, text) == "emb ' the' @ 1");
  CHECK(hs::qk_component_label(t, {K::Embed, -1, -1, 2}, true) == "emb 3290 @ 2");
  CHECK(hs::qk_component_label(t, {K::Constant, 2, 3, -1}, true) == "b_Q L2H3");
  CHECK(hs::qk_component_label(t, {K::Constant, 2, 1, -1}, false) == "b_K L2H1");
  CHECK(hs::qk_component_label(t, {K::MlpBias, 0, -1, 3}, true) == "b_out L0 @ 3");
  t.transcoders = true;
  CHECK(hs::qk_component_label(t, {K::MlpBias, 0, -1, 3}, true) == "b_dec L0 @ 3");
}

TEST_CASE("QK tracing adds up on NeoX blocks, parallel and sequential (no reference: the sum identity)", "[qk]") {
  for (const std::string name : {"neox_parallel", "neox_sequential"}) {
    INFO(name);
    const auto model = hs::Model::load(hs::test::fixture_model(name));
    const auto cache = hs::run_tokens(model, {1, 5, 9, 13, 17, 21, 25, 29}).cache;
    const hs::QkTrace t = hs::qk_trace(*cache, 1, 1, 7, 3, {}, hs::QkOptions{0});
    double sum_abs = 0.0, listed = 0.0;
    for (const hs::QkPair& p : t.pairs) {
      sum_abs += std::abs(p.term);
      listed += p.term;
    }
    CHECK(std::abs(listed - t.score) <= 1e-6 * sum_abs);
    // Every pair is listed: the remainder is only the float rounding of the projected rows.
    CHECK(std::abs(t.remainder) <= 1e-6 * sum_abs);
    CHECK(std::abs(t.total - t.score_before_softcap) <= 1e-6 * sum_abs);
    const double resid = cache->layer(1).resid_pre.row(7).cwiseAbs().maxCoeff();
    CHECK(t.query_resid_error <= 1e-5 * resid);
    CHECK(t.key_resid_error <= 1e-5 * resid);
  }
}
