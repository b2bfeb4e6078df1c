// Head detectors on any prompt: the query positions and keys of each definition, the scores
// against the float64 reference (tests/fixtures/analyses/head_detectors.json), and that on
// BOS + R + R and on prose they are exactly the fixed-sequence scores of head_scores.h.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/analysis/head_detectors.h"
#include "core/analysis/head_scores.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "test_support.h"

using namespace hs;

namespace {

constexpr HeadDetector kAll[] = {HeadDetector::PreviousToken, HeadDetector::DuplicateToken, HeadDetector::Induction};

// The keys a plan reads for each of its queries: {query, {keys}}.
std::vector<std::pair<int, std::vector<int>>> rows_of(const DetectorPlan& p) {
  std::vector<std::pair<int, std::vector<int>>> rows;
  for (size_t i = 0; i < p.queries.size(); ++i)
    rows.push_back({p.queries[i], std::vector<int>(p.keys.begin() + p.key_begin[i], p.keys.begin() + p.key_begin[i + 1])});
  return rows;
}

using Rows = std::vector<std::pair<int, std::vector<int>>>;

}  // namespace

TEST_CASE("detector plans: which queries each score averages and which keys it sums", "[head_detectors]") {
  // BOS a b a a b: position 0 is BOS.
  const std::vector<int32_t> t = {9, 1, 2, 1, 1, 2};
  CHECK(rows_of(detector_plan(t, HeadDetector::PreviousToken, true)) == Rows{{2, {1}}, {3, {2}}, {4, {3}}, {5, {4}}});
  // Every earlier occurrence, summed: the second "a" after two.
  CHECK(rows_of(detector_plan(t, HeadDetector::DuplicateToken, true)) == Rows{{3, {1}}, {4, {1, 3}}, {5, {2}}});
  // The positions after them, except the query itself (a at 4 right after a at 3).
  CHECK(rows_of(detector_plan(t, HeadDetector::Induction, true)) == Rows{{3, {2}}, {4, {2}}, {5, {3}}});
  // Without BOS position 0 is a token: "9" twice.
  const std::vector<int32_t> u = {9, 5, 9};
  CHECK(rows_of(detector_plan(u, HeadDetector::DuplicateToken, false)) == Rows{{2, {0}}});
  CHECK(rows_of(detector_plan(u, HeadDetector::Induction, false)) == Rows{{2, {1}}});
  // With BOS, the BOS id typed later is no repeat of position 0.
  CHECK(detector_plan(u, HeadDetector::DuplicateToken, true).queries.empty());
  // Too short for anything.
  for (HeadDetector d : kAll) CHECK(detector_plan({9, 1}, d, true).queries.empty());
}

TEST_CASE("head detectors match the float64 reference on fixture models", "[head_detectors]") {
  const auto fixture = nlohmann::json::parse(test::read_text(test::source_dir() / "tests/fixtures/analyses/head_detectors.json"));
  const double tolerance = fixture["tolerance"]["relative"].get<double>();
  REQUIRE(fixture["cases"].size() >= 4);
  for (const auto& c : fixture["cases"]) {
    const std::string name = c["name"];
    INFO(name);
    const auto model = Model::load(test::fixture_model(c["model"].get<std::string>()));
    const std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
    const auto cache = model->run(tokens);
    const PromptHeadScores s = score_heads_on_prompt(*cache, c["bos_prepended"].get<bool>());
    for (HeadDetector d : kAll) {
      const std::string key = detector_key(d);
      INFO(key);
      const auto& ref = c["scores"][key];
      const DetectorScores& ours = s[d];
      CHECK(ours.queries == c["query_positions"][key].get<int>());
      REQUIRE(ours.scores.rows() == static_cast<Eigen::Index>(ref.size()));
      double max_abs = 0.0, max_ref = 0.0;
      for (int l = 0; l < ours.scores.rows(); ++l) {
        REQUIRE(ours.scores.cols() == static_cast<Eigen::Index>(ref[static_cast<size_t>(l)].size()));
        for (int h = 0; h < ours.scores.cols(); ++h) {
          const auto& r = ref[static_cast<size_t>(l)][static_cast<size_t>(h)];
          if (r.is_null()) {
            CHECK(std::isnan(ours.scores(l, h)));  // no score, never 0
            continue;
          }
          REQUIRE(std::isfinite(ours.scores(l, h)));
          max_abs = std::max(max_abs, std::abs(r.get<double>() - ours.scores(l, h)));
          max_ref = std::max(max_ref, std::abs(r.get<double>()));
        }
      }
      const double relative = max_ref > 0 ? max_abs / max_ref : max_abs;
      INFO("max |ref - ours| = " << max_abs << ", relative " << relative);
      CHECK(relative <= tolerance);
    }
  }
}

TEST_CASE("on BOS + R + R and on prose the per-prompt scores are the fixed-sequence scores", "[head_detectors]") {
  // The built-in model (a real induction head) and a small fixture; R's ids distinct, so that the
  // only repeats are the second copy's.
  for (const auto& dir : {builtin_model_dir(), test::fixture_model("f32_prefixed")}) {
    INFO(dir.string());
    const auto model = Model::load(dir);
    const int n = std::min(40, (model->config().n_ctx - 1) / 2);
    const int32_t bos = model->bos_id();
    std::vector<int32_t> r;
    for (int i = 0; static_cast<int>(r.size()) < n; ++i) {
      const int32_t id = static_cast<int32_t>((37 * i + 11) % (model->config().d_vocab - 1));
      if (id != bos && std::find(r.begin(), r.end(), id) == r.end()) r.push_back(id);
    }
    std::vector<int32_t> seq = {bos};
    seq.insert(seq.end(), r.begin(), r.end());
    seq.insert(seq.end(), r.begin(), r.end());
    std::vector<int32_t> prose = model->encode(kHeadScoreProse, true);
    prose.resize(std::min(prose.size(), static_cast<size_t>(model->config().n_ctx)));

    const HeadScores fixed = compute_head_scores(model->weights(), prose, {seq}, n);
    const PromptHeadScores on_seq = score_heads_on_prompt(*model->run(seq), true);
    const PromptHeadScores on_prose = score_heads_on_prompt(*model->run(prose), true);
    CHECK(on_seq.duplicate_token.queries == n);
    CHECK(on_seq.induction.queries == n);
    CHECK(on_prose.previous_token.queries == static_cast<int>(prose.size()) - 2);
    for (int l = 0; l < model->config().n_layers; ++l)
      for (int h = 0; h < model->config().n_heads; ++h) {
        INFO("L" << l << "H" << h);
        // The same floats added in the same order: equal, not merely close.
        CHECK(on_seq.duplicate_token.scores(l, h) == fixed.duplicate_token(l, h));
        CHECK(on_seq.induction.scores(l, h) == fixed.induction(l, h));
        CHECK(on_prose.previous_token.scores(l, h) == fixed.previous_token(l, h));
      }
  }
}

TEST_CASE("detectors continued from the run whose prefix was reused equal detectors computed afresh", "[head_detectors]") {
  // Prose with repeats on the built-in model: typed at the end one token at a time, edited in the
  // middle, shortened, and a run that did not reuse anything; each continued from the previous
  // run's scores, each equal to a fresh computation bit for bit.
  const auto model = Model::load(builtin_model_dir());
  std::vector<int32_t> prose = model->encode(kHeadScoreProse, true);
  prose.resize(std::min(prose.size(), static_cast<size_t>(std::min(model->config().n_ctx, 120))));
  const size_t n = prose.size();
  std::vector<int32_t> middle_edit = prose;
  middle_edit[n / 2] = prose[3];  // a repeat of an earlier token
  std::vector<std::vector<int32_t>> steps;
  for (size_t len = n - 3; len <= n; ++len) steps.emplace_back(prose.begin(), prose.begin() + static_cast<long>(len));
  steps.push_back(middle_edit);
  steps.emplace_back(prose.begin(), prose.begin() + static_cast<long>(n / 3));
  steps.push_back({prose[5], prose[6], prose[5], prose[6]});  // nothing in common with the previous prompt
  for (HeadDetector d : kAll) {
    std::shared_ptr<const ActivationCache> previous = model->run(steps.front());
    DetectorScores carried = detect_heads(*previous, d, true);
    for (size_t i = 1; i < steps.size(); ++i) {
      INFO("detector " << static_cast<int>(d) << " step " << i);
      const auto cache = model->run(steps[i], RunOptions{}, previous);
      const DetectorScores continued = detect_heads(*cache, d, true, &carried);
      const DetectorScores fresh = detect_heads(*cache, d, true);
      CHECK(continued.queries == fresh.queries);
      CHECK(continued.query_positions == fresh.query_positions);
      CHECK(continued.running == fresh.running);
      bool same_bits = continued.scores.size() == fresh.scores.size();
      for (Eigen::Index k = 0; same_bits && k < fresh.scores.size(); ++k)
        same_bits = std::memcmp(continued.scores.data() + k, fresh.scores.data() + k, sizeof(float)) == 0;
      CHECK(same_bits);
      // And the carried sums are really what it continued from: shifted, they shift the result
      // whenever the reused prefix holds queries.
      if (cache->reused_prefix > 0 && !fresh.query_positions.empty() && fresh.query_positions.front() < cache->reused_prefix) {
        DetectorScores shifted = carried;
        for (double& v : shifted.running) v += 1.0;
        CHECK(detect_heads(*cache, d, true, &shifted).scores(0, 0) != fresh.scores(0, 0));
      }
      previous = cache;
      carried = continued;
    }
  }
}

TEST_CASE("a prompt without repeats has no duplicate-token or induction score", "[head_detectors]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const TextRun run = run_text(model, "The cat");  // BOS + 3 distinct tokens
  const PromptHeadScores s = score_heads_on_prompt(*run.cache, run.bos_prepended);
  CHECK(s.duplicate_token.queries == 0);
  CHECK(s.induction.queries == 0);
  CHECK(s.duplicate_token.scores.allFinite() == false);
  CHECK(s.duplicate_token.scores.array().isNaN().all());
  CHECK(s.induction.scores.array().isNaN().all());
  CHECK(s.previous_token.queries == run.cache->n_pos() - 2);
  CHECK(s.previous_token.scores.allFinite());
  // BOS alone: nothing to score at all.
  const PromptHeadScores none = score_heads_on_prompt(*model->run(std::vector<int32_t>{model->bos_id()}), true);
  for (HeadDetector d : kAll) {
    CHECK(none[d].queries == 0);
    CHECK(none[d].scores.rows() == model->config().n_layers);
    CHECK(none[d].scores.array().isNaN().all());
  }
}

TEST_CASE("cli heads --text scores the prompt, and without it the fixed scores are unchanged", "[head_detectors][cli]") {
  const std::string m = " --model " + test::quote(test::fixture_model("f32_prefixed").string());
  const test::CliRun r = test::run_cli("heads" + m + " --text 'The cat sat. The cat sat'");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const TextRun run = run_text(model, "The cat sat. The cat sat");
  const PromptHeadScores s = score_heads_on_prompt(*run.cache, true);
  CHECK(j["tokens"] == nlohmann::json(run.tokens));
  CHECK(j["bos_prepended"] == true);
  CHECK(j["heads"].size() == 8);
  for (HeadDetector d : kAll) {
    CHECK(j["query_positions"][detector_key(d)] == s[d].queries);
    for (const auto& head : j["heads"]) {
      const float ours = s[d].scores(head["layer"].get<int>(), head["head_index"].get<int>());
      CHECK(head[detector_key(d)].get<double>() == Approx(ours).margin(1e-7));
    }
  }
  // No repeats: null, not 0; without BOS the first token is a token.
  const auto none = nlohmann::json::parse(test::run_cli("heads" + m + " --text 'The cat'").out);
  CHECK(none["heads"][0]["duplicate_token"].is_null());
  CHECK(none["heads"][0]["induction"].is_null());
  CHECK(none["best"]["induction"].is_null());
  CHECK(none["query_positions"]["induction"] == 0);
  const auto no_bos = nlohmann::json::parse(test::run_cli("heads" + m + " --text 'The cat' --no-bos").out);
  CHECK(no_bos["bos_prepended"] == false);
  CHECK(no_bos["tokens"].size() + 1 == none["tokens"].size());
  // Without --text: exactly the fixed-sequence scores, as before.
  const test::CliRun fixed = test::run_cli("heads" + m + " --seed 3");
  REQUIRE(fixed.code == 0);
  HeadScoreOptions o;
  o.seed = 3;
  CHECK(fixed.out == head_scores_to_json(*model, compute_head_scores(*model, o)) + "\n");
  // Errors: one line, non-zero.
  const test::CliRun bad = test::run_cli("heads" + m + " --text hi --seed 3");
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--seed") != std::string::npos);
  const test::CliRun long_text = test::run_cli("heads" + m + " --text " + test::quote(std::string(200, 'x')));
  CHECK(long_text.code == 1);
  CHECK(long_text.err.find("context") != std::string::npos);
}
