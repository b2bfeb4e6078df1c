// Attribution patching (core/analysis/attribution_patching.h) in the core: against the float64
// reference (atp.json, make_grads.py) on every model there; equal to exact patched runs where the
// metric is linear in the patched node; m_corrupt exactly where the metric does not depend on the
// node or the node does not change; and its refusals.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/analysis/attribution_patching.h"
#include "core/analysis/patching.h"
#include "core/error.h"
#include "core/model/backward.h"
#include "core/model/intervention.h"
#include "core/model/metric.h"
#include "core/model/model.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Every family of the fixtures: GPT-2, Llama with GQA, Qwen2 (GQA, biases), GPT-NeoX parallel and
// sequential.
const char* const kModels[] = {"f32_prefixed", "llama_gqa", "qwen2_bias", "neox_parallel", "neox_sequential"};

// make_grads.py's tokens, and a corrupted copy that differs from position 2 on.
const std::vector<int32_t> kClean = {290, 5, 77, 260, 13, 99, 281, 0};
const std::vector<int32_t> kCorrupt = {290, 5, 78, 260, 13, 99, 200, 0};
constexpr int kFirstDiff = 2;

struct Runs {
  std::shared_ptr<const Model> model;
  std::shared_ptr<ActivationCache> clean, corrupt;
};

Runs runs(const std::string& name, const std::vector<int32_t>& clean = kClean,
          const std::vector<int32_t>& corrupt = kCorrupt) {
  Runs r;
  r.model = Model::load(test::fixture_model(name));
  r.clean = r.model->run(clean);
  r.corrupt = r.model->run(corrupt);
  return r;
}

// A fixed vector of n values (no random numbers: the test is the same every run).
std::vector<float> fixed_vector(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.5f * std::sin(0.7f * static_cast<float>(i) + 0.3f);
  return v;
}

GradientCache gradient(const Runs& r, const Metric& m, HookPoint keep) {
  GradOptions o;
  o.keep = {keep};
  return backward(*r.corrupt, m, o);
}

// The metric of the corrupted run with one edit copied from the clean run.
double patched_metric(const Runs& r, const Metric& m, const Intervention& patch) {
  RunOptions o;
  o.interventions = {patch};
  return metric_value(m, *r.model->run(r.corrupt->tokens(), o));
}

// The exact edit of one cell of `what` at layer l: row `row` and column `col` of AtpResult::raw.
Intervention cell_patch(const Runs& r, AtpSite what, int l, Eigen::Index row, Eigen::Index col) {
  const int H = r.model->config().n_heads;
  const int c = static_cast<int>(col);
  switch (what) {
    case AtpSite::Z: return patch_at(r.clean, HookPoint::Z, l, c);
    case AtpSite::ZPos: return patch_at(r.clean, HookPoint::Z, l, static_cast<int>(row % H), c);
    case AtpSite::MlpPost: return patch_at(r.clean, HookPoint::MlpPost, l, c);
    default: return patch_at(r.clean, atp_site_hook(what), l, -1, c);
  }
}

// AtP of `what` against exact patched runs, cell by cell of layer l, for a metric linear in it:
// equal to float precision (the two differ only by the rounding of float activations).
void check_linear(const Runs& r, const Metric& m, AtpSite what, int l) {
  const GradientCache g = gradient(r, m, atp_site_hook(what));
  const AtpResult e = attribution_patching(*r.clean, *r.corrupt, g, what);
  const int H = r.model->config().n_heads;
  const Eigen::Index first = what == AtpSite::ZPos ? Eigen::Index{l} * H : l;
  const Eigen::Index rows = what == AtpSite::ZPos ? H : 1;
  double max_diff = 0.0, max_effect = 0.0;
  for (Eigen::Index row = first; row < first + rows; ++row)
    for (Eigen::Index col = 0; col < e.raw.cols(); ++col) {
      const double exact = patched_metric(r, m, cell_patch(r, what, l, row, col)) - e.metric_corrupt;
      max_diff = std::max(max_diff, std::abs(exact - (e.raw(row, col) - e.metric_corrupt)));
      max_effect = std::max(max_effect, std::abs(exact));
    }
  INFO(to_string(what) << " layer " << l << ": max |AtP - exact| " << max_diff << ", max |effect| " << max_effect);
  CHECK(max_effect > 1e-3);  // the patches do change the metric: the comparison means something
  CHECK(max_diff <= 2e-6 * std::max(1.0, max_effect) + 2e-6 * std::abs(e.metric_corrupt));
}


}  // namespace

TEST_CASE("attribution patching matches the float64 reference for every site and method", "[atp][fixtures]") {
  const json atp = json::parse(test::read_text(test::source_dir() / "tests/fixtures/analyses/grads/atp.json"));
  for (const auto& run : atp["runs"]) {
    const auto model = Model::load(test::fixture_model(run["model"].get<std::string>()));
    const PatchingInputs in =
        patching_inputs(*model, run["clean_text"].get<std::string>(), run["corrupt_text"].get<std::string>(),
                        run["answer_text"].get<std::string>(), run["wrong_text"].get<std::string>(), run["bos"].get<bool>());
    REQUIRE(in.clean == run["clean_tokens"].get<std::vector<int32_t>>());
    const auto clean = model->run(in.clean), corrupt = model->run(in.corrupt);
    const GradientCache g = atp_gradients(*corrupt, in.answer, in.wrong, kAtpSites, PatchMethod::AtPQK);
    for (const auto& sweep : run["sweeps"]) {
      const std::optional<PatchMethod> method = parse_patch_method(sweep["method"].get<std::string>());
      REQUIRE(method);
      if (*method == PatchMethod::Exact) continue;
      const std::optional<AtpSite> what = parse_atp_site(sweep["what"].get<std::string>());
      REQUIRE(what);
      DYNAMIC_SECTION(run["model"].get<std::string>() << " " << to_string(*method) << " " << to_string(*what)) {
        const AtpResult e = attribution_patching(*clean, *corrupt, g, *what, *method);
        const float m_corrupt = sweep["metric_corrupt"].get<float>();
        CHECK(std::abs(e.metric_corrupt - m_corrupt) <= 1e-5f * std::max(1.0f, std::abs(m_corrupt)));
        std::vector<float> ref = test::flatten(sweep["raw"]), ours(e.raw.data(), e.raw.data() + e.raw.size());
        REQUIRE(ref.size() == ours.size());
        for (float& x : ref) x -= m_corrupt;
        for (float& x : ours) x -= e.metric_corrupt;
        const test::Comparison c = test::compare(ref, ours);
        INFO("raw - metric_corrupt: max |diff| " << c.max_abs << ", max |ref| " << c.max_ref);
        CHECK(c.relative <= 1e-4);
        const std::vector<float> ref_n = test::flatten(sweep["normalized"]);
        const test::Comparison n = test::compare(ref_n, std::vector<float>(e.normalized.data(), e.normalized.data() + e.normalized.size()));
        CHECK(n.relative <= 1e-4);
      }
    }
  }
}

TEST_CASE("attribution patching equals exact patched runs where the metric is linear in the node", "[atp]") {
  for (const char* name : kModels) {
    DYNAMIC_SECTION(name) {
      const Runs r = runs(name);
      const ModelConfig& c = r.model->config();
      const int last = c.n_layers - 1;
      // A dot product with the last block's output at the last position is linear in that block's
      // mlp_out, and, with parallel blocks (the MLP reads resid_pre, not resid_mid), in its attn_out.
      const Metric at_post = dot_metric(HookPoint::ResidPost, last, fixed_vector(c.d_model));
      check_linear(r, at_post, AtpSite::MlpOut, last);
      if (c.architecture.parallel_blocks) check_linear(r, at_post, AtpSite::AttnOut, last);
      // attn_out = concat(z) W_O + b_O: linear in every head's z.
      const Metric at_attn_out = dot_metric(HookPoint::AttnOut, last, fixed_vector(c.d_model));
      check_linear(r, at_attn_out, AtpSite::Z, last);
      check_linear(r, at_attn_out, AtpSite::ZPos, last);
      // mlp_out = post W_out + b_out: linear in every neuron.
      const Metric at_mlp_out = dot_metric(HookPoint::MlpOut, last, fixed_vector(c.d_model));
      check_linear(r, at_mlp_out, AtpSite::MlpPost, last);
    }
  }
}

TEST_CASE("attribution patching is m_corrupt exactly at nodes the metric does not depend on, or that do not change",
          "[atp]") {
  for (const char* name : kModels) {
    DYNAMIC_SECTION(name) {
      const Runs r = runs(name);
      const ModelConfig& c = r.model->config();
      const int H = c.n_heads, p = 3;
      // A metric at layer 0's output, position 3: later layers and later positions do not feed it.
      const Metric early = dot_metric(HookPoint::ResidPost, 0, fixed_vector(c.d_model), p);
      const GradientCache g = backward(*r.corrupt, early);
      // The usual metric: nothing before the first changed token differs between the runs.
      const GradientCache g_diff = atp_gradients(*r.corrupt, 5, 7, kAtpSites, PatchMethod::AtP);
      for (const PatchMethod method : {PatchMethod::AtP, PatchMethod::AtPQK})
        for (const AtpSite what : kAtpSites) {
          INFO(to_string(method) << " " << to_string(what));
          const AtpResult e = attribution_patching(*r.clean, *r.corrupt, g, what, method);
          for (Eigen::Index row = 0; row < e.raw.rows(); ++row) {
            const Eigen::Index layer = what == AtpSite::ZPos ? row / H : row;
            for (Eigen::Index col = 0; col < e.raw.cols(); ++col) {
              const bool by_pos = what != AtpSite::Z && what != AtpSite::MlpPost;
              if (layer == 0 && (!by_pos || col <= p)) continue;  // the metric depends on these
              INFO("row " << row << " col " << col);
              CHECK(e.raw(row, col) == e.metric_corrupt);
              CHECK(e.normalized(row, col) == 0.0f);
            }
          }
          const AtpResult d = attribution_patching(*r.clean, *r.corrupt, g_diff, what, method);
          if (what == AtpSite::Z || what == AtpSite::MlpPost) continue;  // over every position
          for (Eigen::Index row = 0; row < d.raw.rows(); ++row)
            for (Eigen::Index col = 0; col < kFirstDiff; ++col) CHECK(d.raw(row, col) == d.metric_corrupt);
          // ... and the positions that changed do move the estimate somewhere.
          CHECK((d.raw.array() != d.metric_corrupt).any());
        }
    }
  }
}

TEST_CASE("attribution patching refuses a gradient of another run, a site it did not keep and the exact method",
          "[atp][refused]") {
  const Runs r = runs("llama_gqa");
  const AtpSite resid[] = {AtpSite::ResidPre};
  const GradientCache g = atp_gradients(*r.corrupt, 5, 7, resid, PatchMethod::AtP);
  CHECK(atp_gradient_hooks(resid, PatchMethod::AtP) == std::vector<HookPoint>{HookPoint::ResidPre});
  CHECK(atp_gradient_hooks(kAtpSites, PatchMethod::AtPQK) ==
        std::vector<HookPoint>{HookPoint::ResidPre, HookPoint::AttnOut, HookPoint::MlpOut, HookPoint::Z,
                               HookPoint::MlpPost});
  CHECK_NOTHROW(attribution_patching(*r.clean, *r.corrupt, g, AtpSite::ResidPre));
  const GradientCache of_clean = atp_gradients(*r.clean, 5, 7, resid, PatchMethod::AtP);
  CHECK_THROWS_WITH(attribution_patching(*r.clean, *r.corrupt, of_clean, AtpSite::ResidPre),
                    Catch::Contains("the gradient was taken on another run"));
  CHECK_THROWS_WITH(attribution_patching(*r.clean, *r.corrupt, g, AtpSite::Z), Catch::Contains("was not kept"));
  CHECK_THROWS_WITH(attribution_patching(*r.clean, *r.corrupt, g, AtpSite::ResidPre, PatchMethod::Exact),
                    Catch::Contains("patching_sweep"));
  const auto shorter = r.model->run(std::vector<int32_t>(kClean.begin(), kClean.end() - 1));
  CHECK_THROWS_WITH(attribution_patching(*shorter, *r.corrupt, g, AtpSite::ResidPre),
                    Catch::Contains("the same number of tokens"));
  CHECK_THROWS_WITH(atp_gradients(*r.corrupt, 5, 5, resid, PatchMethod::AtP), Catch::Contains("the same token"));
  // The two prompts give the same metric: nothing to normalize by (the exact sweep's message).
  const GradientCache g_same = atp_gradients(*r.clean, 5, 7, resid, PatchMethod::AtP);
  CHECK_THROWS_WITH(attribution_patching(*r.clean, *r.clean, g_same, AtpSite::ResidPre),
                    Catch::Contains("is the same on both prompts"));
  CHECK_THROWS_WITH(atp_gradients(*r.corrupt, 5, 7, {}, PatchMethod::AtP), Catch::Contains("at least one site"));
  for (const AtpSite s : kAtpSites) CHECK(parse_atp_site(to_string(s)) == s);
  for (const PatchMethod m : {PatchMethod::Exact, PatchMethod::AtP, PatchMethod::AtPQK})
    CHECK(parse_patch_method(to_string(m)) == m);
  CHECK(!parse_atp_site("resid_post"));
  CHECK(!parse_patch_method("atp*"));
}
