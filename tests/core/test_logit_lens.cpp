// The logit lens against the float64 PyTorch reference (tests/fixtures/analyses, written by
// make_lens_circuits.py from tools/reference/hsref.py), its identity with the run's own logits,
// and the view summary against the full lens.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/analysis/logit_lens.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/model/ops.h"
#include "core/session/session.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"

using namespace hs;

namespace {

// Tolerance: 1e-4 relative to the largest reference magnitude (tests/fixtures/README.md).
constexpr double kRelTol = 1e-4;

std::filesystem::path analyses_dir(const std::string& name) { return test::source_dir() / "tests/fixtures/analyses" / name; }

std::vector<int32_t> tokens_of(const SafetensorsFile& f) {
  std::vector<int32_t> ids;
  for (float v : f.to_f32(*f.find("tokens"))) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// log_softmax of one row, in float64: the test's own, independent of the lens's.
std::vector<double> log_softmax(const Eigen::Ref<const RowVectorXf>& row) {
  double mx = -INFINITY;
  for (Eigen::Index i = 0; i < row.size(); ++i) mx = std::max(mx, static_cast<double>(row(i)));
  double sum = 0.0;
  for (Eigen::Index i = 0; i < row.size(); ++i) sum += std::exp(row(i) - mx);
  std::vector<double> out(static_cast<size_t>(row.size()));
  for (Eigen::Index i = 0; i < row.size(); ++i) out[static_cast<size_t>(i)] = row(i) - mx - std::log(sum);
  return out;
}

}  // namespace

TEST_CASE("the logit lens matches the float64 reference", "[lens][fixtures]") {
  for (const char* name : {"f32_prefixed", "f16_plain", "bf16_prefixed"}) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const auto ref = SafetensorsFile::open(analyses_dir(name) / "lens.safetensors");
      const auto cache = model->run(tokens_of(*ref));
      const LogitLens lens = logit_lens(*cache);
      const TensorInfo* t = ref->find("lens.logprobs");
      REQUIRE(t != nullptr);
      CHECK(t->shape == std::vector<int64_t>{model->config().n_layers + 1, cache->n_pos(), model->config().d_vocab});
      CHECK(lens.n_streams == model->config().n_layers + 1);
      const std::vector<float> ours(lens.logprobs.data(), lens.logprobs.data() + lens.logprobs.size());
      const test::Comparison c = test::compare(ref->to_f32(*t), ours);
      INFO("max |diff| " << c.max_abs << ", relative " << c.relative);
      CHECK(c.masks_agree);
      CHECK(c.relative <= kRelTol);
    }
  }
}

TEST_CASE("the lens of the final resid_post is the run's log-softmaxed logits", "[lens]") {
  for (const char* name : {"f32_prefixed", "f16_plain"}) {
    const auto model = Model::load(test::fixture_model(name));
    const auto cache = model->run(std::vector<int32_t>{290, 51, 257, 273, 270, 267, 270, 220, 262});
    const LogitLens lens = logit_lens(*cache);
    const ConstMatrixRef last = lens.stream(model->config().n_layers);
    double worst = 0.0;
    for (int p = 0; p < cache->n_pos(); ++p) {
      const std::vector<double> expected = log_softmax(cache->logits.row(p));
      for (int v = 0; v < lens.d_vocab; ++v) worst = std::max(worst, std::abs(expected[static_cast<size_t>(v)] - last(p, v)));
    }
    INFO(name << ": max |lens[n_layers] - log_softmax(logits)| = " << worst);
    CHECK(worst <= 1e-5);  // the same logits bit for bit; the rest is the log-softmax's float32 rounding
  }
}

TEST_CASE("the lens summary is the full lens's top tokens and target probabilities", "[lens]") {
  const auto model = Model::load(test::fixture_model("bf16_prefixed"));
  const auto cache = model->run(std::vector<int32_t>{290, 82, 257, 267, 68, 281, 82, 220, 19});
  const LogitLens lens = logit_lens(*cache);
  const int32_t target = 257;
  const LogitLensSummary s = logit_lens_summary(*cache, target, 5);
  REQUIRE(s.n_streams == lens.n_streams);
  REQUIRE(s.n_pos == cache->n_pos());
  CHECK(s.stream_labels.front() == "L0 pre");
  CHECK(s.stream_labels.back() == "L2 post");
  for (int i = 0; i < s.n_streams; ++i) {
    const ConstMatrixRef lp = lens.stream(i);
    for (int p = 0; p < s.n_pos; ++p) {
      INFO("stream " << i << " pos " << p);
      Eigen::Index best = 0;
      lp.row(p).maxCoeff(&best);
      CHECK(s.top_id(i, p, 0) == best);
      for (int k = 0; k < 5; ++k) {
        CHECK(s.top_prob(i, p, k) == Approx(std::exp(lp(p, s.top_id(i, p, k)))).epsilon(1e-5));
        if (k > 0) CHECK(s.top_prob(i, p, k) <= s.top_prob(i, p, k - 1));
      }
      CHECK(s.target_probs[s.cell(i, p)] == Approx(std::exp(lp(p, target))).epsilon(1e-5));
      CHECK(s.target_ranks[s.cell(i, p)] == (lp.row(p).array() > lp(p, target)).count());
      CHECK(s.colour_values[s.cell(i, p)] == s.target_probs[s.cell(i, p)]);
    }
  }
  const LogitLensSummary no_target = logit_lens_summary(*cache, std::nullopt, 3);
  CHECK(no_target.target_probs.empty());
  CHECK(no_target.colour_values[no_target.cell(1, 2)] == no_target.top_prob(1, 2, 0));
}

TEST_CASE("a lens summary reuses the columns of the shared token prefix exactly", "[lens]") {
  // As typing runs it: each run reuses the previous run's cache prefix (whose rows are copied, so
  // the lens of those columns cannot change), and each summary the previous summary's columns.
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const std::vector<int32_t> shorter = {290, 51, 257, 273, 270}, longer = {290, 51, 257, 273, 270, 267, 270};
  const auto first = model->run(shorter);
  const LogitLensSummary before = logit_lens_summary(*first, 270, 5);
  const auto second = model->run(longer, {}, first);
  const LogitLensSummary reused = logit_lens_summary(*second, 270, 5, &before);
  const LogitLensSummary fresh = logit_lens_summary(*second, 270, 5);
  CHECK(reused.top_ids == fresh.top_ids);
  CHECK(reused.top_probs == fresh.top_probs);
  CHECK(reused.target_probs == fresh.target_probs);
  CHECK(reused.target_ranks == fresh.target_ranks);
  CHECK(reused.colour_values == fresh.colour_values);
  // A different target cannot reuse anything, and still gives the right answer.
  CHECK(logit_lens_summary(*second, 51, 5, &before).target_probs == logit_lens_summary(*second, 51, 5).target_probs);
  // An edit in the middle reuses only the columns before it.
  const std::vector<int32_t> edited = {290, 51, 99, 273, 270, 267, 270};
  const auto third = model->run(edited, {}, second);
  CHECK(logit_lens_summary(*third, 270, 5, &fresh).top_probs == logit_lens_summary(*third, 270, 5).top_probs);
  // Another model's summary is never reused.
  const auto other_model = Model::load(test::fixture_model("f16_plain"));
  const auto other = other_model->run(longer);
  CHECK(logit_lens_summary(*other, 270, 5, &fresh).top_probs == logit_lens_summary(*other, 270, 5).top_probs);
}

TEST_CASE("the logit lens refuses what it cannot compute", "[lens][errors]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  RunOptions logits_only;
  logits_only.logits_only = true;
  const auto thin = model->run(std::vector<int32_t>{290, 51}, logits_only);
  CHECK_THROWS_AS(logit_lens(*thin), Error);
  CHECK_THROWS_WITH(logit_lens_summary(*thin, std::nullopt), Catch::Contains("full cache"));
  const auto cache = model->run(std::vector<int32_t>{290, 51});
  CHECK_THROWS_WITH(logit_lens_summary(*cache, 291), Catch::Contains("outside the vocabulary (0..290)"));
}

TEST_CASE("norm_forward follows the norm kind: LayerNorm centres, RMSNorm does not", "[lens][ops]") {
  RowMatrixXf x(2, 4);
  x << 1, 2, 3, 6, -1, 0.5f, 0, 2;
  const float w[4] = {1.0f, 0.5f, 2.0f, 1.5f}, b[4] = {0.1f, 0.0f, -0.2f, 0.3f};
  RowMatrixXf ln, rms, direct;
  VectorXf scale;
  norm_forward(ln, nullptr, x, w, b, 1e-5f, NormKind::LayerNorm);
  layernorm_forward(direct, nullptr, x, w, b, 1e-5f);
  CHECK(ln == direct);
  norm_forward(rms, &scale, x, w, b, 1e-5f, NormKind::RMSNorm);
  for (int i = 0; i < 2; ++i) {
    const double ms = x.row(i).squaredNorm() / 4.0;
    CHECK(scale(i) == Approx(std::sqrt(ms + 1e-5)));
    for (int j = 0; j < 4; ++j) CHECK(rms(i, j) == Approx(x(i, j) / std::sqrt(ms + 1e-5) * w[j] + b[j]).margin(1e-6));
  }
  norm_forward(rms, nullptr, x, w, nullptr, 1e-5f, NormKind::RMSNorm);
  CHECK(rms(0, 0) == Approx(x(0, 0) / std::sqrt(x.row(0).squaredNorm() / 4.0 + 1e-5) * w[0]));
}
