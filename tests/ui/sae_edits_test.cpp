// Latent edits in the app (issue 25 item 3), on the built-in model and its shipped SAE at
// blocks.2.hook_resid_pre: an edit made in the Features view re-runs the prompt exactly as
// hs::splice_sae does; the splice with nothing edited is the plain run bit for bit (checked on
// the core's run, the controller splices only while there are edits); removing the edits gives
// the plain run back; unloading the SAE drops its edits; the quality shown is hs::sae_quality's.
#include <catch2/catch.hpp>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QListWidget>
#include <QStatusBar>
#include <QSignalSpy>

#include <cstring>

#include "core/features/features.h"
#include "core/features/sae.h"
#include "core/model/cache.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/controller/loaded_saes.h"
#include "ui/controller/sae_edits.h"
#include "ui/views/contributions_view.h"
#include "ui/views/sae_edit_panel.h"
#include "ui/views/units_view.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

namespace {

const QString kEditsPrompt = QStringLiteral("The cat sat on the mat. The cat sat on the");

QString shippedSae() {
  return QString::fromStdString((hs::builtin_model_dir() / "saes" / "resid_pre_2").string());
}

bool sameBits(const hs::PositionRows& a, const hs::PositionRows& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index p = 0; p < a.rows(); ++p)
    if (std::memcmp(a.row_data(p), b.row_data(p), sizeof(float) * static_cast<size_t>(a.cols())) != 0) return false;
  return true;
}

float maxDiff(const hs::PositionRows& a, const hs::PositionRows& b) {
  float m = 0;
  for (Eigen::Index p = 0; p < a.rows(); ++p)
    for (Eigen::Index c = 0; c < a.cols(); ++c) m = std::max(m, std::abs(a.row_data(p)[c] - b.row_data(p)[c]));
  return m;
}

struct ClearAll {
  ~ClearAll() {
    SaeEdits::instance().clear();
    LoadedSaes::instance().clear();
  }
};

}  // namespace

TEST_CASE("An unedited SAE splice is the plain run bit for bit", "[sae_edits]") {
  const auto model = hs::Model::load(hs::builtin_model_dir());
  const hs::SaeSet set = hs::load_sae_folder(shippedSae().toStdString());
  const auto sae = std::make_shared<const hs::Sae>(set.saes.front());
  const hs::TextRun plain = hs::run_text(model, kEditsPrompt.toStdString());
  hs::RunOptions options;
  options.interventions = hs::splice_sae(sae, *model->weights(), {});
  const hs::TextRun spliced = hs::run_tokens(model, plain.tokens, options);
  CHECK(sameBits(plain.cache->logits, spliced.cache->logits));
}

TEST_CASE("Latent edits from the Features view: the run is splice_sae's, removing restores it, unloading drops them, "
          "the quality is sae_quality's",
          "[sae_edits][window]") {
  ClearAll clear;
  MainWindowOptions options;
  options.text = kEditsPrompt;
  options.restore_settings = false;
  options.view = QStringLiteral("features");
  options.sae_dirs = {shippedSae()};
  MainWindow window(options);
  window.resize(1400, 900);
  window.show();
  REQUIRE(waitFor([&] { return window.controller()->currentRun() && !LoadedSaes::instance().empty(); }, 30000));
  auto* view = window.viewAs<UnitsView>(QStringLiteral("features"));
  REQUIRE(view);
  REQUIRE(waitFor([&] { return view->isCurrent(); }, 30000));
  SaeEditPanel* panel = view->editPanel();
  REQUIRE(panel);
  const auto model = window.controller()->model();
  const auto plain = window.controller()->currentRun();
  REQUIRE(plain->ablations().empty());
  const LoadedSae loaded = LoadedSaes::instance().list().front();

  // The quality shown is hs::sae_quality's on this prompt.
  REQUIRE(waitFor([&] { return panel->quality() != nullptr; }, 30000));
  const hs::SaeQuality expected = hs::sae_quality(model->weights(), plain->run.tokens, *loaded.sae);
  CHECK(panel->quality()->positions == expected.positions);
  CHECK(panel->quality()->mse == Approx(expected.mse).epsilon(1e-5));
  CHECK(panel->quality()->explained_variance == Approx(expected.explained_variance).epsilon(1e-5));
  CHECK(panel->quality()->l0 == Approx(expected.l0).epsilon(1e-6));
  CHECK(panel->quality()->loss_clean == Approx(expected.loss_clean).epsilon(1e-5));
  CHECK(panel->quality()->loss_spliced == Approx(expected.loss_spliced).epsilon(1e-5));
  CHECK(panel->qualityText().contains(QStringLiteral("explained variance")));

  // Zero the shown (top) latent, then steer it: each re-runs the prompt as splice_sae does.
  const int latent = view->shownUnit();
  REQUIRE(latent >= 0);
  auto editedRun = [&](const std::vector<hs::LatentEdit>& edits) {
    hs::SpliceOptions o;
    o.edits = edits;
    hs::RunOptions run_options;
    run_options.interventions = hs::splice_sae(loaded.sae, *model->weights(), o);
    return hs::run_tokens(model, plain->run.tokens, run_options);
  };
  panel->kindBox()->setCurrentIndex(0);  // Zero
  quint64 job = plain->job;
  panel->applyEdit();
  REQUIRE(waitFor([&] {
    const auto r = window.controller()->currentRun();
    return r && r->job != job && !r->ablations().empty();
  }, 30000));
  auto run = window.controller()->currentRun();
  CHECK(SaeEdits::instance().list().size() == 1);
  CHECK(panel->editList()->count() == 1);
  const hs::TextRun zeroed = editedRun({{latent, hs::LatentEdit::Kind::Zero, 0.0f, -1}});
  CHECK(sameBits(run->run.cache->logits, zeroed.cache->logits));
  CHECK(!sameBits(run->run.cache->logits, plain->run.cache->logits));
  CHECK(window.statusBar()->findChild<QLabel*>(QStringLiteral("statusAblations"))->text().contains(QStringLiteral("edited")));

  panel->kindBox()->setCurrentIndex(2);  // Steer
  panel->valueBox()->setValue(5.0);
  job = run->job;
  panel->applyEdit();  // the same latent and position: replaces the zero
  REQUIRE(waitFor([&] {
    const auto r = window.controller()->currentRun();
    return r && r->job != job && SaeEdits::instance().list().size() == 1;
  }, 30000));
  REQUIRE(waitFor([&] { return window.controller()->currentRun()->job != job; }, 30000));
  run = window.controller()->currentRun();
  const hs::TextRun steered = editedRun({{latent, hs::LatentEdit::Kind::Add, 5.0f, -1}});
  INFO("max |logit difference| " << maxDiff(run->run.cache->logits, steered.cache->logits));
  CHECK(sameBits(run->run.cache->logits, steered.cache->logits));
  // The Contributions view's check does not call the steering vector rounding.
  auto* contributions = window.viewAs<ContributionsView>(QStringLiteral("contributions"));
  REQUIRE(contributions != nullptr);
  window.tabs()->setCurrentWidget(contributions);
  REQUIRE(waitFor([&] { return contributions->checkText().contains(QStringLiteral("the run is edited")); }, 30000));
  window.tabs()->setCurrentWidget(view);

  // Removing the edits gives the plain run back.
  job = run->job;
  SaeEdits::instance().clear();
  REQUIRE(waitFor([&] {
    const auto r = window.controller()->currentRun();
    return r && r->job != job;
  }, 30000));
  run = window.controller()->currentRun();
  CHECK(run->ablations().empty());
  CHECK(sameBits(run->run.cache->logits, plain->run.cache->logits));
  window.tabs()->setCurrentWidget(contributions);
  REQUIRE(waitFor([&] { return contributions->checkText().contains(QStringLiteral("float32 rounding")); }, 30000));
  window.tabs()->setCurrentWidget(view);

  // Unloading the SAE drops its edits (and the run is plain again).
  SaeEdits::instance().add(loaded.id, {latent, hs::LatentEdit::Kind::Scale, 3.0f, 2});
  REQUIRE(waitFor([&] { return !window.controller()->currentRun()->ablations().empty(); }, 30000));
  LoadedSaes::instance().remove(loaded.id);
  CHECK(SaeEdits::instance().isEmpty());
  CHECK(window.statusBar()->currentMessage().contains(QStringLiteral("unloaded SAE")));
  REQUIRE(waitFor([&] { return window.controller()->currentRun()->ablations().empty(); }, 30000));
  CHECK(sameBits(window.controller()->currentRun()->run.cache->logits, plain->run.cache->logits));
}
