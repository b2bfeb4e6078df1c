// The built-in model against PyTorch: logits on held-out text, the tokenizer, and head scores
// (tests/fixtures/builtin, made by tools/train/make_builtin_fixture.py from the committed weights).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/analysis/head_scores.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"

using namespace hs;

namespace {

std::filesystem::path builtin_dir() { return test::source_dir() / "resources/models/headscope-tiny"; }
std::filesystem::path fixture_dir() { return test::source_dir() / "tests/fixtures/builtin"; }

}  // namespace

TEST_CASE("the built-in model's logits match PyTorch on held-out text", "[builtin]") {
  const auto model = Model::load(builtin_dir());
  const auto ref = SafetensorsFile::open(fixture_dir() / "logits.safetensors");
  std::vector<int32_t> tokens;
  for (float f : ref->to_f32(*ref->find("tokens"))) tokens.push_back(static_cast<int32_t>(f));
  const auto fixture = nlohmann::json::parse(test::read_text(fixture_dir() / "fixture.json"));

  // The C++ tokenizer gives the ids PyTorch's side used.
  CHECK(model->encode(fixture["text"].get<std::string>(), true) == tokens);

  const auto cache = model->run(tokens);
  const std::vector<float> expected = ref->to_f32(*ref->find("logits"));
  REQUIRE(expected.size() == static_cast<size_t>(cache->logits.size()));
  const RowMatrixXf logits = cache->logits.to_matrix();
  double worst = 0.0;
  for (size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(expected[i] - logits.data()[i])));
  INFO("max |logit difference| = " << worst);
  CHECK(worst <= 1e-4);  // the fixture's stated tolerance (logits are O(10))
}

TEST_CASE("the built-in model's head scores match the independent implementation", "[builtin][head_scores]") {
  const auto model = Model::load(builtin_dir());
  const auto fixture = nlohmann::json::parse(test::read_text(fixture_dir() / "fixture.json"));
  const HeadScores s = compute_head_scores(*model);
  const auto& expected = fixture["head_scores"];
  CHECK(s.prose_tokens == static_cast<int>(expected["prose_tokens"].size()));
  for (const char* kind : {"previous_token", "duplicate_token", "induction"}) {
    const RowMatrixXf& ours = std::string(kind) == "previous_token"   ? s.previous_token
                              : std::string(kind) == "duplicate_token" ? s.duplicate_token
                                                                       : s.induction;
    for (int l = 0; l < ours.rows(); ++l)
      for (int h = 0; h < ours.cols(); ++h) {
        INFO(kind << " L" << l << "H" << h);
        CHECK(ours(l, h) == Approx(expected[kind][l][h].get<double>()).margin(1e-4));
      }
  }
}

TEST_CASE("the built-in model is found without --model", "[builtin]") {
  const auto dir = builtin_model_dir();
  CHECK(std::filesystem::exists(dir / "model.safetensors"));
  const auto model = Model::load(dir);
  CHECK(model->config().n_layers >= 2);
}

TEST_CASE("the built-in model has the circuits of issue 3", "[builtin][head_scores]") {
  // A previous-token head on plain prose and an induction head on repeated random tokens, by the
  // same scores as `headscope-cli heads` (their definitions: docs/head-scores.md).
  const auto model = Model::load(builtin_dir());
  const HeadScores s = compute_head_scores(*model);
  Eigen::Index l = 0, h = 0;
  const float prev = s.previous_token.maxCoeff(&l, &h);
  INFO("best previous-token head L" << l << "H" << h << " = " << prev);
  CHECK(prev >= 0.4f);
  const float induction = s.induction.maxCoeff(&l, &h);
  INFO("best induction head L" << l << "H" << h << " = " << induction);
  CHECK(induction >= 0.6f);
}
