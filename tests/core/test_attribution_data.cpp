// What the Attribution view shows beside the attributions (attribution_data.h): the metric it
// explains, the neurons it lists, and a head's exact zero ablation.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/analysis/attribution_data.h"
#include "core/error.h"
#include "core/model/intervention.h"
#include "core/model/model.h"
#include "test_support.h"

using namespace hs;

TEST_CASE("target_metric: the top prediction without a target, a logit difference with a second token", "[attribution]") {
  for (const char* name : {"f32_prefixed", "llama_gqa", "neox_parallel"}) {
    INFO(name);
    const auto model = Model::load(test::fixture_model(name));
    const auto cache = model->run(model->encode("The cat sat on the mat. The cat", true));
    const int S = cache->n_pos();
    const TargetMetric t = target_metric(*cache, -1, std::nullopt, std::nullopt);
    CHECK(t.pos == S - 1);
    CHECK(t.target_is_prediction);
    CHECK(t.target == top_predictions(*cache, S - 1, 1).front().id);
    CHECK(t.value == Approx(cache->logits(S - 1, t.target)).epsilon(1e-6));
    const TargetMetric d = target_metric(*cache, 2, 5, 7);
    CHECK(d.metric.kind == MetricKind::LogitDiff);
    CHECK(d.value == Approx(double{cache->logits(2, 5)} - double{cache->logits(2, 7)}).epsilon(1e-6));
    CHECK_THROWS_WITH(target_metric(*cache, 2, 5, 5), Catch::Contains("second token is the target itself"));
    CHECK_THROWS_AS(target_metric(*cache, 2, cache->config().d_vocab, std::nullopt), Error);
  }
}

TEST_CASE("top_neurons: by magnitude, ties in (layer, neuron) order", "[attribution]") {
  RowMatrixXf n(2, 3);
  n << 0.5f, -2.0f, 1.0f,
       -1.0f, 0.1f, 2.0f;
  const auto top = top_neurons(n, 4);
  REQUIRE(top.size() == 4);
  CHECK((top[0].layer == 0 && top[0].neuron == 1 && top[0].value == -2.0f));
  CHECK((top[1].layer == 1 && top[1].neuron == 2));
  CHECK((top[2].layer == 0 && top[2].neuron == 2));
  CHECK((top[3].layer == 1 && top[3].neuron == 0));
  CHECK(top_neurons(n, 100).size() == 6);
}

TEST_CASE("head_zero_ablation_effect: the ablated run's metric minus the plain run's", "[attribution]") {
  const auto model = Model::load(test::fixture_model("llama_gqa"));
  const auto tokens = model->encode("The cat sat on the mat. The cat", true);
  const auto plain = model->run(tokens);
  const Metric m = logit_metric(3);
  RunOptions o;
  o.interventions = {zero_ablation(1, 2)};
  const auto ablated = model->run(tokens, o);
  const int last = plain->n_pos() - 1;
  CHECK(head_zero_ablation_effect(*model, *plain, m, 1, 2) ==
        Approx(double{ablated->logits(last, 3)} - double{plain->logits(last, 3)}).margin(1e-6));
  CHECK_THROWS_WITH(head_zero_ablation_effect(*model, *ablated, m, 1, 2), Catch::Contains("plain run"));
}
