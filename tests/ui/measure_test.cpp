// Measurements on a real model, not run in CI ("[.measure]" is hidden):
//
//   HEADSCOPE_MEASURE_MODEL=/path/to/gpt2 [HEADSCOPE_MEASURE_TEXT="..."] ui_tests "[.measure]"
//
// Reports keystroke -> views latency and the longest GUI-thread stall while typing, while
// stepping through heads, while switching layers in the concat-vs-sum view and during Export All.
#include <catch2/catch.hpp>

#include <QTemporaryDir>
#include <QTest>

#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/base/stall_monitor.h"
#include "ui/window/export_all.h"
#include "ui/window/main_window.h"
#include "ui/views/concat_sum_view.h"
#include "ui/views/contributions_view.h"
#include "ui/widgets/prompt_edit.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

TEST_CASE("Measure latency and GUI-thread stalls on a real model", "[.measure]") {
  const QString model = qEnvironmentVariable("HEADSCOPE_MEASURE_MODEL", test::fixtureModelDir());
  const QString text = qEnvironmentVariable("HEADSCOPE_MEASURE_TEXT",
                                            QStringLiteral("The cat sat on the mat. The cat sat on the"));
  MainWindow window(MainWindowOptions{model, text.left(text.size() - 12), false});
  window.resize(1600, 1000);
  window.show();
  AnalysisController* c = window.controller();
  REQUIRE(waitFor([&] { return c->currentRun() != nullptr; }, 600000));
  auto settled = [&] {
    const auto run = c->currentRun();
    const auto& pos = window.viewAs<ContributionsView>(QStringLiteral("contributions"))->positionResult();
    const auto& layer = window.viewAs<ConcatSumView>(QStringLiteral("concat"))->layerResult();
    return run && pos && layer && pos->run_job == run->job && layer->run_job == run->job && !c->isRunning() &&
           layer->layer == window.selection()->layer();
  };
  REQUIRE(waitFor(settled, 600000));

  StallMonitor monitor(1);
  // Typing the last 12 characters, 25 per second.
  PromptEdit* prompt = window.promptEdit();
  prompt->setFocus();
  prompt->moveCursor(QTextCursor::End);
  monitor.start();
  for (QChar ch : text.right(12)) {
    QTest::keyClicks(prompt, QString(ch));
    waitFor([] { return false; }, 40);
  }
  REQUIRE(waitFor([&] { return settled() && QString::fromStdString(c->currentRun()->run.text) == text; }, 600000));
  const double typing_stall = monitor.maxStallMs();
  const auto run = c->currentRun();

  // One more key, alone: keystroke -> data ready for every view.
  QElapsedTimer key_clock;
  double started_ms = 0, run_ms = 0, pos_ms = 0, layer_ms = 0;
  QObject probe;
  QObject::connect(c, &AnalysisController::runStarted, &probe, [&] { started_ms = key_clock.nsecsElapsed() / 1e6; });
  QObject::connect(c, &AnalysisController::runReady, &probe, [&] { run_ms = key_clock.nsecsElapsed() / 1e6; });
  QObject::connect(c, &AnalysisController::analysisReady, &probe, [&](const QString& id) {
    (id == QStringLiteral("concat") ? layer_ms : pos_ms) = key_clock.nsecsElapsed() / 1e6;
  });
  key_clock.start();
  QTest::keyClicks(prompt, QStringLiteral("x"));
  REQUIRE(waitFor([&] { return settled() && c->currentRun()->run.text.back() == 'x'; }, 600000));
  const double key_to_views_ms = key_clock.nsecsElapsed() / 1e6;
  QObject::disconnect(c, nullptr, &probe, nullptr);
  const auto last = c->currentRun();

  // Stepping through heads (the attention view redraws the pattern each time).
  monitor.start();
  for (int i = 0; i < 12; ++i) {
    window.selection()->stepHead(1);
    waitFor([] { return false; }, 30);
  }
  waitFor(settled, 600000);
  const double heads_stall = monitor.maxStallMs();

  // Switching layers in the concat-vs-sum view.
  window.tabs()->setCurrentWidget(window.view(QStringLiteral("concat")));
  monitor.start();
  for (int i = 0; i < 3; ++i) {
    window.selection()->stepLayer(1);
    waitFor(settled, 600000);
  }
  const double layers_stall = monitor.maxStallMs();

  // Export All (PNGs of every view, at 1x).
  QTemporaryDir tmp;
  ExportAllJob::Options options;
  options.out_dir = tmp.path();
  ExportAllJob job(last, options);
  bool done = false;
  QObject::connect(&job, &ExportAllJob::finished, [&](bool, const QString&) { done = true; });
  QElapsedTimer export_clock;
  export_clock.start();
  monitor.start();
  job.start();
  REQUIRE(waitFor([&] { return done; }, 1800000));
  const double export_stall = monitor.maxStallMs();
  const double export_s = export_clock.nsecsElapsed() / 1e9;

  WARN("model " << model.toStdString() << ", " << last->n_pos() << " tokens, " << last->n_layer() << "x"
                << last->n_head() << " heads\n"
                << "forward " << last->run.forward_ms << " ms (reused prefix " << last->run.cache->reused_prefix
                << "), whole run on the worker " << last->worker_ms << " ms\n"
                << "one keystroke -> data for every view: " << key_to_views_ms << " ms (incl. the "
                << MainWindow::kDebounceMs << " ms debounce; run requested at " << started_ms << ", run ready at "
                << run_ms << ", position analyses at " << pos_ms << ", layer analysis at " << layer_ms << " ms)\n"
                << "longest GUI-thread stall: typing " << typing_stall << " ms, stepping heads " << heads_stall
                << " ms, switching concat-vs-sum layers " << layers_stall << " ms, Export All " << export_stall
                << " ms (" << job.written().size() << " PNGs in " << export_s << " s)\n"
                << "first run of the typed text: " << run->latency_ms << " ms request -> result");
}
