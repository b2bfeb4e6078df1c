// The Attribution view and the attention view's edge mode in the window: they draw the core's
// numbers for the run on screen, never a result of an earlier prompt, a clicked head's exact
// ablation is the model's own, and their figures export.
#include <catch2/catch.hpp>

#include <QDir>
#include <QLabel>
#include <QRadioButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTest>

#include <cmath>

#include "core/analysis/attribution.h"
#include "core/analysis/attribution_data.h"
#include "core/model/backward.h"
#include "core/model/intervention.h"
#include "core/model/model.h"
#include "ui/controller/selection.h"
#include "ui/views/attention_view.h"
#include "ui/views/attribution_view.h"
#include "ui/views/view_text.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/window/export_all.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::clickCell;
using hs::ui::test::waitFor;

namespace {

struct AttributionWindow {
  MainWindow window;
  explicit AttributionWindow(const QString& text = QStringLiteral("The cat sat on the mat. The cat"))
      : window(MainWindowOptions{test::fixtureModelDir(), text, false}) {
    window.resize(1400, 900);
    window.show();
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
    window.tabs()->setCurrentWidget(view());
  }
  std::shared_ptr<const RunResult> run() const { return window.controller()->currentRun(); }
  Selection* selection() const { return window.selection(); }
  AttributionView* view() const { return window.viewAs<AttributionView>(QStringLiteral("attribution")); }
  AttentionView* attention() const { return window.viewAs<AttentionView>(QStringLiteral("attention")); }
  std::shared_ptr<const AttributionResult> result() const {
    return std::dynamic_pointer_cast<const AttributionResult>(view()->result());
  }
  bool current() const { return view()->isCurrent(); }
};

// The tolerance of the float32 pipeline drawn against itself: the view shows the core's numbers,
// so they agree to float rounding (the core is held to the float64 reference in tests/core).
void checkClose(double shown, double expected) {
  CHECK(std::abs(shown - expected) <= 1e-6 * std::max(1.0, std::abs(expected)));
}

}  // namespace

TEST_CASE("The Attribution view draws the core's attributions for the run on screen", "[window][attribution]") {
  AttributionWindow w;
  REQUIRE(waitFor([&] { return w.current(); }));
  const auto run = w.run();
  const hs::ActivationCache& cache = *run->run.cache;
  const hs::TargetMetric t = hs::target_metric(cache, run->n_pos() - 1, std::nullopt, std::nullopt);
  CHECK(t.target == run->next.front().id);  // no target: the prediction after the last token
  CHECK(t.metric.kind == hs::MetricKind::Logit);
  const hs::InputAttribution gxi = hs::input_attribution(cache, t.metric, hs::InputAttributionMethod::GradXInput);
  hs::GradOptions keep;
  keep.keep = hs::component_gradient_hooks();
  const hs::ComponentAttribution comp = hs::component_attribution(cache, hs::backward(cache, t.metric, keep));

  BarChartView* tokens = w.view()->tokenBars();
  REQUIRE(tokens->barCount() == run->n_pos());
  for (int p = 0; p < run->n_pos(); ++p) {
    INFO("position " << p);
    checkClose(tokens->plottedValue(p), gxi.attributions[static_cast<size_t>(p)]);
  }
  CHECK(tokens->plottedValue(0) == 0.0);
  HeatmapView* heads = w.view()->headHeatmap();
  REQUIRE(heads->rowCount() == run->n_layer());
  REQUIRE(heads->columnCount() == run->n_head());
  for (int l = 0; l < run->n_layer(); ++l)
    for (int h = 0; h < run->n_head(); ++h) checkClose(heads->plottedValue(l, h), comp.heads(l, h));
  CHECK(heads->rangeLower() == -heads->rangeUpper());  // a signed scale, symmetric around 0
  REQUIRE(w.view()->mlpBars()->barCount() == run->n_layer());
  for (int l = 0; l < run->n_layer(); ++l) checkClose(w.view()->mlpBars()->plottedValue(l), comp.mlp_layers(l));
  const auto top = hs::top_neurons(comp.neurons, AttributionView::kTopNeurons);
  REQUIRE(w.view()->neuronTable()->rowCount() == static_cast<int>(top.size()));
  CHECK(w.view()->neuronTable()->item(0, 1)->text() == QString::number(top[0].neuron));
  CHECK(w.view()->titleText().contains(formatNumber(t.value)));
  CHECK(w.view()->titleText().contains(tokenText(*run, t.target).toHtmlEscaped()));
  CHECK(w.view()->completenessText().contains(formatSigned(gxi.completeness_error)));

  // Integrated gradients with 8 steps: the core's numbers, and a completeness error beside them.
  w.view()->setSteps(8);
  w.view()->setMethod(hs::InputAttributionMethod::IntegratedGradients);
  REQUIRE(waitFor([&] { return w.current() && w.result()->input.steps == 8; }));
  const hs::InputAttribution ig =
      hs::input_attribution(cache, t.metric, hs::InputAttributionMethod::IntegratedGradients, 8);
  for (int p = 0; p < run->n_pos(); ++p) checkClose(tokens->plottedValue(p), ig.attributions[static_cast<size_t>(p)]);
  CHECK(w.view()->completenessText().contains(formatSigned(ig.completeness_error)));
  CHECK(tokens->figureText().title.contains(QStringLiteral("integrated gradients, 8 steps")));
  // More steps: a new key, a new result (the spin box is part of the key).
  w.view()->setSteps(16);
  REQUIRE(waitFor([&] { return w.current() && w.result()->input.steps == 16; }));
}

TEST_CASE("The Attribution view explains a logit difference against a second token", "[window][attribution]") {
  AttributionWindow w;
  REQUIRE(waitFor([&] { return w.current(); }));
  const auto run = w.run();
  const int32_t target = run->next[0].id, versus = run->next[1].id;
  w.selection()->setTarget(target);
  w.selection()->setVersus(versus);
  REQUIRE(waitFor([&] { return w.current() && w.result()->target.versus == versus; }));
  const hs::ActivationCache& cache = *run->run.cache;
  const int last = run->n_pos() - 1;
  checkClose(w.result()->target.value, double{cache.logits(last, target)} - double{cache.logits(last, versus)});
  CHECK(w.view()->titleText().contains(QStringLiteral("logit(%1) − logit(%2)")
                                           .arg(tokenText(*run, target), tokenText(*run, versus))
                                           .toHtmlEscaped()));
  // The same target as its own second token is refused with a message, in the view.
  w.selection()->setVersus(target);
  REQUIRE(waitFor([&] { return w.view()->statusText().contains(QStringLiteral("second token is the target")); }));
}

TEST_CASE("The Attribution view never shows an earlier prompt's result as the current one", "[window][attribution]") {
  AttributionWindow w;
  REQUIRE(waitFor([&] { return w.current(); }));
  const auto first = w.result();
  const quint64 first_job = w.run()->job;
  w.window.promptEdit()->setPlainText(QStringLiteral("The dog ran to the park. The dog"));
  REQUIRE(waitFor([&] { return w.run()->job != first_job; }));
  // The moment the new run is on screen, the view says the drawing is the previous prompt's.
  if (!w.current()) CHECK(w.view()->statusText().contains(QStringLiteral("previous prompt")));
  REQUIRE(waitFor([&] { return w.current(); }));
  CHECK(w.result()->run->run.tokens == w.run()->run.tokens);
  CHECK(w.result()->plain == w.run()->run.cache);
  // A late answer for the earlier run is dropped.
  w.view()->setResult(first);
  CHECK(w.result()->run_job == w.run()->job);
  CHECK(w.view()->tokenBars()->barCount() == w.run()->n_pos());
}

TEST_CASE("Clicking a head in the Attribution view runs its exact zero ablation", "[window][attribution]") {
  AttributionWindow w;
  REQUIRE(waitFor([&] { return w.current(); }));
  const auto run = w.run();
  const int layer = 1, head = 2;
  clickCell(w.view()->headHeatmap(), layer, head);
  CHECK(w.selection()->layer() == layer);
  CHECK(w.selection()->head() == head);
  REQUIRE(waitFor([&] { return w.view()->exactAblation(layer, head).has_value(); }));
  // The model run with that head's z zeroed, read here without the view's code.
  hs::RunOptions options;
  options.interventions = {hs::zero_ablation(layer, head)};
  const auto ablated = run->model().run(run->run.tokens, options);
  const int last = run->n_pos() - 1;
  const int32_t target = w.result()->target.target;
  const double exact = double{ablated->logits(last, target)} - double{run->run.cache->logits(last, target)};
  checkClose(*w.view()->exactAblation(layer, head), exact);
  CHECK(w.view()->ablationText().contains(formatSigned(exact)));
  CHECK(w.view()->ablationText().contains(formatSigned(w.result()->components.heads(layer, head))));
}

TEST_CASE("The attention view's edge mode shows A times dM/dA for the selected head", "[window][attribution]") {
  AttributionWindow w;
  w.window.tabs()->setCurrentWidget(w.attention());
  w.selection()->setHead(1, 3);
  w.attention()->edgeButton()->click();
  HeatmapView* heatmap = w.attention()->heatmap();
  auto edgesShown = [&] {
    auto r = std::dynamic_pointer_cast<const AttentionPatternResult>(w.attention()->result());
    return r && r->edges && r->run_job == w.run()->job && heatmap->cells() == r->cells;
  };
  REQUIRE(waitFor(edgesShown));
  const auto run = w.run();
  const hs::ActivationCache& cache = *run->run.cache;
  const hs::TargetMetric t = hs::target_metric(cache, run->n_pos() - 1, std::nullopt, std::nullopt);
  hs::GradOptions keep;
  keep.keep = {hs::HookPoint::Pattern};
  const hs::RowMatrixXf edges = hs::attention_edge_attribution(cache, hs::backward(cache, t.metric, keep), 1, 3);
  for (int q = 0; q < run->n_pos(); ++q)
    for (int k = 0; k < run->n_pos(); ++k) {
      INFO("query " << q << " key " << k);
      if (k > q) CHECK(std::isnan(heatmap->plottedValue(q, k)));
      else checkClose(heatmap->plottedValue(q, k), edges(q, k));
    }
  CHECK(heatmap->rangeLower() == -heatmap->rangeUpper());
  CHECK(heatmap->figureText().title.contains(QStringLiteral("edge attribution")));
  CHECK(heatmap->figureText().title.contains(tokenText(*run, t.target)));
  // Another target: other edges, and the caption names it.
  const int32_t other = run->next[1].id;
  w.selection()->setTarget(other);
  REQUIRE(waitFor([&] {
    auto r = std::dynamic_pointer_cast<const AttentionPatternResult>(w.attention()->result());
    return edgesShown() && r->target.target == other;
  }));
  CHECK(heatmap->figureText().title.contains(tokenText(*run, other)));
  // Back to the pattern: the fixed [0, 1] scale.
  w.attention()->setMode(AttentionView::Mode::Pattern);
  REQUIRE(waitFor([&] { return heatmap->rangeUpper() == 1.0; }));
  CHECK(heatmap->plottedValue(0, 0) == 1.0);
}

TEST_CASE("Export All writes the Attribution view's figures and the selected head's edges", "[window][attribution][export]") {
  AttributionWindow w;
  REQUIRE(waitFor([&] { return w.current(); }));
  QTemporaryDir tmp;
  ExportAllJob::Options options;
  options.out_dir = tmp.filePath(QStringLiteral("out"));
  options.layer = 1;
  options.head = 0;
  options.view_inputs[QStringLiteral("attribution")] = {{AttributionView::kMethod, QStringLiteral("integrated_gradients")},
                                                        {AttributionView::kSteps, 4}};
  ExportAllJob job(w.run(), options);
  bool finished = false, ok = false;
  QString message;
  QObject::connect(&job, &ExportAllJob::finished, [&](bool success, const QString& m) {
    finished = true;
    ok = success;
    message = m;
  });
  job.start();
  REQUIRE(waitFor([&] { return finished; }, 60000));
  INFO(message.toStdString());
  REQUIRE(ok);
  const QStringList files = QDir(options.out_dir).entryList({QStringLiteral("*.png")}, QDir::Files);
  for (const QString& f : {QStringLiteral("attribution_tokens_integrated_gradients.png"), QStringLiteral("attribution_heads.png"),
                           QStringLiteral("attribution_mlp.png"), QStringLiteral("attribution.png"),
                           QStringLiteral("attention_edges_L1H0.png")}) {
    INFO(f.toStdString());
    CHECK(files.contains(f));
    CHECK(!QImage(QDir(options.out_dir).filePath(f)).isNull());
  }
}

TEST_CASE("The Attribution view fits beside the heads panel in a 1280-pixel window", "[window][attribution]") {
  AttributionWindow w;
  REQUIRE(waitFor([&] { return w.current(); }));
  INFO("minimum width " << w.view()->minimumSizeHint().width());
  CHECK(w.view()->minimumSizeHint().width() <= 900);
}

TEST_CASE("A newer request supersedes an integrated-gradients job in flight, which stops", "[attribution][controller]") {
  QElapsedTimer clock;
  {
    AnalysisController c;
    test::addViewAnalyses(c);
    c.setModel(test::fixtureModel());
    QSignalSpy ready(&c, &AnalysisController::runReady);
    c.requestRun(QStringLiteral("The cat sat on the mat. The cat"));
    REQUIRE(waitFor([&] { return ready.count() == 1; }));
    test::AnalysisSpy spy(&c, QStringLiteral("attribution"));
    const int last = c.currentRun()->n_pos() - 1;
    AnalysisKey slow{-1, -1, last};
    slow.params = {QStringLiteral("integrated_gradients"), QStringLiteral("100000")};  // minutes, unless stopped
    AnalysisKey quick{-1, -1, last};
    quick.params = {QStringLiteral("grad_x_input"), QStringLiteral("0")};
    clock.start();
    c.request(QStringLiteral("attribution"), slow);
    QTest::qWait(50);
    c.request(QStringLiteral("attribution"), quick);
    REQUIRE(waitFor([&] { return spy.count() == 1; }, 60000));
    CHECK(spy.at<AttributionResult>(0)->key == quick);
    QTest::qWait(100);
    CHECK(spy.count() == 1);  // the superseded job delivers nothing
  }
  // The controller's destructor waits for its workers: it returns long before 100000 steps could
  // run, because the superseded job stopped between passes.
  CHECK(clock.elapsed() < 20000);
}

TEST_CASE("The Attribution view draws the core's numbers for a Llama model with key/value heads", "[window][attribution]") {
  MainWindow window(MainWindowOptions{.model_dir = QStringLiteral(HEADSCOPE_SOURCE_DIR "/tests/fixtures/models/llama_gqa"),
                                      .text = QStringLiteral("The cat sat on the mat. The cat"),
                                      .restore_settings = false,
                                      .view = QStringLiteral("attribution")});
  window.resize(1400, 900);
  window.show();
  auto* view = window.viewAs<AttributionView>(QStringLiteral("attribution"));
  REQUIRE(waitFor([&] { return window.controller()->currentRun() && view->isCurrent(); }, 30000));
  const auto run = window.controller()->currentRun();
  const hs::ActivationCache& cache = *run->run.cache;
  REQUIRE(cache.config().n_key_value_heads < cache.config().n_heads);
  const hs::TargetMetric t = hs::target_metric(cache, run->n_pos() - 1, std::nullopt, std::nullopt);
  const hs::InputAttribution gxi = hs::input_attribution(cache, t.metric, hs::InputAttributionMethod::GradXInput);
  hs::GradOptions keep;
  keep.keep = hs::component_gradient_hooks();
  const hs::ComponentAttribution comp = hs::component_attribution(cache, hs::backward(cache, t.metric, keep));
  for (int p = 0; p < run->n_pos(); ++p) checkClose(view->tokenBars()->plottedValue(p), gxi.attributions[static_cast<size_t>(p)]);
  for (int l = 0; l < run->n_layer(); ++l)
    for (int h = 0; h < run->n_head(); ++h) checkClose(view->headHeatmap()->plottedValue(l, h), comp.heads(l, h));
}
