// The window as a person uses it: type, click, press keys; the views must show the core's numbers.
#include <catch2/catch.hpp>

#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QMimeData>
#include <QSettings>
#include <QUrl>
#include <QLabel>
#include <QMessageBox>
#include <QRadioButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTabWidget>
#include <QTest>
#include <QDragEnterEvent>

#include <cmath>

#include "core/analysis/concat_sum.h"
#include "core/analysis/dla.h"
#include "qcustomplot.h"
#include "core/model/memory_guard.h"
#include "core/model/model.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/base/stall_monitor.h"
#include "ui/window/main_window.h"
#include "ui/views/attention_view.h"
#include "ui/views/concat_sum_view.h"
#include "ui/views/contributions_view.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/widgets/token_strip.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

namespace {

struct FixtureWindow {
  MainWindow window;
  explicit FixtureWindow(const QString& text = QStringLiteral("The cat sat on the mat"))
      : window(MainWindowOptions{test::fixtureModelDir(), text, false}) {
    window.resize(1400, 900);
    window.show();
    // Window shortcuts (the arrow keys) need the window to be the active one.
    window.activateWindow();
    REQUIRE(QTest::qWaitForWindowActive(&window));
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  }
  std::shared_ptr<const RunResult> run() const { return window.controller()->currentRun(); }
  Selection* selection() const { return window.selection(); }
};

// Waits until the views show analyses of the current run at the current selection.
void waitForAnalyses(FixtureWindow& w) {
  REQUIRE(waitFor([&] {
    const auto run = w.run();
    const auto& pos = w.window.viewAs<ContributionsView>(QStringLiteral("contributions"))->positionResult();
    const auto& layer = w.window.viewAs<ConcatSumView>(QStringLiteral("concat"))->layerResult();
    return run && pos && layer && pos->run_job == run->job && layer->run_job == run->job &&
           pos->pos == w.selection()->position() && layer->layer == w.selection()->layer();
  }));
}

}  // namespace

TEST_CASE("Typing runs the model and updates every view", "[window]") {
  FixtureWindow w(QStringLiteral("Hello"));
  PromptEdit* prompt = w.window.promptEdit();
  prompt->setFocus();
  prompt->selectAll();
  QTest::keyClick(prompt, Qt::Key_Delete);
  QTest::keyClicks(prompt, QStringLiteral("The cat sat on"));
  REQUIRE(waitFor([&] { return w.run() && QString::fromStdString(w.run()->run.text) == QStringLiteral("The cat sat on"); }));
  const auto run = w.run();
  const int n = run->n_pos();
  CHECK(run->run.bos_prepended);
  CHECK(w.window.tokenStrip()->tokenCount() == n);
  CHECK(w.window.headGrid()->itemCount() == run->n_layer() * run->n_head());
  CHECK(w.window.viewAs<AttentionView>(QStringLiteral("attention"))->heatmap()->rowCount() == n);
  CHECK(w.window.viewAs<AttentionView>(QStringLiteral("attention"))->heatmap()->columnCount() == n);
  CHECK(w.selection()->position() == n - 1);  // the last token stays selected while typing
  auto* tokens = w.window.findChild<QLabel*>(QStringLiteral("statusTokens"));
  REQUIRE(tokens);
  CHECK(tokens->text().contains(QString::number(n)));
  auto* next = w.window.findChild<QLabel*>(QStringLiteral("statusNext"));
  REQUIRE(next);
  CHECK(next->text().contains(QStringLiteral("p = ")));
  waitForAnalyses(w);
  CHECK(w.window.viewAs<ContributionsView>(QStringLiteral("contributions"))->positionResult()->pos == n - 1);
}

TEST_CASE("A keystroke's attention pattern comes coloured with the run, from its worker", "[window]") {
  FixtureWindow w(QStringLiteral("The cat"));
  AttentionView* view = w.window.viewAs<AttentionView>(QStringLiteral("attention"));
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat"));
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.text == "The cat sat on the mat"; }));
  // Drawn in the same turn of the event loop as the run arrived, from the cells prepared with it.
  const auto prepared = std::dynamic_pointer_cast<const AttentionPatternResult>(view->result());
  REQUIRE(prepared);
  CHECK(prepared->run_job == w.run()->job);
  CHECK(view->heatmap()->cells() == prepared->cells);
  const int n = w.run()->n_pos();
  REQUIRE(view->heatmap()->rowCount() == n);
  const hs::RowMatrixXf pattern = w.run()->run.cache->head_pattern(w.selection()->layer(), w.selection()->head());
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < n; ++k) {
      if (k > q) CHECK(std::isnan(view->heatmap()->plottedValue(q, k)));
      else CHECK(view->heatmap()->plottedValue(q, k) == static_cast<double>(pattern(q, k)));
    }
}

TEST_CASE("Clicking a thumbnail shows that head's pattern, equal to the cache's", "[window]") {
  FixtureWindow w;
  const auto run = w.run();
  ImageGridView* grid = w.window.headGrid();
  const int n_head = run->n_head();
  const int layer = 1, head = 2;
  const int index = layer * n_head + head;
  QTest::mouseClick(grid, Qt::LeftButton, Qt::NoModifier, grid->itemRect(index).center());
  CHECK(w.selection()->layer() == layer);
  CHECK(w.selection()->head() == head);
  CHECK(grid->selectedIndex() == index);
  HeatmapView* heatmap = w.window.viewAs<AttentionView>(QStringLiteral("attention"))->heatmap();
  const hs::RowMatrixXf pattern = run->run.cache->head_pattern(layer, head);  // [query_pos, key_pos]
  const int n = run->n_pos();
  REQUIRE(heatmap->rowCount() == n);
  int compared = 0;
  for (int q = 0; q < n; ++q) {
    for (int k = 0; k < n; ++k) {
      const double plotted = heatmap->plottedValue(q, k);
      if (k > q) {
        CHECK(std::isnan(plotted));  // masked, not zero
      } else {
        CHECK(plotted == static_cast<double>(pattern(q, k)));
        ++compared;
      }
    }
  }
  CHECK(compared == n * (n + 1) / 2);
  CHECK(heatmap->figureText().title.startsWith(QStringLiteral("L1H2")));
}

TEST_CASE("Arrow keys move through heads and Page Up/Down through layers", "[window]") {
  FixtureWindow w;
  w.window.headGrid()->setFocus();
  w.selection()->setHead(0, 0);
  QTest::keyClick(w.window.headGrid(), Qt::Key_Right);
  CHECK((w.selection()->layer() == 0 && w.selection()->head() == 1));
  QTest::keyClick(w.window.headGrid(), Qt::Key_PageDown);
  CHECK((w.selection()->layer() == 1 && w.selection()->head() == 1));
  QTest::keyClick(w.window.headGrid(), Qt::Key_Left);
  CHECK((w.selection()->layer() == 1 && w.selection()->head() == 0));
  QTest::keyClick(w.window.headGrid(), Qt::Key_PageUp);
  CHECK((w.selection()->layer() == 0 && w.selection()->head() == 0));
  // In the prompt, arrows move the cursor, not the selection.
  w.window.promptEdit()->setFocus();
  QTest::keyClick(w.window.promptEdit(), Qt::Key_Right);
  CHECK((w.selection()->layer() == 0 && w.selection()->head() == 0));
}

TEST_CASE("Clicking a row of the pattern or a token selects that position everywhere", "[window]") {
  FixtureWindow w;
  HeatmapView* heatmap = w.window.viewAs<AttentionView>(QStringLiteral("attention"))->heatmap();
  heatmap->replotNow();
  QTest::mouseClick(heatmap->findChild<QWidget*>(QStringLiteral("heatmapPlot")), Qt::LeftButton, Qt::NoModifier,
                    heatmap->cellCenter(2, 1));
  CHECK(w.selection()->position() == 2);
  CHECK(heatmap->highlightedRow() == 2);
  waitForAnalyses(w);
  CHECK(w.window.viewAs<ContributionsView>(QStringLiteral("contributions"))->positionResult()->pos == 2);

  TokenStrip* strip = w.window.tokenStrip();
  QTest::mouseClick(strip, Qt::LeftButton, Qt::NoModifier, strip->chipRect(1).center());
  CHECK(w.selection()->position() == 1);
  CHECK(heatmap->highlightedRow() == 1);
}

TEST_CASE("The concat and sum panels agree and show the core's numbers", "[window]") {
  FixtureWindow w;
  w.window.tabs()->setCurrentWidget(w.window.viewAs<ConcatSumView>(QStringLiteral("concat")));
  w.selection()->setHead(1, 3);
  waitForAnalyses(w);
  ConcatSumView* view = w.window.viewAs<ConcatSumView>(QStringLiteral("concat"));
  const auto& result = view->layerResult();
  REQUIRE(result->layer == 1);
  const hs::ConcatVsSum reference = hs::concat_vs_sum(*w.run()->run.cache, 1);
  const int S = w.run()->n_pos();
  const int D = w.run()->run.cache->config().d_model;
  REQUIRE(view->concatPlot()->rowCount() == S);
  REQUIRE(view->sumPlot()->columnCount() == D);
  double max_shown_diff = 0.0;
  for (int p = 0; p < S; ++p) {
    for (int d = 0; d < D; ++d) {
      const double concat = view->concatPlot()->plottedValue(p, d);
      const double sum = view->sumPlot()->plottedValue(p, d);
      CHECK(concat == static_cast<double>(reference.via_concat(p, d)));
      CHECK(sum == static_cast<double>(reference.via_sum(p, d)));
      max_shown_diff = std::max(max_shown_diff, std::fabs(concat - sum));
    }
  }
  CHECK(max_shown_diff < 1e-4);
  CHECK(static_cast<float>(max_shown_diff) == Approx(reference.max_abs_diff).margin(1e-12));
  CHECK(view->differenceText().contains(formatNumber(reference.max_abs_diff)));
  // Both panels are drawn on one colour scale, so equal values look equal.
  CHECK(view->concatPlot()->rangeUpper() == view->sumPlot()->rangeUpper());
  // The selected head's band and result are highlighted.
  CHECK(view->headResults()->selectedIndex() == 3);
  CHECK(view->headResults()->itemCount() == w.run()->n_head());
}

TEST_CASE("Contributions show the decomposition and the logit attribution of the core", "[window]") {
  FixtureWindow w;
  waitForAnalyses(w);
  ContributionsView* view = w.window.viewAs<ContributionsView>(QStringLiteral("contributions"));
  w.window.tabs()->setCurrentWidget(view);
  const auto result = view->positionResult();
  const auto& parts = result->parts;
  REQUIRE(view->bars()->barCount() == static_cast<int>(parts.labels.size()));
  for (int i = 0; i < view->bars()->barCount(); ++i)
    CHECK(view->bars()->plottedValue(i) == Approx(parts.norms[static_cast<size_t>(i)]));
  CHECK(view->checkText().contains(formatNumber(parts.max_abs_error)));
  // The default target is the predicted next token.
  CHECK(result->target_is_prediction);
  CHECK(result->target == result->top.front().id);

  view->findChild<QRadioButton*>(QStringLiteral("modeDla"))->click();
  CHECK(view->mode() == ContributionsView::Mode::LogitAttribution);
  for (int i = 0; i < view->bars()->barCount(); ++i)
    CHECK(view->bars()->plottedValue(i) == Approx(result->dla.per_component[static_cast<size_t>(i)]));
  HeatmapView* heads = view->headHeatmap();
  for (int l = 0; l < heads->rowCount(); ++l)
    for (int h = 0; h < heads->columnCount(); ++h) CHECK(heads->plottedValue(l, h) == Approx(result->dla.per_head(l, h)));
  CHECK(heads->rangeLower() == -heads->rangeUpper());  // diverging, symmetric around 0

  // Choosing another of the top predictions re-attributes to it.
  auto* combo = view->findChild<QComboBox*>(QStringLiteral("targetCombo"));
  REQUIRE(combo->count() >= 3);
  const int32_t second = combo->itemData(2).toInt();
  combo->setCurrentIndex(2);
  Q_EMIT combo->activated(2);
  REQUIRE(waitFor([&] { return view->positionResult() && view->positionResult()->target == second; }));
  CHECK(!view->positionResult()->target_is_prediction);
}

TEST_CASE("A view on a hidden tab draws the latest data when its tab is shown, not while hidden", "[window]") {
  FixtureWindow w(QStringLiteral("The cat"));
  waitForAnalyses(w);
  ConcatSumView* concat = w.window.viewAs<ConcatSumView>(QStringLiteral("concat"));
  ContributionsView* contributions = w.window.viewAs<ContributionsView>(QStringLiteral("contributions"));
  w.window.tabs()->setCurrentWidget(concat);
  const int before = w.run()->n_pos();
  CHECK(concat->concatPlot()->rowCount() == before);
  w.window.tabs()->setCurrentWidget(w.window.viewAs<AttentionView>(QStringLiteral("attention")));

  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat"));
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.text == "The cat sat on the mat"; }));
  waitForAnalyses(w);
  const int after = w.run()->n_pos();
  REQUIRE(after > before);
  CHECK(w.window.viewAs<AttentionView>(QStringLiteral("attention"))->heatmap()->rowCount() == after);  // the visible view follows at once
  CHECK(concat->layerResult()->run_job == w.run()->job);            // the hidden one has the data...
  CHECK(concat->concatPlot()->rowCount() == before);                // ...but has not drawn it
  CHECK(contributions->bars()->barCount() == 0);                    // never shown: never drawn

  w.selection()->setPosition(1);
  waitForAnalyses(w);
  w.window.tabs()->setCurrentWidget(concat);  // drawn as the tab is shown, before its first paint
  CHECK(concat->concatPlot()->rowCount() == after);
  CHECK(concat->sumPlot()->plottedValue(after - 1, 0) == static_cast<double>(concat->layerResult()->cs.via_sum(after - 1, 0)));
  CHECK(concat->concatPlot()->highlightedRow() == 1);
  w.window.tabs()->setCurrentWidget(contributions);
  CHECK(contributions->bars()->barCount() == static_cast<int>(contributions->positionResult()->parts.labels.size()));
  CHECK(contributions->positionResult()->pos == 1);
}

TEST_CASE("A broken model folder reports the error and keeps the previous model", "[window]") {
  FixtureWindow w;
  QTemporaryDir tmp;
  const auto before = w.window.controller()->model();
  QSignalSpy failed(w.window.controller(), &AnalysisController::modelLoadFailed);
  w.window.loadModel(test::makeBrokenModelDir(tmp.path()));
  REQUIRE(waitFor([&] { return failed.count() == 1; }));
  CHECK(w.window.controller()->model() == before);
  const QString message = failed.at(0).at(1).toString();
  CHECK(message.contains(QStringLiteral("config.json")));
  auto* box = w.window.findChild<QMessageBox*>(QStringLiteral("modelLoadError"));
  REQUIRE(box);
  CHECK(box->informativeText().contains(QStringLiteral("still loaded")));
  box->close();
  // The previous model still runs.
  w.window.promptEdit()->setPlainText(QStringLiteral("The mat"));
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.text == "The mat"; }));
  CHECK(w.run()->run.model == before);
}

TEST_CASE("A failed run shows its message, keeps the last views and the window stays usable", "[window]") {
  FixtureWindow w(QStringLiteral("The cat"));
  const auto before = w.run();
  QSignalSpy failed(w.window.controller(), &AnalysisController::runFailed);
  // The memory guard refuses any run when (it is told) only 1 KiB is free.
  hs::set_available_memory_override(1024);
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat on the mat"));
  REQUIRE(waitFor([&] { return failed.count() >= 1; }));
  hs::set_available_memory_override(std::nullopt);
  auto* banner = w.window.findChild<QLabel*>(QStringLiteral("banner"));
  REQUIRE(banner);
  CHECK(banner->isVisible());
  CHECK(banner->text().contains(QStringLiteral("Could not run the model")));
  CHECK(banner->text().contains(QStringLiteral("available")));
  CHECK(w.run() == before);  // the views keep the last good run
  CHECK(w.window.headGrid()->itemCount() == before->n_layer() * before->n_head());
  // Typing again runs normally and the error goes away.
  w.window.promptEdit()->setPlainText(QStringLiteral("The dog"));
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.text == "The dog"; }));
  CHECK_FALSE(banner->isVisible());
}

TEST_CASE("Typing stays responsive: keystroke-to-views latency and GUI-thread stalls", "[window][measure]") {
  FixtureWindow w(QStringLiteral("A"));
  PromptEdit* prompt = w.window.promptEdit();
  prompt->setFocus();
  prompt->moveCursor(QTextCursor::End);
  StallMonitor monitor;
  monitor.start();
  const QString typed = QStringLiteral(" cat sat on the mat");
  for (QChar c : typed) {
    QTest::keyClicks(prompt, QString(c));
    waitFor([] { return false; }, 40);  // ~25 characters per second, a fast typist
  }
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.text == "A cat sat on the mat"; }));
  waitForAnalyses(w);
  monitor.stop();
  const auto run = w.run();
  WARN("keystroke -> views: " << run->latency_ms << " ms after the " << MainWindow::kDebounceMs
                             << " ms debounce (worker " << run->worker_ms << " ms, forward " << run->run.forward_ms
                             << " ms); longest GUI-thread stall while typing " << monitor.maxStallMs() << " ms");
  // A measurement, not a timed assertion (a benchmark guards speed: tools/bench/hs_bench_keys);
  // only a frozen window fails here.
  CHECK(monitor.maxStallMs() < 5000.0);
  CHECK(monitor.ticks() > 10);
}

TEST_CASE("Dropping a model folder on the window loads it and remembers it", "[window]") {
  FixtureWindow w;
  QSignalSpy changed(w.window.controller(), &AnalysisController::modelChanged);
  const QString other = QStringLiteral(HEADSCOPE_SOURCE_DIR "/tests/fixtures/models/f16_plain");
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(other)});
  QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(&w.window, &enter);
  CHECK(enter.isAccepted());
  QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(&w.window, &drop);
  REQUIRE(waitFor([&] { return changed.count() == 1; }));
  CHECK(QDir(QString::fromStdString(w.window.controller()->model()->dir().string())) == QDir(other));
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.model == w.window.controller()->model(); }));
  const QStringList recent = QSettings().value(QStringLiteral("models/recent")).toStringList();
  CHECK(recent.contains(QDir(other).absolutePath()));
  auto* combo = w.window.findChild<QComboBox*>(QStringLiteral("modelCombo"));
  REQUIRE(combo);
  CHECK(combo->currentData().toString() == QDir(other).absolutePath());
  // A file is not a model folder: the drop is refused.
  QMimeData file_mime;
  file_mime.setUrls({QUrl::fromLocalFile(other + QStringLiteral("/config.json"))});
  QDragEnterEvent refuse(QPoint(10, 10), Qt::CopyAction, &file_mime, Qt::LeftButton, Qt::NoModifier);
  refuse.setAccepted(false);
  QCoreApplication::sendEvent(&w.window, &refuse);
  CHECK(!refuse.isAccepted());
}

TEST_CASE("An idle window does not keep repainting", "[window]") {
  // Every plot re-thins its tick labels after a layout that changed its size. A plot whose axis
  // rect was collapsed (a view in a hidden tab) had re-thinned and replotted itself without end,
  // keeping the GUI thread at 100% while nothing happened.
  FixtureWindow w;
  waitForAnalyses(w);
  for (int view = 0; view < w.window.tabs()->count(); ++view) {
    int replots = 0;
    std::vector<QMetaObject::Connection> connections;
    for (QCustomPlot* plot : w.window.findChildren<QCustomPlot*>())
      connections.push_back(QObject::connect(plot, &QCustomPlot::afterReplot, [&] { ++replots; }));
    w.window.tabs()->setCurrentIndex(view);
    // Let the tab draw its data, lay out and re-tick: wait for 300 ms without a replot, at most
    // 5 s (a slow, sanitized build takes longer than a fixed wait). A window that never stops
    // replotting never gets there, and the count below catches it.
    QElapsedTimer settling;
    settling.start();
    for (int before = -1; before != replots && settling.elapsed() < 5000;) {
      before = replots;
      QTest::qWait(300);
    }
    replots = 0;
    QTest::qWait(500);
    for (const auto& c : connections) QObject::disconnect(c);
    INFO("view " << view << ": " << replots << " replots in 500 ms");
    // The loop replotted hundreds of times a second; a late event on a loaded machine may
    // still replot a plot once or twice.
    CHECK(replots <= 2);
  }
}

TEST_CASE("Keep: last n_ctx tokens runs BOS and the end of an over-long text, and first, its start", "[window][overlong]") {
  // The fixture's context is 24 tokens; this text is longer.
  const QString text = QStringLiteral("one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
                                      "fifteen sixteen seventeen eighteen nineteen twenty");
  const auto model = test::fixtureModel();
  const std::vector<int32_t> all = model->encode(text.toStdString(), true);
  REQUIRE(all.size() > 24);
  MainWindowOptions o{test::fixtureModelDir(), text, false};
  o.keep_last = true;
  MainWindow window(o);
  window.show();
  REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  std::vector<int32_t> last = {all.front()};
  last.insert(last.end(), all.end() - 23, all.end());
  CHECK(window.controller()->currentRun()->run.tokens == last);
  CHECK(window.keepChoice()->currentIndex() == 1);
  // The status bar's choice runs the prompt again with its first n_ctx tokens.
  window.keepChoice()->setCurrentIndex(0);
  REQUIRE(waitFor([&] {
    const auto run = window.controller()->currentRun();
    return run && run->run.tokens == std::vector<int32_t>(all.begin(), all.begin() + 24);
  }));
  CHECK(window.controller()->currentRun()->run.dropped_tokens == static_cast<int>(all.size()) - 24);
  CHECK_FALSE(window.controller()->currentRun()->run.dropped_from_start);
}
