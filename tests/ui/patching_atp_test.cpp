// The Patching view's estimates as a person meets them: typed inputs give the AtP maps at once
// (no Run), always of the inputs on screen; Run adds the exact sweep and the scatter of the
// estimate against it, whose worst nodes select what they name; Export All writes all of it.
#include <catch2/catch.hpp>

#include <QDir>
#include <QImage>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QTableWidget>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>

#include "core/analysis/attribution_patching.h"
#include "core/analysis/patching.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/base/figure.h"
#include "ui/base/stall_monitor.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/views/patching_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/widgets/scatter_view.h"
#include "ui/window/export_all.h"
#include "ui/window/main_window.h"
#include "test_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;
using hs::ui::test::Window;

namespace {

// The core's estimate of the run on screen for the view's inputs, computed here from the same caches.
struct Expected {
  hs::PatchingInputs in;
  std::shared_ptr<const hs::ActivationCache> clean, corrupt;
  std::unique_ptr<hs::GradientCache> grad;
  Expected(const RunResult& run, const std::string& corrupt_text, const std::string& answer, const std::string& wrong)
      : in(hs::patching_inputs(run.model(), run.run.text, corrupt_text, answer, wrong, run.run.bos_prepended)),
        clean(run.plainCache()), corrupt(run.model().run(in.corrupt)) {
    grad = std::make_unique<hs::GradientCache>(
        hs::atp_gradients(*corrupt, in.answer, in.wrong, hs::kAtpSites, hs::PatchMethod::AtPQK));
  }
  hs::AtpResult estimate(hs::AtpSite site, hs::PatchMethod method) const {
    return hs::attribution_patching(*clean, *corrupt, *grad, site, method);
  }
};

// How many cells of `map` are `m` exactly, out of all of them (and the shapes agree).
int sameCells(const HeatmapView& map, const hs::RowMatrixXf& m) {
  if (map.rowCount() != m.rows() || map.columnCount() != m.cols()) return -1;
  int same = 0;
  for (int r = 0; r < map.rowCount(); ++r)
    for (int c = 0; c < map.columnCount(); ++c) same += map.plottedValue(r, c) == static_cast<double>(m(r, c)) ? 1 : 0;
  return same;
}

const QString kCorrupt = QStringLiteral("The cat sat on the hat!");

// The Patching tab shown, with the fixture pair's inputs typed, once its first estimate is in.
PatchingView* openWithInputs(Window& w) {
  auto* view = w.window.viewAs<PatchingView>(QStringLiteral("patching"));
  REQUIRE(view);
  w.window.tabs()->setCurrentWidget(view);
  view->setViewInputs({{PatchingView::kCorrupt, kCorrupt}, {PatchingView::kAnswer, QStringLiteral("Z")},
                       {PatchingView::kWrong, QStringLiteral("\"")}});
  REQUIRE(waitFor([&] { return view->currentEstimate() != nullptr; }, 30000));
  return view;
}

}  // namespace

TEST_CASE("The Patching tab's estimate appears without Run and is the core's attribution patching", "[window][patching][atp]") {
  Window w(QStringLiteral("The cat sat on the mat!"));
  auto* view = w.window.viewAs<PatchingView>(QStringLiteral("patching"));
  REQUIRE(view);
  w.window.tabs()->setCurrentWidget(view);
  CHECK(view->method() == hs::PatchMethod::AtP);  // the live estimate is the default
  view->corruptEdit()->setText(kCorrupt);
  view->answerEdit()->setText(QStringLiteral("Z"));
  view->wrongEdit()->setText(QStringLiteral("\""));
  REQUIRE(waitFor([&] { return view->currentEstimate() != nullptr; }, 30000));
  CHECK(view->result() == nullptr);  // no sweep was run
  CHECK_FALSE(view->isRunning());

  const Expected expect(*w.run(), kCorrupt.toStdString(), "Z", "\"");
  for (size_t i = 0; i < PatchingView::kSites.size(); ++i) {
    const hs::AtpResult e = expect.estimate(PatchingView::kEstimateSites[i], hs::PatchMethod::AtP);
    HeatmapView* map = view->heatmap(PatchingView::kSites[i]);
    INFO(hs::to_string(PatchingView::kEstimateSites[i]));
    CHECK(sameCells(*map, e.normalized) == e.normalized.size());
    CHECK(map->figureText().title.contains(QStringLiteral("AtP estimate")));
    CHECK(map->figureText().title.contains(QStringLiteral("an estimate")));
    CHECK(map->figureText().subtitle.contains(QStringLiteral("hat!")));
    CHECK(map->rangeLower() == -map->rangeUpper());
  }
  CHECK(view->mapsCaptionText().contains(QStringLiteral("AtP estimate")));
  CHECK(view->mapsCaptionText().contains(QStringLiteral("hat!")));
  // The neurons' list is mlp_post's estimate, largest |normalized| first.
  const hs::AtpResult mlp = expect.estimate(hs::AtpSite::MlpPost, hs::PatchMethod::AtP);
  REQUIRE(view->neuronTable()->rowCount() == std::min<int>(PatchingView::kTopNeurons, static_cast<int>(mlp.normalized.size())));
  Eigen::Index top_l = 0, top_n = 0;
  mlp.normalized.cwiseAbs().maxCoeff(&top_l, &top_n);
  CHECK(view->neuronTable()->item(0, 0)->text() == QStringLiteral("L%1 N%2").arg(top_l).arg(top_n));
  CHECK(view->neuronTable()->item(0, 1)->text() == formatNumber(mlp.normalized(top_l, top_n)));

  // AtP*: the z map is the QK fix's, from the same result (no new computation is needed).
  QTest::mouseClick(view->methodButton(hs::PatchMethod::AtPQK), Qt::LeftButton);
  CHECK(view->method() == hs::PatchMethod::AtPQK);
  const hs::AtpResult zqk = expect.estimate(hs::AtpSite::Z, hs::PatchMethod::AtPQK);
  CHECK(sameCells(*view->heatmap(hs::HookPoint::Z), zqk.normalized) == zqk.normalized.size());
  CHECK(view->heatmap(hs::HookPoint::Z)->figureText().title.contains(QStringLiteral("AtP* estimate")));
  // z per head and position: rows L0H0, L0H1, ...
  view->setZByPosition(true);
  const hs::AtpResult zpos = expect.estimate(hs::AtpSite::ZPos, hs::PatchMethod::AtPQK);
  CHECK(sameCells(*view->heatmap(hs::HookPoint::Z), zpos.normalized) == zpos.normalized.size());
  CHECK(zpos.normalized.rows() == w.run()->n_layer() * w.run()->n_head());
}

TEST_CASE("The Patching tab never shows an estimate of other inputs than those on screen", "[window][patching][atp]") {
  Window w(QStringLiteral("The cat sat on the mat!"));
  PatchingView* view = openWithInputs(w);
  HeatmapView* resid = view->heatmap(hs::HookPoint::ResidPre);
  // Whatever the maps show is the estimate of the run and inputs on screen, checked after every
  // event the GUI thread dispatches while the prompt changes and the new estimate arrives.
  int violations = 0, checks = 0;
  auto consistent = [&] {
    ++checks;
    if (resid->rowCount() == 0) return;  // nothing shown: fine
    const auto est = view->currentEstimate();
    if (!est || est->inputs.clean != w.run()->run.tokens) {
      ++violations;
      return;
    }
    const hs::RowMatrixXf& m = est->estimate(hs::PatchMethod::AtP, hs::AtpSite::ResidPre).normalized;
    if (sameCells(*resid, m) != m.size()) ++violations;
  };
  const auto before = view->currentEstimate();
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat?"));
  REQUIRE(waitFor([&] {
    consistent();
    const auto est = view->currentEstimate();
    return w.run()->run.text == "The cat sat on the mat?" && est && est != before;
  }, 30000));
  CHECK(violations == 0);
  CHECK(checks > 1);
  // The new estimate is of the new prompt: the core's for it.
  const Expected expect(*w.run(), kCorrupt.toStdString(), "Z", "\"");
  const hs::AtpResult e = expect.estimate(hs::AtpSite::ResidPre, hs::PatchMethod::AtP);
  CHECK(sameCells(*resid, e.normalized) == e.normalized.size());

  // Inputs that stop fitting clear the maps at once; an estimate asked for just before, landing
  // late, is not shown either.
  view->corruptEdit()->setText(kCorrupt + QStringLiteral("x"));  // valid? asked for, maybe
  view->corruptEdit()->setText(kCorrupt + QStringLiteral(" and more"));  // too many tokens
  CHECK(resid->rowCount() == 0);
  CHECK(view->messageText().contains(QStringLiteral("same number of tokens")));
  waitFor([] { return false; }, 800);
  CHECK(resid->rowCount() == 0);
  CHECK(view->currentEstimate() == nullptr);
  // Back to fitting inputs: the estimate again, without Run.
  view->corruptEdit()->setText(kCorrupt);
  REQUIRE(waitFor([&] { return resid->rowCount() > 0; }, 30000));
  CHECK(sameCells(*resid, e.normalized) == e.normalized.size());
}

TEST_CASE("The Patching scatter sets each node's estimate against the exact sweep, and its worst nodes select", "[window][patching][atp]") {
  Window w(QStringLiteral("The cat sat on the mat!"));
  PatchingView* view = openWithInputs(w);
  // No sweep yet: the scatter says so and offers Run.
  CHECK(view->scatter()->pointCount() == 0);
  CHECK(view->scatterNote().contains(QStringLiteral("not been run")));
  REQUIRE(view->scatterRunButton()->isVisibleTo(view));
  REQUIRE(view->scatterRunButton()->isEnabled());
  QTest::mouseClick(view->scatterRunButton(), Qt::LeftButton);
  CHECK(view->isRunning());
  REQUIRE(waitFor([&] { return view->result() != nullptr; }, 60000));
  CHECK(view->method() == hs::PatchMethod::Exact);
  const auto r = std::dynamic_pointer_cast<const PatchingViewResult>(view->result());
  REQUIRE(r);
  REQUIRE(r->exact);

  const Expected expect(*w.run(), kCorrupt.toStdString(), "Z", "\"");
  for (int site = 0; site < static_cast<int>(PatchingView::kSites.size()); ++site) {
    view->setCompareSite(site);
    INFO(site);
    const hs::PatchingResult exact = hs::patching_sweep(*expect.clean, *expect.corrupt, expect.in.answer,
                                                        expect.in.wrong, PatchingView::kSites[static_cast<size_t>(site)]);
    const hs::AtpResult atp = expect.estimate(PatchingView::kEstimateSites[static_cast<size_t>(site)], hs::PatchMethod::AtP);
    ScatterView* s = view->scatter();
    REQUIRE(s->pointCount() == exact.normalized.size());
    int same = 0;
    const int cols = static_cast<int>(exact.normalized.cols());
    for (int i = 0; i < s->pointCount(); ++i) {
      const auto [x, y] = s->plottedPoint(i);
      same += x == static_cast<double>(atp.normalized(i / cols, i % cols)) &&
                      y == static_cast<double>(exact.normalized(i / cols, i % cols))
                  ? 1
                  : 0;
    }
    CHECK(same == s->pointCount());
    CHECK(s->diagonalShown());
    // The list: the largest |estimate - exact| first, in order.
    const auto& worst = view->worstNodes();
    REQUIRE(static_cast<int>(worst.size()) == std::min<int>(PatchingView::kWorstListed, s->pointCount()));
    const double largest = (atp.normalized - exact.normalized).cwiseAbs().maxCoeff();
    CHECK(std::fabs(atp.normalized(worst[0].first, worst[0].second) - exact.normalized(worst[0].first, worst[0].second)) ==
          Approx(largest).epsilon(1e-6));
    for (size_t k = 1; k < worst.size(); ++k) {
      auto d = [&](size_t j) {
        return std::fabs(atp.normalized(worst[j].first, worst[j].second) - exact.normalized(worst[j].first, worst[j].second));
      };
      CHECK(d(k) <= d(k - 1));
    }
  }
  // Clicking the worst head selects it: the z map outlines its cell and the window's head moves.
  view->setCompareSite(3);
  const auto node = view->worstNodes().at(0);
  QTableWidget* table = view->worstTable();
  QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::NoModifier, table->visualItemRect(table->item(0, 0)).center());
  CHECK(w.window.selection()->layer() == node.first);
  CHECK(w.window.selection()->head() == node.second);
  CHECK(view->heatmap(hs::HookPoint::Z)->highlightedCell() == node);
  CHECK(view->scatter()->highlighted() == node.first * w.run()->n_head() + node.second);
  // A scatter point selects too (resid_pre: a layer and a position).
  view->setCompareSite(0);
  ScatterView* s = view->scatter();
  s->replotNow();
  const int pick = s->pointCount() - 1;
  QTest::mouseClick(s->findChild<QWidget*>(QStringLiteral("scatterPlot")), Qt::LeftButton, Qt::NoModifier,
                    s->findChild<QWidget*>(QStringLiteral("scatterPlot"))->mapFrom(s, s->pointCenter(pick)));
  const int cols = static_cast<int>(r->sweeps[0].normalized.cols());
  // Points can overlap: whichever was hit, the selection is that node's.
  REQUIRE(s->highlighted() >= 0);
  CHECK(w.window.selection()->layer() == s->highlighted() / cols);
  CHECK(w.window.selection()->position() == s->highlighted() % cols);
  CHECK(view->heatmap(hs::HookPoint::ResidPre)->highlightedCell() ==
        std::pair<int, int>{s->highlighted() / cols, s->highlighted() % cols});
  // Another prompt: the sweep is of an earlier prompt, so the scatter is gone and Run is offered.
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat?"));
  REQUIRE(waitFor([&] { return w.run()->run.text == "The cat sat on the mat?"; }));
  REQUIRE(waitFor([&] { return view->scatter()->pointCount() == 0; }));
  CHECK(view->scatterNote().contains(QStringLiteral("not been run")));
}

TEST_CASE("Export All writes the Patching estimate maps and the scatters, titled", "[export][patching][atp]") {
  auto run = AnalysisController::computeRun(test::fixtureModel(), QStringLiteral("The cat sat on the mat!"));
  run->job = 1;
  QTemporaryDir tmp;
  ExportAllJob::Options options;
  options.out_dir = tmp.path();
  options.view_inputs[QStringLiteral("patching")] = {{PatchingView::kCorrupt, kCorrupt},
                                                     {PatchingView::kAnswer, QStringLiteral("Z")},
                                                     {PatchingView::kWrong, QStringLiteral("\"")},
                                                     {PatchingView::kMethod, QStringLiteral("atp_qk")}};
  ExportAllJob job(run, options);
  const test::ExportOutcome out = test::runExport(job);
  REQUIRE(out.finished);
  INFO(out.message.toStdString());
  CHECK(out.ok);
  const QDir dir(tmp.path());
  for (const char* site : {"resid_pre", "attn_out", "mlp_out", "z"}) {
    INFO(site);
    const QImage exact(dir.filePath(QStringLiteral("patching_%1.png").arg(QLatin1String(site))));
    CHECK(exact.text(QStringLiteral("Title")).startsWith(QStringLiteral("Activation patching")));
    const QImage est(dir.filePath(QStringLiteral("patching_atp_qk_%1.png").arg(QLatin1String(site))));
    REQUIRE_FALSE(est.isNull());
    CHECK(est.size() == QSize(PatchingView::kHeatmapFigureSize.width(),
                              PatchingView::kHeatmapFigureSize.height() + figureTitleHeight()));
    CHECK(est.text(QStringLiteral("Title")).contains(QStringLiteral("AtP* estimate")));
    CHECK(est.text(QStringLiteral("Description")).contains(QStringLiteral("hat!")));
    CHECK(est.text(QStringLiteral("Description")).contains(QStringLiteral("logit(")));
    const QImage scatter(dir.filePath(QStringLiteral("patching_scatter_atp_qk_%1.png").arg(QLatin1String(site))));
    REQUIRE_FALSE(scatter.isNull());
    CHECK(scatter.size() == QSize(PatchingView::kScatterFigureSize.width(),
                                  PatchingView::kScatterFigureSize.height() + figureTitleHeight()));
    CHECK(scatter.text(QStringLiteral("Title")).contains(QStringLiteral("against the exact sweep")));
  }
  // Nothing half-written: no temporary files left beside them.
  CHECK(dir.entryList(QDir::Files | QDir::Hidden).filter(QStringLiteral(".png")).size() ==
        dir.entryList({QStringLiteral("*.png")}, QDir::Files).size());
}

TEST_CASE("Quick edits in the Patching tab keep the window live and end on the last inputs' estimate", "[window][patching][atp]") {
  // The built-in model (the keystroke benchmark's), the answer changed every 30 ms: each change asks
  // for an estimate on a worker and supersedes the one in flight; the GUI thread only draws.
  Window w(QStringLiteral("The cat sat on the mat. The cat sat on the"),
           QString::fromStdString(hs::builtin_model_dir().string()));
  MainWindow& window = w.window;
  auto* view = window.viewAs<PatchingView>(QStringLiteral("patching"));
  window.tabs()->setCurrentWidget(view);
  view->setViewInputs({{PatchingView::kCorrupt, QStringLiteral("The cat sat on the mat. The cat ran on the")},
                       {PatchingView::kAnswer, QStringLiteral(" sat")},
                       {PatchingView::kWrong, QStringLiteral(" ran")}});
  INFO(view->messageText().toStdString());
  REQUIRE(view->runButton()->isEnabled());
  StallMonitor monitor(1);
  monitor.start();
  const QStringList answers = {QStringLiteral(" on"), QStringLiteral(" the"), QStringLiteral(" sat")};
  for (int i = 0; i < 40; ++i) {
    view->answerEdit()->setText(answers[i % answers.size()]);
    waitFor([] { return false; }, 30);
  }
  REQUIRE(waitFor([&] { return view->currentEstimate() != nullptr; }, 30000));
  monitor.stop();
  WARN("longest GUI-thread stall over 40 edits 30 ms apart: " << monitor.maxStallMs() << " ms wall, "
                                                               << monitor.maxBusyMs() << " ms of its CPU time ("
                                                               << monitor.ticks() << " ticks)");
  // The GUI thread's own work between two ticks (checking the inputs, drawing an estimate) is what
  // this bounds: its CPU time, which a shared or CPU-throttled machine does not stretch as the
  // wall-clock gap (a CI run saw 341 ms of wall gap where 13-16 ms is the quiet figure). Quietly
  // both are 12-16 ms; with three busy loops beside the test the CPU time between two ticks reached
  // 108 ms, as events that queued while the thread waited for a core are handled in one go.
  CHECK(monitor.maxBusyMs() < 250.0);
  CHECK(monitor.maxStallMs() < 5000.0);  // and the loop never stops, as the other window tests ask
  // The estimate shown is of the last answer typed.
  const auto est = view->currentEstimate();
  WARN("the last estimate took " << est->estimate_ms << " ms on its worker");
  CHECK(est->key.params.value(1) == answers[39 % answers.size()]);
  const auto run = window.controller()->currentRun();
  CHECK(est->inputs.answer == hs::patching_inputs(run->model(), run->run.text, "The cat sat on the mat. The cat ran on the",
                                                  answers[39 % answers.size()].toStdString(), " ran",
                                                  run->run.bos_prepended)
                                  .answer);
}
