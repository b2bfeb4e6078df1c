// Attributions (core/analysis/attribution.h) on every family: the component and attention-edge
// estimates against their definitions computed the slow way from GradientCache::get and
// ActivationCache::get; against exact zero-ablations where the estimate is exact (the last layer's
// mlp_out and neurons with a dot product at the last hook_resid_post, which is linear in them);
// input attributions against their own identities (the baseline run made with zero edits, the
// row sums of the embedding's gradient, one step against a midpoint run made with edits,
// completeness as steps grow where the path is smooth, the same numbers on any number of threads); and the backward pass on a run edited at hook_embed against finite
// differences. The float64 reference values are checked end to end in test_grad_fixtures.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "core/analysis/attribution.h"
#include "core/error.h"
#include "core/model/backward.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "test_support.h"

using namespace hs;

namespace {

struct Family {
  std::string name;
  std::shared_ptr<const Model> model;
};

// The grad fixtures' models (test_grad_fixtures.cpp): every family, llama2.c included.
std::vector<Family> families() {
  std::vector<Family> out;
  for (const char* name : {"f32_prefixed", "bf16_prefixed", "f16_plain", "llama_gqa", "llama_tied_headdim", "qwen2_bias",
                           "neox_parallel", "neox_sequential"})
    out.push_back({name, Model::load(test::fixture_model(name))});
  out.push_back({"llama2c", Model::load(test::source_dir() / "tests/fixtures/analyses/grads/llama2c")});
  return out;
}

const std::vector<int32_t> kTokens = {1, 7, 3, 12, 4, 9};

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

GradOptions keeping(std::vector<HookPoint> hooks) {
  GradOptions o;
  o.keep = std::move(hooks);
  return o;
}

// Row p of two [pos, d_model] tensors, dotted in double.
double row_dot(const Tensor& a, const Tensor& b, int p) {
  const size_t D = static_cast<size_t>(a.shape.back());
  double s = 0;
  for (size_t d = 0; d < D; ++d) s += double{a.data[static_cast<size_t>(p) * D + d]} * b.data[static_cast<size_t>(p) * D + d];
  return s;
}

double max_abs(const RowMatrixXf& m) { return m.size() ? double{m.cwiseAbs().maxCoeff()} : 0.0; }

}  // namespace

TEST_CASE("component_attribution is -a . dM/da of every head, MLP layer and neuron, on every family",
          "[attribution][components]") {
  for (const Family& f : families()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig& c = f.model->config();
      const auto cache = forward(f.model->weights(), kTokens);
      const Metric metric = logit_diff_metric(3, 7);
      const GradientCache grad = backward(*cache, metric, keeping(component_gradient_hooks()));
      const ComponentAttribution ours = component_attribution(*cache, grad);
      REQUIRE(ours.heads.rows() == c.n_layers);
      REQUIRE(ours.heads.cols() == c.n_heads);
      REQUIRE(ours.mlp_layers.size() == c.n_layers);
      REQUIRE(ours.neurons.rows() == c.n_layers);
      REQUIRE(ours.neurons.cols() == c.d_mlp);
      // The slow way: the flat tensors of get(), indexed [pos, head, d_head] and [pos, d_model | d_mlp].
      const int S = static_cast<int>(kTokens.size());
      RowMatrixXf heads(c.n_layers, c.n_heads), neurons(c.n_layers, c.d_mlp);
      VectorXf mlp(c.n_layers);
      for (int l = 0; l < c.n_layers; ++l) {
        const std::string b = "blocks." + std::to_string(l) + ".";
        const Tensor z = cache->get(b + "attn.hook_z"), dz = grad.get(b + "attn.hook_z");
        for (int h = 0; h < c.n_heads; ++h) {
          double s = 0;
          for (int p = 0; p < S; ++p)
            for (int j = 0; j < c.d_head; ++j) {
              const size_t i = (static_cast<size_t>(p) * c.n_heads + h) * c.d_head + j;
              s += double{z.data[i]} * dz.data[i];
            }
          heads(l, h) = static_cast<float>(-s);
        }
        const Tensor y = cache->get(b + "hook_mlp_out"), dy = grad.get(b + "hook_mlp_out");
        double s = 0;
        for (size_t i = 0; i < y.data.size(); ++i) s += double{y.data[i]} * dy.data[i];
        mlp(l) = static_cast<float>(-s);
        const Tensor post = cache->get(b + "mlp.hook_post"), dpost = grad.get(b + "mlp.hook_post");
        for (int n = 0; n < c.d_mlp; ++n) {
          double t = 0;
          for (int p = 0; p < S; ++p) {
            const size_t i = static_cast<size_t>(p) * c.d_mlp + n;
            t += double{post.data[i]} * dpost.data[i];
          }
          neurons(l, n) = static_cast<float>(-t);
        }
      }
      CHECK(max_abs(ours.heads - heads) <= 1e-5 * max_abs(heads) + 1e-7);
      CHECK(max_abs(RowMatrixXf(ours.mlp_layers - mlp)) <= 1e-5 * max_abs(RowMatrixXf(mlp)) + 1e-7);
      CHECK(max_abs(ours.neurons - neurons) <= 1e-5 * max_abs(neurons) + 1e-7);
      CHECK(max_abs(heads) > 0);  // the metric reaches every head of these models
    }
  }
}

TEST_CASE("attention_edge_attribution is A x dM/dA of one head, zero above the diagonal, on every family",
          "[attribution][edges]") {
  for (const Family& f : families()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig& c = f.model->config();
      const auto cache = forward(f.model->weights(), kTokens);
      const GradientCache grad = backward(*cache, logprob_metric(5), keeping({HookPoint::Pattern}));
      const int S = static_cast<int>(kTokens.size());
      for (int l = 0; l < c.n_layers; ++l) {
        const std::string key = "blocks." + std::to_string(l) + ".attn.hook_pattern";
        const Tensor A = cache->get(key), dA = grad.get(key);  // [head, query_pos, key_pos]
        for (int h : {0, c.n_heads - 1}) {
          INFO("L" << l << "H" << h);
          const RowMatrixXf ours = attention_edge_attribution(*cache, grad, l, h);
          REQUIRE(ours.rows() == S);
          REQUIRE(ours.cols() == S);
          RowMatrixXf slow = RowMatrixXf::Zero(S, S);
          for (int q = 0; q < S; ++q)
            for (int k = 0; k <= q; ++k) {
              const size_t i = (static_cast<size_t>(h) * S + q) * S + k;
              slow(q, k) = A.data[i] * dA.data[i];
            }
          CHECK(max_abs(ours - slow) <= 1e-6 * max_abs(slow) + 1e-9);
          for (int q = 0; q < S; ++q)
            for (int k = q + 1; k < S; ++k) CHECK(ours(q, k) == 0.0f);  // dM/dA is not 0 there (backward.h)
        }
      }
    }
  }
}

TEST_CASE("the estimates equal exact zero-ablations where the metric is linear in the component, on every family",
          "[attribution][exact]") {
  // M = hook_resid_post of the last layer at the last position . v: linear in that layer's
  // mlp_out (resid_post = resid_mid + mlp_out) and in its neurons (mlp_out = post @ W_out + b_out),
  // so -a . dM/da is exactly M(a zeroed) - M.
  std::mt19937 rng(5);
  for (const Family& f : families()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig& c = f.model->config();
      const int L = c.n_layers;
      const auto cache = forward(f.model->weights(), kTokens);
      const Metric metric = dot_metric(HookPoint::ResidPost, L - 1, random_vector(static_cast<size_t>(c.d_model), rng));
      const ComponentAttribution est =
          component_attribution(*cache, backward(*cache, metric, keeping(component_gradient_hooks())));
      const double m = metric_value(metric, *cache);
      auto ablated = [&](Intervention i) {
        RunOptions o;
        o.interventions = {std::move(i)};
        return metric_value(metric, *forward(f.model->weights(), kTokens, o)) - m;
      };
      const double exact = ablated(zero_at(HookPoint::MlpOut, L - 1));
      INFO("mlp_out of the last layer: estimate " << est.mlp_layers(L - 1) << ", exact " << exact);
      CHECK(est.mlp_layers(L - 1) == Approx(exact).epsilon(1e-4).margin(1e-4));
      CHECK(std::abs(exact) > 1e-3);
      for (int n : {0, c.d_mlp / 2, c.d_mlp - 1}) {
        const double e = ablated(zero_at(HookPoint::MlpPost, L - 1, n));
        INFO("neuron " << n << ": estimate " << est.neurons(L - 1, n) << ", exact " << e);
        CHECK(est.neurons(L - 1, n) == Approx(e).epsilon(1e-3).margin(1e-5));
      }
      // The metric reads the last layer's output: it does not depend on anything after it, and
      // every layer's estimates are finite.
      CHECK(est.heads.allFinite());
      CHECK(est.neurons.allFinite());
    }
  }
}

TEST_CASE("backward on a run edited at hook_embed is the gradient of that run (finite differences)",
          "[attribution][backward]") {
  // The edited point x_e = 0.3 x; the derivative along e from two more runs with e added after
  // the edit, against dM/dx_e . e from the backward pass on the edited run.
  std::mt19937 rng(9);
  for (const char* name : {"f32_prefixed", "llama_gqa", "neox_sequential"}) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const ModelConfig& c = model->config();
      const Metric metric = logit_diff_metric(2, 6);
      auto scale = std::make_shared<CallableEdit>();
      scale->edit = [](Eigen::Ref<RowMatrixXf> rows, Eigen::Index) { rows *= 0.3f; };
      scale->position_local = true;
      RunOptions edited;
      edited.interventions = {call_at(HookPoint::Embed, -1, scale)};
      const auto run = forward(model->weights(), kTokens, edited);
      const GradientCache g = backward(*run, metric, keeping({HookPoint::Embed}));
      CHECK(g.metric_value == metric_value(metric, *run));
      const int pos = 3;
      const std::vector<float> e = random_vector(static_cast<size_t>(c.d_model), rng);
      const float eps = 1e-2f;
      auto at = [&](float sign) {
        RunOptions o = edited;
        o.interventions.push_back(steer_at(HookPoint::Embed, -1, e, sign * eps, -1, pos));
        return metric_value(metric, *forward(model->weights(), kTokens, o));
      };
      const double fd = (at(1) - at(-1)) / (2.0 * eps);
      double predicted = 0;
      for (int d = 0; d < c.d_model; ++d) predicted += double{g.rows(HookPoint::Embed, -1)(pos, d)} * e[static_cast<size_t>(d)];
      CHECK(fd == Approx(predicted).epsilon(2e-2).margin(2e-3));
      // Not the plain run's gradient: the edit moved the point.
      const GradientCache plain = backward(*forward(model->weights(), kTokens), metric, keeping({HookPoint::Embed}));
      CHECK(max_abs(plain.rows(HookPoint::Embed, -1) - g.rows(HookPoint::Embed, -1)) > 1e-4);
    }
  }
}

TEST_CASE("input attributions: the baseline, gradient x input, completeness and threads", "[attribution][input]") {
  for (const char* name : {"f32_prefixed", "llama_gqa", "neox_parallel"}) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const auto cache = forward(model->weights(), kTokens);
      const Metric metric = logit_diff_metric(3, 7);
      const int S = static_cast<int>(kTokens.size());
      const InputAttribution gxi = input_attribution(*cache, metric, InputAttributionMethod::GradXInput);
      CHECK(gxi.method == InputAttributionMethod::GradXInput);
      CHECK(gxi.steps == 0);
      REQUIRE(gxi.attributions.size() == kTokens.size());
      CHECK(gxi.attributions[0] == 0.0);
      CHECK(gxi.metric == metric_value(metric, *cache));
      // The baseline independently: zero edits of the token embedding at every position but 0.
      RunOptions zeroed;
      for (int p = 1; p < S; ++p) zeroed.interventions.push_back(zero_at(HookPoint::Embed, -1, -1, p));
      const double base = metric_value(metric, *forward(model->weights(), kTokens, zeroed));
      CHECK(gxi.baseline_metric == Approx(base).epsilon(1e-6).margin(1e-6));
      // Gradient x input: x[p] . dM/dx[p], the slow way.
      const Tensor x = cache->get("hook_embed"), dx = backward(*cache, metric).get("hook_embed");
      double sum = 0;
      for (int p = 1; p < S; ++p) {
        const double a = row_dot(x, dx, p);
        CHECK(gxi.attributions[static_cast<size_t>(p)] == Approx(a).epsilon(1e-6).margin(1e-6));
        sum += a;
      }
      CHECK(gxi.completeness_error == Approx(sum - (gxi.metric - gxi.baseline_metric)).epsilon(1e-6).margin(1e-6));

      // Integrated gradients: the same numbers on one thread and on two (steps run in parallel),
      // and a completeness error that shrinks as the midpoint rule's steps grow.
      AttributionControl one, two;
      one.threads = 1;
      two.threads = 2;
      const InputAttribution ig1 = input_attribution(*cache, metric, InputAttributionMethod::IntegratedGradients, 8, one);
      const InputAttribution ig2 = input_attribution(*cache, metric, InputAttributionMethod::IntegratedGradients, 8, two);
      CHECK(ig1.steps == 8);
      CHECK(ig1.attributions == ig2.attributions);
      CHECK(ig1.baseline_metric == gxi.baseline_metric);
      // One step is x[p] . dM/dx at the midpoint x' + (x - x') / 2, here made independently: zero
      // embeddings after position 0, then half of each row added back.
      RunOptions midpoint = zeroed;
      for (int p = 1; p < S; ++p) {
        const float* row = x.data.data() + static_cast<size_t>(p) * model->config().d_model;
        midpoint.interventions.push_back(
            steer_at(HookPoint::Embed, -1, std::vector<float>(row, row + model->config().d_model), 0.5f, -1, p));
      }
      const Tensor g_mid = backward(*forward(model->weights(), kTokens, midpoint), metric).get("hook_embed");
      const InputAttribution ig_one = input_attribution(*cache, metric, InputAttributionMethod::IntegratedGradients, 1);
      for (int p = 1; p < S; ++p)
        CHECK(ig_one.attributions[static_cast<size_t>(p)] == Approx(row_dot(x, g_mid, p)).epsilon(1e-5).margin(1e-5));
      // With learned positions the path is smooth and the midpoint rule converges; rotary models'
      // zero baseline is a near-singular point of the norm, where it does not (docs/attribution.md).
      if (cache->has_pos_embed()) {
        const InputAttribution ig64 = input_attribution(*cache, metric, InputAttributionMethod::IntegratedGradients, 64);
        INFO("completeness error: 8 steps " << ig1.completeness_error << ", 64 steps " << ig64.completeness_error);
        CHECK(std::abs(ig64.completeness_error) < 0.25 * std::abs(ig1.completeness_error));
        CHECK(std::abs(ig64.completeness_error) < 1e-2 * std::abs(ig64.metric - ig64.baseline_metric));
      }
    }
  }
}

TEST_CASE("attributions refuse what they cannot explain", "[attribution][refused]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const auto cache = forward(model->weights(), kTokens);
  const Metric metric = logit_metric(4);
  CHECK_THROWS_WITH(input_attribution(*cache, metric, InputAttributionMethod::IntegratedGradients, 0),
                    Catch::Contains("at least 1 step"));
  CHECK_THROWS_WITH(input_attribution(*cache, logit_metric(model->config().d_vocab), InputAttributionMethod::GradXInput),
                    Catch::Contains("outside the vocabulary"));
  RunOptions edited;
  edited.interventions = {zero_ablation(0, 1)};
  const auto ablated = forward(model->weights(), kTokens, edited);
  CHECK_THROWS_WITH(input_attribution(*ablated, metric, InputAttributionMethod::GradXInput), Catch::Contains("made with edits"));
  RunOptions logits_only;
  logits_only.logits_only = true;
  CHECK_THROWS_WITH(input_attribution(*forward(model->weights(), kTokens, logits_only), metric,
                                      InputAttributionMethod::GradXInput),
                    Catch::Contains("kept only the logits"));
  AttributionControl stop;
  stop.cancelled = [] { return true; };
  CHECK_THROWS_AS(input_attribution(*cache, metric, InputAttributionMethod::IntegratedGradients, 4, stop), Cancelled);
  stop.threads = 2;
  CHECK_THROWS_AS(input_attribution(*cache, metric, InputAttributionMethod::IntegratedGradients, 4, stop), Cancelled);

  // The gradient must keep what is read, and be of this run.
  const GradientCache only_resid = backward(*cache, metric, keeping({HookPoint::ResidPre}));
  CHECK_THROWS_WITH(component_attribution(*cache, only_resid), Catch::Contains("does not keep attn.hook_z"));
  CHECK_THROWS_WITH(attention_edge_attribution(*cache, only_resid, 0, 0), Catch::Contains("does not keep attn.hook_pattern"));
  const GradientCache grad = backward(*cache, metric);
  CHECK_THROWS_WITH(attention_edge_attribution(*cache, grad, 0, model->config().n_heads), Catch::Contains("does not exist"));
  const auto other = forward(model->weights(), std::vector<int32_t>{1, 7, 3, 12, 4, 8});
  CHECK_THROWS_WITH(component_attribution(*other, grad), Catch::Contains("another run"));
  auto shift = std::make_shared<CallableEdit>();
  shift->edit = [](Eigen::Ref<RowMatrixXf> rows, Eigen::Index) { rows *= 0.5f; };
  RunOptions embed_edit;
  embed_edit.interventions = {call_at(HookPoint::Embed, -1, shift)};
  const GradientCache of_edited = backward(*forward(model->weights(), kTokens, embed_edit), metric);
  CHECK_THROWS_WITH(component_attribution(*cache, of_edited), Catch::Contains("another run"));
  // A metric that reaches only the first layer: the later layers' estimates are 0, not refused.
  const GradientCache early =
      backward(*cache, dot_metric(HookPoint::ResidPost, 0, std::vector<float>(static_cast<size_t>(model->config().d_model), 1.0f)),
               keeping(component_gradient_hooks()));
  const ComponentAttribution e = component_attribution(*cache, early);
  CHECK(e.heads.row(1).isZero());
  CHECK(e.mlp_layers(1) == 0.0f);
  CHECK_FALSE(e.heads.row(0).isZero());
}

TEST_CASE("headscope-cli attribute --components writes the core's estimates and each layer's top neurons",
          "[attribution][cli]") {
  const std::filesystem::path dir = test::fixture_model("llama_gqa"), out = test::scratch_dir() / "attribute.json";
  const test::CliRun r = test::run_cli("attribute --model " + test::quote(dir.string()) +
                                       " --tokens 1,7,3,12,4,9 --method grad_x_input --metric logprob --answer-id 5"
                                       " --components --top-neurons 4 -o " + test::quote(out.string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(test::read_text(out));
  const auto model = Model::load(dir);
  const ModelConfig& c = model->config();
  const auto cache = forward(model->weights(), kTokens);
  const Metric metric = logprob_metric(5);
  const ComponentAttribution est = component_attribution(*cache, backward(*cache, metric, keeping(component_gradient_hooks())));
  CHECK(j["method"] == "grad_x_input");
  CHECK(j["steps"] == 0);
  CHECK(j["metric_name"] == "logprob");
  CHECK(j["tokens"] == nlohmann::json(kTokens));
  REQUIRE(j["heads"].size() == static_cast<size_t>(c.n_layers));
  REQUIRE(j["top_neurons"].size() == static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    REQUIRE(j["heads"][l].size() == static_cast<size_t>(c.n_heads));
    for (int h = 0; h < c.n_heads; ++h) CHECK(j["heads"][l][h].get<float>() == est.heads(l, h));
    CHECK(j["mlp_layers"][l].get<float>() == est.mlp_layers(l));
    // The 4 largest |estimate| of the layer, largest first.
    std::vector<float> sorted(est.neurons.row(l).data(), est.neurons.row(l).data() + c.d_mlp);
    for (float& v : sorted) v = std::abs(v);
    std::sort(sorted.rbegin(), sorted.rend());
    REQUIRE(j["top_neurons"][l].size() == 4);
    for (int i = 0; i < 4; ++i) {
      const int n = j["top_neurons"][l][i]["neuron"].get<int>();
      CHECK(j["top_neurons"][l][i]["attribution"].get<float>() == est.neurons(l, n));
      CHECK(std::abs(est.neurons(l, n)) == sorted[static_cast<size_t>(i)]);
    }
  }
}
