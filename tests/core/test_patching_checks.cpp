// The warnings a patching sweep shows beside its result (core/analysis/patching_checks.h), on the
// built-in model: a pair it does not solve (the README's former example, an indirect-object
// sentence a 4-layer story model has not learnt) and one it does (a repeated sentence).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/analysis/patching.h"
#include "core/analysis/patching_checks.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "test_support.h"

namespace {

struct Pair {
  std::shared_ptr<const hs::ActivationCache> clean, corrupt;
  float m_clean = 0.0f, m_corrupt = 0.0f;
};

Pair run_pair(const hs::Model& m, const char* clean, const char* corrupt, const char* answer, const char* wrong) {
  const hs::PatchingInputs in = hs::patching_inputs(m, clean, corrupt, answer, wrong);
  Pair p;
  p.clean = m.run(in.clean);
  p.corrupt = m.run(in.corrupt);
  p.m_clean = hs::logit_difference(*p.clean, in.answer, in.wrong);
  p.m_corrupt = hs::logit_difference(*p.corrupt, in.answer, in.wrong);
  return p;
}

bool mentions(const std::vector<std::string>& warnings, const std::string& text) {
  for (const auto& w : warnings)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("patching warnings: a pair the model does not solve is said to be one", "[patching][checks]") {
  const auto m = hs::Model::load(hs::builtin_model_dir());
  const Pair ioi = run_pair(*m, "When Mary and John went to the store, John gave a drink to",
                            "When Mary and John went to the store, Mary gave a drink to", " Mary", " John");
  const auto warnings = hs::patching_warnings(*ioi.clean, ioi.m_clean, ioi.m_corrupt);
  INFO("m_clean " << ioi.m_clean << ", m_corrupt " << ioi.m_corrupt << ", spread " << hs::logit_spread(*ioi.clean));
  REQUIRE(ioi.m_clean <= 0.0f);
  CHECK(mentions(warnings, "does not prefer the answer"));
  CHECK(mentions(warnings, "small next to the logits' spread"));
}

TEST_CASE("patching warnings: none for a pair the model solves", "[patching][checks]") {
  const auto m = hs::Model::load(hs::builtin_model_dir());
  // The README's example: the second copy of a sentence, with the first copy's word changed.
  const Pair induction = run_pair(*m, "The vivid walrus juggles seven copper kites near Oslo. The vivid walrus juggles",
                                  "The vivid walrus juggles eight copper kites near Oslo. The vivid walrus juggles",
                                  " seven", " eight");
  INFO("m_clean " << induction.m_clean << ", m_corrupt " << induction.m_corrupt);
  CHECK(induction.m_clean > 0.0f);
  CHECK(induction.m_corrupt < 0.0f);
  CHECK(hs::patching_warnings(*induction.clean, induction.m_clean, induction.m_corrupt).empty());
  // The corrupted run taken for the clean one: it does not prefer the answer, and the gap is the
  // other way round.
  const auto swapped = hs::patching_warnings(*induction.corrupt, induction.m_corrupt, induction.m_clean);
  CHECK(mentions(swapped, "does not prefer the answer"));
  CHECK(mentions(swapped, "the corrupted run prefers the answer at least as much"));
  // The spread is the standard deviation of the clean run's last logits.
  const hs::ConstRowVectorRef last = induction.clean->logits.row(induction.clean->n_pos() - 1);
  const double mean = last.cast<double>().mean();
  CHECK(hs::logit_spread(*induction.clean) ==
        Approx(std::sqrt((last.cast<double>().array() - mean).square().mean())).epsilon(1e-12));
}

TEST_CASE("cli patch writes the warnings into its JSON and prints them", "[patching][checks][cli]") {
  const auto out = hs::test::scratch_dir() / "patch_warnings.json";
  const hs::test::CliRun r = hs::test::run_cli(
      "patch --what mlp_out --clean \"When Mary and John went to the store, John gave a drink to\" --answer \" Mary\" "
      "--corrupt \"When Mary and John went to the store, Mary gave a drink to\" --wrong \" John\" -o " +
      hs::test::quote(out.string()));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(hs::test::read_text(out));
  REQUIRE(j["warnings"].size() == 3);  // not preferred, the corrupted run prefers it more, a tiny gap
  for (const auto& w : j["warnings"]) CHECK(r.err.find("warning: " + w.get<std::string>()) != std::string::npos);
}
