// Not a check: takes the README's screenshots of window states a person reaches through menus and
// clicks, so they can be taken again after a change. Hidden (it needs a real X display); run it
// under Xvfb, where the window fills the 1600 x 1000 screen at (0, 0):
//
//   Xvfb :99 -screen 0 1600x1000x24 &
//   DISPLAY=:99 QT_QPA_PLATFORM=xcb HEADSCOPE_SHOTS_DIR=docs/screenshots
//       build/tests/ui/ui_tests '[.screenshots]'     (one command line)
//
// Each shot is `import -window root` (ImageMagick) of the whole screen, as a person sees it.
#include <catch2/catch.hpp>

#include <QAction>
#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QMenu>
#include <QProcess>
#include <QTabWidget>
#include <QTest>
#include <QTimer>

#include <filesystem>

#include "core/session/session.h"
#include "ui/controller/ablations.h"
#include "ui/controller/selection.h"
#include "ui/views/attention_view.h"
#include "ui/views/attribution_view.h"
#include "ui/views/graph_view.h"
#include "ui/controller/loaded_saes.h"
#include <QTextBrowser>
#include "ui/widgets/heatmap_view.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/views/patching_view.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/window/main_window.h"
#include "ui/window/scan_dialog.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

namespace {

QString shotsDir() { return qEnvironmentVariable("HEADSCOPE_SHOTS_DIR"); }

void shoot(const QString& name) {
  QTest::qWait(600);  // every deferred paint and relayout done
  const QString path = QDir(shotsDir()).filePath(name);
  REQUIRE(QProcess::execute(QStringLiteral("import"), {QStringLiteral("-window"), QStringLiteral("root"), path}) == 0);
}

struct ShotWindow {
  MainWindow window;
  ShotWindow(const QString& text, const QString& model = {}) : window(MainWindowOptions{.model_dir = model, .text = text, .restore_settings = false}) {
    window.move(0, 0);
    window.resize(1600, 1000);
    window.show();
    window.activateWindow();
    REQUIRE(QTest::qWaitForWindowExposed(&window));
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }, 30000));
  }
  std::shared_ptr<const RunResult> run() const { return window.controller()->currentRun(); }
  void ablate(int layer, int head, const QString& action = QStringLiteral("actionZeroAblate")) {
    QMenu menu;
    Q_EMIT window.headGrid()->itemContextMenu(layer * run()->n_head() + head, &menu);
    for (QAction* a : menu.actions())
      if (a->objectName() == action) a->trigger();
    REQUIRE(waitFor([&] { return run() && run()->ablations().size() == window.ablations()->list().size(); }));
  }
};

}  // namespace

TEST_CASE("Screenshots of the heads panel", "[.screenshots]") {
  if (shotsDir().isEmpty() || QGuiApplication::platformName() != QStringLiteral("xcb")) {
    WARN("set HEADSCOPE_SHOTS_DIR and run on an X display (QT_QPA_PLATFORM=xcb) to take the screenshots");
    return;
  }
  QDir().mkpath(shotsDir());
  {
    // The Ablation dock open beside the heads panel: the thumbnails keep their labels.
    ShotWindow w(QStringLiteral("When Mary and John went to the store, John gave a drink to"));
    w.ablate(3, 2);
    w.ablate(2, 5);
    w.ablate(1, 0, QStringLiteral("actionMeanAblate"));
    REQUIRE(waitFor([&] { return w.window.ablationDock()->isVisible(); }));
    w.window.headMetricsBar()->setMetricId(QStringLiteral("induction"));
    shoot(QStringLiteral("ablation.png"));
  }
  {
    // File > Scan Data Set on the built-in model, then a model of the same name and shape whose
    // weights differ in one place: the grid does not pass the first model's scores off as its own.
    ShotWindow w(QStringLiteral("The cat sat on the mat. The cat sat on the"));
    bool filled = false;
    QTimer::singleShot(0, &w.window, [&] {
      if (auto* dialog = qobject_cast<ScanDialog*>(QApplication::activeModalWidget())) {
        dialog->setRepeatRandom(20);
        dialog->setLimit(100);
        filled = true;
        dialog->accept();
      }
    });
    w.window.findChild<QAction*>(QStringLiteral("actionScanDataSet"))->trigger();
    REQUIRE(filled);
    HeadMetricsBar* bar = w.window.headMetricsBar();
    REQUIRE(waitFor([&] { return bar->metricId() == QStringLiteral("induction_dataset") && bar->currentValues(); }, 120000));
    const std::filesystem::path copy = hs::test::scratch_dir() / "headscope-tiny-one-weight-changed" / "headscope-tiny";
    hs::test::copy_model_folder(hs::builtin_model_dir(), copy, 1000);
    const auto before = w.run();
    w.window.loadModel(QString::fromStdString(copy.string()));
    REQUIRE(waitFor([&] { return w.run() && w.run()->run.model != before->run.model; }, 30000));
    REQUIRE(bar->currentValues() == nullptr);
    shoot(QStringLiteral("scan-then-other-model.png"));
  }
}

TEST_CASE("Screenshot of the Attribution view", "[.screenshots]") {
  if (shotsDir().isEmpty() || QGuiApplication::platformName() != QStringLiteral("xcb")) {
    WARN("set HEADSCOPE_SHOTS_DIR and run on an X display (QT_QPA_PLATFORM=xcb) to take the screenshots");
    return;
  }
  QDir().mkpath(shotsDir());
  // The built-in model completing a repeated sentence: integrated gradients over the input tokens,
  // and an induction head's exact ablation beside its estimate.
  ShotWindow w(QStringLiteral("The cat sat on the mat. The cat sat on the"));
  auto* view = w.window.viewAs<AttributionView>(QStringLiteral("attribution"));
  REQUIRE(view);
  w.window.tabs()->setCurrentWidget(view);
  view->setMethod(hs::InputAttributionMethod::IntegratedGradients);
  REQUIRE(waitFor([&] { return view->isCurrent() && view->result() &&
                               std::static_pointer_cast<const AttributionResult>(view->result())->input.steps > 0; },
                  60000));
  w.window.selection()->setHead(3, 2);
  REQUIRE(waitFor([&] { return view->exactAblation(3, 2).has_value(); }, 30000));
  shoot(QStringLiteral("attribution.png"));
  // The same head's edges, attributed to the same target, in the attention view.
  auto* attention = w.window.viewAs<AttentionView>(QStringLiteral("attention"));
  w.window.tabs()->setCurrentWidget(attention);
  attention->setMode(AttentionView::Mode::EdgeAttribution);
  REQUIRE(waitFor([&] {
    auto r = std::dynamic_pointer_cast<const AttentionPatternResult>(attention->result());
    return r && r->edges && r->run_job == w.run()->job && attention->heatmap()->cells() == r->cells;
  }, 30000));
  shoot(QStringLiteral("attention-edges.png"));
}

TEST_CASE("Screenshot of the Patching view's estimate beside the exact sweep", "[.screenshots]") {
  if (shotsDir().isEmpty()) {
    WARN("set HEADSCOPE_SHOTS_DIR and run on an X display (QT_QPA_PLATFORM=xcb) to take the screenshots");
    return;
  }
  {
    // The README's patching example, as the Patching tab shows it after Run: the exact sweep, and
    // beside it each head's AtP estimate against its exact effect.
    ShotWindow w(QStringLiteral("The vivid walrus juggles seven copper kites near Oslo. The vivid walrus juggles"));
    auto* view = w.window.viewAs<PatchingView>(QStringLiteral("patching"));
    w.window.tabs()->setCurrentWidget(view);
    view->setViewInputs({{PatchingView::kCorrupt,
                          QStringLiteral("The vivid walrus juggles eight copper kites near Oslo. The vivid walrus juggles")},
                         {PatchingView::kAnswer, QStringLiteral(" seven")},
                         {PatchingView::kWrong, QStringLiteral(" eight")}});
    REQUIRE(waitFor([&] { return view->currentEstimate() != nullptr; }, 30000));
    REQUIRE(view->run());
    REQUIRE(waitFor([&] { return view->result() != nullptr; }, 120000));
    REQUIRE(view->method() == hs::PatchMethod::Exact);
    view->setCompareSite(3);
    shoot(QStringLiteral("patching.png"));
  }
  // The README's patching example on the built-in model: the AtP maps, Run for the exact sweep,
  // the scatter of resid_pre with its worst node picked.
  ShotWindow w(QStringLiteral("The vivid walrus juggles seven copper kites near Oslo. The vivid walrus juggles"));
  auto* view = w.window.viewAs<PatchingView>(QStringLiteral("patching"));
  w.window.tabs()->setCurrentWidget(view);
  view->setViewInputs({{PatchingView::kCorrupt,
                        QStringLiteral("The vivid walrus juggles eight copper kites near Oslo. The vivid walrus juggles")},
                       {PatchingView::kAnswer, QStringLiteral(" seven")},
                       {PatchingView::kWrong, QStringLiteral(" eight")}});
  REQUIRE(waitFor([&] { return view->currentEstimate() != nullptr; }, 30000));
  REQUIRE(view->run());
  REQUIRE(waitFor([&] { return view->result() != nullptr; }, 120000));
  view->setMethod(hs::PatchMethod::AtP);
  view->setCompareSite(0);
  REQUIRE_FALSE(view->worstNodes().empty());
  view->pickNode(0, view->worstNodes()[0].first, view->worstNodes()[0].second);
  shoot(QStringLiteral("patching-atp.png"));
}

TEST_CASE("Screenshots of the Graph view", "[.screenshots]") {
  if (shotsDir().isEmpty()) {
    WARN("set HEADSCOPE_SHOTS_DIR and run on an X display (QT_QPA_PLATFORM=xcb) to take the screenshots");
    return;
  }
  LoadedSaes::instance().clear();
  // The built-in model's graph over its own transcoders on a repeated sentence: the most
  // influential feature picked, its strongest paths to the logits drawn thick.
  ShotWindow w(QStringLiteral("The cat sat on the mat. The cat sat on the"));
  auto* view = w.window.viewAs<GraphView>(QStringLiteral("graph"));
  w.window.tabs()->setCurrentWidget(view);
  w.window.loadShippedSaes(QString::fromStdString(hs::builtin_model_dir().string()));
  REQUIRE(waitFor([&] { return view->isCurrent() && view->canvas()->picture() != nullptr; }, 120000));
  const GraphPicture* pic = view->canvas()->picture();
  int best = -1;
  for (size_t i = 0; i < pic->nodes.size(); ++i)
    if (pic->nodes[i].kind == GraphPicture::Kind::Feature &&
        (best < 0 || pic->nodes[i].influence < pic->nodes[static_cast<size_t>(best)].influence))
      best = static_cast<int>(i);
  REQUIRE(best >= 0);
  view->canvas()->selectNode(best);
  shoot(QStringLiteral("graph.png"));

  // The routes mode, and why the head on the strongest attention route attends where it does.
  view->setMode(GraphView::kRoutes);
  REQUIRE(waitFor([&] { return view->isCurrent() && view->canvas()->picture() != pic; }, 60000));
  pic = view->canvas()->picture();
  const GraphPicture::Edge* attention = nullptr;
  for (const auto& e : pic->edges)
    if (e.head >= 0 && e.source != e.target && pic->nodes[static_cast<size_t>(e.source)].pos != pic->nodes[static_cast<size_t>(e.target)].pos &&
        (!attention || e.weight > attention->weight))
      attention = &e;
  REQUIRE(attention);
  view->canvas()->selectNode(attention->target);
  view->traceAttention(attention->layer, attention->head, pic->nodes[static_cast<size_t>(attention->target)].pos,
                       pic->nodes[static_cast<size_t>(attention->source)].pos);
  REQUIRE(waitFor([&] { return view->qkTrace() != nullptr; }, 30000));
  shoot(QStringLiteral("graph-routes.png"));
  LoadedSaes::instance().clear();
}
