// Ablation and activation patching in the window, as a person uses them: right-click a head, see
// every view follow the ablated run and the panel compare it with the plain one, undo; type a
// corrupted prompt, run the sweep, cancel it, and see the core's numbers in the heatmaps.
#include <catch2/catch.hpp>

#include <QAction>
#include <QDir>
#include <QDockWidget>
#include <QImage>
#include <QLineEdit>
#include <QMenu>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTabWidget>
#include <QTest>
#include <QUndoStack>

#include "core/analysis/ablation.h"
#include "core/analysis/patching.h"
#include "core/analysis/patching_checks.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/base/figure.h"
#include "ui/base/stall_monitor.h"
#include "ui/controller/ablations.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/views/contributions_view.h"
#include "ui/views/patching_view.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/window/ablation_panel.h"
#include "ui/window/export_all.h"
#include "ui/window/main_window.h"
#include "test_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;
using hs::ui::test::Window;

namespace {

// The action of the head grid's right-click menu on item `index` whose object name is `name`;
// triggered without opening the menu.
bool triggerHeadAction(MainWindow& window, int index, const QString& name) {
  QMenu menu;
  Q_EMIT window.headGrid()->itemContextMenu(index, &menu);
  for (QAction* a : menu.actions())
    if (a->objectName() == name) {
      a->trigger();
      return true;
    }
  return false;
}

size_t ablationsOf(const std::shared_ptr<const RunResult>& run) { return run ? run->ablations().size() : 0; }

}  // namespace

TEST_CASE("Ablating a head from the grid re-runs every view with it, and the panel compares, and undo restores",
          "[window][ablation]") {
  Window w(QStringLiteral("The cat sat on the mat"));
  const auto plain = w.run();
  const int n_head = plain->n_head(), layer = 1, head = 2, index = layer * n_head + head;
  QMenu menu;
  Q_EMIT w.window.headGrid()->itemContextMenu(index, &menu);
  QStringList texts;
  for (QAction* a : menu.actions()) texts << a->text();
  CHECK(texts.contains(QStringLiteral("Zero-ablate L1H2")));
  CHECK(texts.contains(QStringLiteral("Mean-ablate L1H2")));

  REQUIRE(triggerHeadAction(w.window, index, QStringLiteral("actionZeroAblate")));
  REQUIRE(waitFor([&] { return ablationsOf(w.run()) == 1; }));
  const auto ablated = w.run();
  const int dh = ablated->run.cache->config().d_head;
  CHECK(ablated->run.cache->layer(layer).z.middle_cols(head * dh, dh).isZero(0.0f));
  CHECK(ablated->run.tokens == plain->run.tokens);
  // Every view follows the ablated run: the grid marks the head, the analyses are of that run.
  CHECK(w.window.headGrid()->item(index).tag == QStringLiteral("0"));
  REQUIRE(waitFor([&] {
    const auto& pos = w.window.viewAs<ContributionsView>(QStringLiteral("contributions"))->positionResult();
    return pos && pos->run_job == ablated->job;
  }));
  CHECK(ablationsOf(w.window.viewAs<ContributionsView>(QStringLiteral("contributions"))->positionResult()->run) == 1);
  // The panel: before/after from the worker's two runs.
  REQUIRE(ablated->baseline);
  REQUIRE(ablated->ablation);
  CHECK(ablated->baseline->logits == plain->run.cache->logits);
  const hs::RunComparison expect = hs::compare_runs(*plain->run.cache, *ablated->run.cache, AnalysisController::kTopK);
  AblationPanel* panel = w.window.ablationPanel();
  CHECK(w.window.ablationDock()->isVisible());
  REQUIRE(panel->topTable()->rowCount() == AnalysisController::kTopK);
  CHECK(panel->topTable()->item(0, 1)->text() == QString::number(expect.before[0].probability, 'f', 3));
  CHECK(panel->topTable()->item(0, 3)->text() == QString::number(expect.after[0].probability, 'f', 3));
  REQUIRE(panel->klBars()->barCount() == ablated->n_pos());
  for (int p = 0; p < ablated->n_pos(); ++p) CHECK(panel->klBars()->bar(p).value == expect.kl[static_cast<size_t>(p)]);
  CHECK(panel->targetText().contains(QStringLiteral("change")));
  REQUIRE(panel->removeButton(layer, head) != nullptr);

  // Undo: the plain run again; redo: ablated again; the remove button: plain.
  QUndoStack* undo = w.window.ablations()->undoStack();
  CHECK(undo->undoText() == QStringLiteral("Zero-ablate L1H2"));
  w.window.findChild<QAction*>(QStringLiteral("actionUndo"))->trigger();
  REQUIRE(waitFor([&] { return w.run() && w.run()->job != ablated->job && ablationsOf(w.run()) == 0; }));
  CHECK(w.run()->run.cache->logits == plain->run.cache->logits);
  CHECK(w.window.headGrid()->item(index).tag.isEmpty());
  CHECK(panel->removeButton(layer, head) == nullptr);
  w.window.findChild<QAction*>(QStringLiteral("actionRedo"))->trigger();
  REQUIRE(waitFor([&] { return ablationsOf(w.run()) == 1; }));
  CHECK(w.run()->run.cache->logits == ablated->run.cache->logits);
  REQUIRE(waitFor([&] { return panel->removeButton(layer, head) != nullptr; }));
  QTest::mouseClick(panel->removeButton(layer, head), Qt::LeftButton);
  REQUIRE(waitFor([&] { return ablationsOf(w.run()) == 0 && w.window.ablations()->isEmpty(); }));
}

TEST_CASE("Heads picked with Ctrl+click are mean-ablated together, and typing keeps the ablation", "[window][ablation]") {
  Window w(QStringLiteral("The cat sat"));
  ImageGridView* grid = w.window.headGrid();
  const int n_head = w.run()->n_head();
  QTest::mouseClick(grid, Qt::LeftButton, Qt::ControlModifier, grid->itemRect(0 * n_head + 1).center());
  QTest::mouseClick(grid, Qt::LeftButton, Qt::ControlModifier, grid->itemRect(1 * n_head + 3).center());
  CHECK(grid->pickedIndices().size() == 2);
  QMenu menu;
  Q_EMIT grid->itemContextMenu(1 * n_head + 3, &menu);
  CHECK(menu.actions().first()->text() == QStringLiteral("Zero-ablate 2 heads (L0H1, L1H3)"));
  REQUIRE(triggerHeadAction(w.window, 1 * n_head + 3, QStringLiteral("actionMeanAblate")));
  CHECK(grid->pickedIndices().isEmpty());
  REQUIRE(waitFor([&] { return ablationsOf(w.run()) == 2; }));
  for (const hs::Intervention& i : w.run()->ablations()) CHECK(i.kind == hs::InterventionKind::Mean);
  CHECK(grid->item(0 * n_head + 1).tag == QStringLiteral("μ"));
  // Typing re-runs the new text with the same ablations; the result equals a run made directly.
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat"));
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.text == "The cat sat on the mat"; }));
  const auto run = w.run();
  REQUIRE(ablationsOf(run) == 2);
  hs::RunOptions o;
  o.interventions = {hs::mean_ablation(0, 1), hs::mean_ablation(1, 3)};
  CHECK(run->run.cache->logits == run->run.model->run(run->run.tokens, o)->logits);  // a mean: never a reused prefix
  // The plain run reused the previous prompt's plain run: equal up to float rounding.
  const hs::RowMatrixXf fresh = run->run.model->run(run->run.tokens)->logits.to_matrix();
  CHECK((run->baseline->logits.to_matrix() - fresh).cwiseAbs().maxCoeff() <= 1e-5f * fresh.cwiseAbs().maxCoeff());
}

TEST_CASE("The Patching tab runs a sweep on demand and shows the core's numbers", "[window][patching]") {
  // The first case of the patching fixture: the f32 fixture model.
  Window w(QStringLiteral("The cat sat on the mat!"));
  auto* view = w.window.viewAs<PatchingView>(QStringLiteral("patching"));
  REQUIRE(view);
  w.window.tabs()->setCurrentWidget(view);
  CHECK_FALSE(view->runButton()->isEnabled());  // nothing typed yet
  view->corruptEdit()->setText(QStringLiteral("The cat sat on the hat! and"));
  CHECK(view->messageText().contains(QStringLiteral("same number of tokens")));
  CHECK_FALSE(view->runButton()->isEnabled());
  view->corruptEdit()->setText(QStringLiteral("The cat sat on the hat!"));
  view->answerEdit()->setText(QStringLiteral("␣mat"));
  view->wrongEdit()->setText(QStringLiteral("\""));
  CHECK(view->messageText().contains(QStringLiteral("exactly one token")));
  view->answerEdit()->setText(QStringLiteral("Z"));
  REQUIRE(view->runButton()->isEnabled());
  CHECK(view->messageText().startsWith(QStringLiteral("Ready")));
  // Typing in the prompt does not start a sweep: it is on demand.
  CHECK(view->result() == nullptr);

  StallMonitor monitor;
  monitor.start();
  QTest::mouseClick(view->runButton(), Qt::LeftButton);
  CHECK(view->isRunning());
  REQUIRE(waitFor([&] { return view->result() != nullptr; }, 30000));
  monitor.stop();
  CHECK_FALSE(view->isRunning());
  CHECK(monitor.maxStallMs() < 5000.0);
  CHECK(view->statusText().contains(QStringLiteral("patched runs")));

  const auto run = w.run();
  const auto& model = run->run.model;
  const hs::PatchingInputs in = hs::patching_inputs(*model, run->run.text, "The cat sat on the hat!", "Z", "\"");
  const auto corrupt = model->run(in.corrupt);
  for (hs::HookPoint site : PatchingView::kSites) {
    INFO(hs::hook_short_name(site));
    const hs::PatchingResult expect = hs::patching_sweep(*run->run.cache, *corrupt, in.answer, in.wrong, site);
    HeatmapView* map = view->heatmap(site);
    REQUIRE(map->rowCount() == expect.normalized.rows());
    REQUIRE(map->columnCount() == expect.normalized.cols());
    int same = 0;
    for (int r = 0; r < map->rowCount(); ++r)
      for (int c = 0; c < map->columnCount(); ++c)
        same += map->plottedValue(r, c) == static_cast<double>(expect.normalized(r, c)) ? 1 : 0;
    CHECK(same == map->rowCount() * map->columnCount());
    CHECK(map->rangeLower() == -map->rangeUpper());  // diverging, symmetric around 0
  }
  // The pair's warnings are the core's, beside the maps.
  const hs::PatchingResult first = hs::patching_sweep(*run->run.cache, *corrupt, in.answer, in.wrong, PatchingView::kSites[0]);
  const auto warnings = hs::patching_warnings(*run->run.cache, first.metric_clean, first.metric_corrupt);
  const auto shown = std::dynamic_pointer_cast<const PatchingViewResult>(view->result());
  REQUIRE(shown);
  CHECK(shown->warnings == warnings);
  for (const std::string& warning : warnings)
    CHECK(view->summaryText().contains(QString::fromStdString(warning).toHtmlEscaped()));
  CHECK_FALSE(view->summaryText().contains(QStringLiteral("Run again")));
  CHECK(view->staleReasons().isEmpty());
  CHECK_FALSE(view->mapsGreyed());
  CHECK_FALSE(view->heatmap(hs::HookPoint::ResidPre)->title().contains(QStringLiteral("stale")));
  // Clicking a cell of the z map selects that head.
  HeatmapView* z = view->heatmap(hs::HookPoint::Z);
  z->replotNow();
  QTest::mouseClick(z->findChild<QWidget*>(QStringLiteral("heatmapPlot")), Qt::LeftButton, Qt::NoModifier,
                    z->cellCenter(1, 2));
  CHECK(w.window.selection()->layer() == 1);
  CHECK(w.window.selection()->head() == 2);
  // A new prompt makes the maps an earlier prompt's; Run would compute them again.
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat?"));
  REQUIRE(waitFor([&] { return w.run()->run.text == "The cat sat on the mat?"; }));
  REQUIRE(waitFor([&] { return view->summaryText().contains(QStringLiteral("of an earlier prompt")); }));
  // Kept for comparison, but greyed out and titled stale, each map.
  CHECK(view->staleReasons() == QStringList{QStringLiteral("of an earlier prompt")});
  CHECK(view->mapsGreyed());
  for (hs::HookPoint site : PatchingView::kSites) CHECK(view->heatmap(site)->title().endsWith(QStringLiteral(" · stale")));
  // Back to the prompt the sweep is of: current again. Another wrong answer: stale, and named.
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat!"));
  REQUIRE(waitFor([&] { return w.run()->run.text == "The cat sat on the mat!" && view->staleReasons().isEmpty(); }));
  CHECK_FALSE(view->mapsGreyed());
  CHECK_FALSE(view->heatmap(hs::HookPoint::Z)->title().contains(QStringLiteral("stale")));
  view->setViewInputs({{PatchingView::kCorrupt, QStringLiteral("The cat sat on the hat!")},
                       {PatchingView::kAnswer, QStringLiteral("Z")},
                       {PatchingView::kWrong, QStringLiteral("!")},
                       {PatchingView::kMethod, QStringLiteral("exact")}});
  REQUIRE(waitFor([&] { return view->summaryText().contains(QStringLiteral("of another wrong answer")); }));
  CHECK(view->staleReasons() == QStringList{QStringLiteral("of another wrong answer")});
  CHECK(view->mapsGreyed());
  view->setViewInputs({{PatchingView::kCorrupt, QStringLiteral("The cat sat on the hat!")},
                       {PatchingView::kAnswer, QStringLiteral("Z")},
                       {PatchingView::kWrong, QStringLiteral("\"")},
                       {PatchingView::kMethod, QStringLiteral("exact")}});
  REQUIRE(waitFor([&] { return !view->mapsGreyed(); }));
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat?"));
  REQUIRE(waitFor([&] { return w.run()->run.text == "The cat sat on the mat?" && view->mapsGreyed(); }));
  // Run showed the exact sweep: the method is part of the inputs Export All copies.
  CHECK(view->viewInputs() == ViewInputs{{PatchingView::kCorrupt, QStringLiteral("The cat sat on the hat!")},
                                        {PatchingView::kAnswer, QStringLiteral("Z")},
                                        {PatchingView::kWrong, QStringLiteral("\"")},
                                        {PatchingView::kMethod, QStringLiteral("exact")}});
}

TEST_CASE("A patching sweep can be cancelled and the window stays live while it runs", "[window][patching]") {
  // The built-in model (4 layers x 8 heads) and a long prompt: a sweep long enough to stop. Its
  // work grows with the square of the prompt's length and the sanitizers slow every cell down, so
  // there a quarter of the prompt is still long enough to stop, and the run to the end stays short.
  const int sentences = hs::test::kSanitized ? 3 : 12;
  QString text, corrupt;
  for (int i = 0; i < sentences; ++i) text += QStringLiteral("The cat sat on the mat. ");
  corrupt = text;
  corrupt.replace(8, 3, QStringLiteral("ran"));  // "The cat ran on the mat. The cat sat ..."
  Window w(text, QString::fromStdString(hs::builtin_model_dir().string()));
  auto* view = w.window.viewAs<PatchingView>(QStringLiteral("patching"));
  w.window.tabs()->setCurrentWidget(view);
  view->setViewInputs(
      {{PatchingView::kCorrupt, corrupt}, {PatchingView::kAnswer, QStringLiteral(" sat")}, {PatchingView::kWrong, QStringLiteral(" ran")}});
  if (!view->runButton()->isEnabled()) {
    WARN("skipped: " << view->messageText().toStdString());
    return;
  }
  StallMonitor monitor;
  monitor.start();
  REQUIRE(view->run());
  REQUIRE(waitFor([&] { return view->progressBar()->value() > 0 || view->result(); }, 30000));
  const bool finished_first = view->result() != nullptr;
  if (!finished_first) {
    QTest::mouseClick(view->cancelButton(), Qt::LeftButton);
    CHECK_FALSE(view->isRunning());
    CHECK(view->statusText() == QStringLiteral("Cancelled."));
    waitFor([] { return false; }, 1500);  // anything of the cancelled sweep would have arrived
    CHECK(view->result() == nullptr);
  }
  monitor.stop();
  WARN("longest GUI-thread stall during the sweep: " << monitor.maxStallMs() << " ms over " << monitor.ticks()
                                                     << " ticks" << (finished_first ? " (it finished first)" : ""));
  CHECK(monitor.maxStallMs() < 5000.0);
  CHECK(monitor.ticks() > 10);
  // Run again to the end: the result arrives and the button is back.
  REQUIRE(view->run());
  REQUIRE(waitFor([&] { return view->result() != nullptr; }, 120000));
  CHECK(view->runButton()->isEnabled());
}

TEST_CASE("The controller's long analyses report progress, can be cancelled, and fail by id", "[controller][patching]") {
  AnalysisController c;
  test::addViewAnalyses(c);
  c.setModel(test::fixtureModel());
  QSignalSpy ready(&c, &AnalysisController::runReady);
  c.requestRun(QStringLiteral("The cat sat on the mat!"));
  REQUIRE(waitFor([&] { return ready.count() == 1; }));
  test::AnalysisSpy patch(&c, QStringLiteral("patching"));
  QSignalSpy progress(&c, &AnalysisController::analysisProgress);
  QSignalSpy failed_for(&c, &AnalysisController::analysisFailedFor);
  QSignalSpy failed(&c, &AnalysisController::analysisFailed);
  AnalysisKey key;
  key.params = {QStringLiteral("The cat sat on the hat!"), QStringLiteral("Z"), QStringLiteral("\"")};
  c.request(QStringLiteral("patching"), key);
  REQUIRE(waitFor([&] { return patch.count() == 1; }));
  CHECK(progress.count() >= 1);
  CHECK(progress.last().at(0).toString() == QStringLiteral("patching"));
  // Cancelled at once: nothing arrives.
  c.request(QStringLiteral("patching"), key);
  c.cancel(QStringLiteral("patching"));
  waitFor([] { return false; }, 300);
  CHECK(patch.count() == 1);
  // A failure goes to the view by id, not to the window's banner.
  key.params[0] = QStringLiteral("The cat");
  c.request(QStringLiteral("patching"), key);
  REQUIRE(waitFor([&] { return failed_for.count() == 1; }));
  CHECK(failed_for.at(0).at(1).toString().contains(QStringLiteral("same number of tokens")));
  CHECK(failed.count() == 0);
}

TEST_CASE("Export All writes the Patching view's four maps when it has inputs", "[export][patching]") {
  auto run = AnalysisController::computeRun(test::fixtureModel(), QStringLiteral("The cat sat on the mat!"));
  run->job = 1;
  QTemporaryDir tmp;
  ExportAllJob::Options options;
  options.out_dir = tmp.path();
  options.view_inputs[QStringLiteral("patching")] = test::fixturePatchingInputs();
  ExportAllJob job(run, options);
  const test::ExportOutcome out = test::runExport(job);
  REQUIRE(out.finished);
  INFO(out.message.toStdString());
  CHECK(out.ok);
  const QStringList files = QDir(tmp.path()).entryList({QStringLiteral("*.png")}, QDir::Files);
  for (const char* stem : {"patching_resid_pre", "patching_attn_out", "patching_mlp_out", "patching_z"}) {
    INFO(stem);
    CHECK(files.contains(QStringLiteral("%1.png").arg(QString::fromLatin1(stem))));
    const QImage image(QDir(tmp.path()).filePath(QStringLiteral("%1.png").arg(QString::fromLatin1(stem))));
    CHECK(image.size() == QSize(PatchingView::kHeatmapFigureSize.width(),
                                PatchingView::kHeatmapFigureSize.height() + figureTitleHeight()));
  }
  CHECK_FALSE(files.contains(QStringLiteral("patching.png")));
}

TEST_CASE("A head of the Contributions heatmap can be ablated from its right-click menu too", "[window][ablation]") {
  Window w(QStringLiteral("The cat sat"));
  auto* view = w.window.viewAs<ContributionsView>(QStringLiteral("contributions"));
  QMenu menu;
  Q_EMIT view->headHeatmap()->cellContextMenu(1, 3, &menu);
  QAction* mean = nullptr;
  for (QAction* a : menu.actions())
    if (a->objectName() == QStringLiteral("actionMeanAblate")) mean = a;
  REQUIRE(mean);
  CHECK(mean->text() == QStringLiteral("Mean-ablate L1H3"));
  mean->trigger();
  REQUIRE(waitFor([&] { return ablationsOf(w.run()) == 1; }));
  CHECK(w.run()->ablations().front() == hs::mean_ablation(1, 3));
}
