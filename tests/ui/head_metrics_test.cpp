// The heads panel's scores: badges with the core's detector scores for the current run, updated
// as the person types; sorting and filtering change the order, never which head a click selects.
#include <catch2/catch.hpp>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QTest>

#include <algorithm>
#include <cmath>

#include "core/analysis/circuits.h"
#include "core/analysis/head_detectors.h"
#include "ui/controller/head_metrics.h"
#include "ui/controller/selection.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/views/head_overview.h"
#include "ui/views/view_text.h"
#include "ui/widgets/color_legend.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/window/main_window.h"
#include "test_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

namespace {

struct MetricsWindow {
  test::ForgetModelMetrics fresh;  // the first test case asks for a Model metric directly
  MainWindow window;
  explicit MetricsWindow(const QString& text, QSize size = QSize(1400, 900))
      : window(MainWindowOptions{test::fixtureModelDir(), text, false}) {
    window.resize(size);
    window.show();
    window.activateWindow();
    REQUIRE(QTest::qWaitForWindowActive(&window));
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  }
  std::shared_ptr<const RunResult> run() const { return window.controller()->currentRun(); }
  ImageGridView* grid() const { return window.headGrid(); }
  HeadMetricsBar* bar() const { return window.headMetricsBar(); }
};

// The core's scores of `detector` on the run's own cache.
hs::RowMatrixXf coreScores(const RunResult& run, hs::HeadDetector detector) {
  return hs::detect_heads(*run.run.cache, detector, run.run.bos_prepended).scores;
}

// Every thumbnail's badge is the core's score, formatted; "—" where there is none.
void checkBadges(const MetricsWindow& w, const QString& id, hs::HeadDetector detector) {
  const auto run = w.run();
  const hs::RowMatrixXf scores = coreScores(*run, detector);
  const int n_head = run->n_head();
  REQUIRE(w.grid()->itemCount() == run->n_layer() * n_head);
  for (int i = 0; i < w.grid()->itemCount(); ++i) {
    const float v = scores(i / n_head, i % n_head);
    INFO(id.toStdString() << " head " << i);
    CHECK(w.grid()->item(i).badge == (std::isnan(v) ? QStringLiteral("—") : QString::number(v, 'f', 2)));
    CHECK(w.grid()->item(i).label == headLabel(i / n_head, i % n_head));
  }
}

}  // namespace

TEST_CASE("Every run carries the registered head metrics, equal to the core's", "[head_metrics]") {
  auto run = AnalysisController::computeRun(test::fixtureModel(), QStringLiteral("The cat sat. The cat sat"));
  // Run metrics always; a Model metric only once it has been asked for (it reads the vocabulary).
  for (const HeadMetric& m : headMetrics())
    CHECK((run->headMetric(m.id) != nullptr) == (m.source == HeadMetric::Source::Run));
  wantModelMetric(QStringLiteral("copying"));
  run = AnalysisController::computeRun(test::fixtureModel(), QStringLiteral("The cat sat. The cat sat"));
  // Every metric but the External ones (a data-set scan hands those over).
  const auto computed = std::count_if(headMetrics().begin(), headMetrics().end(),
                                      [](const HeadMetric& m) { return m.source != HeadMetric::Source::External; });
  REQUIRE(run->head_metrics.size() == static_cast<size_t>(computed));
  REQUIRE(run->headMetric(QStringLiteral("copying")) != nullptr);
  CHECK(run->headMetric(QStringLiteral("copying"))->values == hs::copying_scores(*test::fixtureModel()->weights()));
  const std::pair<const char*, hs::HeadDetector> detectors[] = {{"previous_token", hs::HeadDetector::PreviousToken},
                                                                {"duplicate_token", hs::HeadDetector::DuplicateToken},
                                                                {"induction", hs::HeadDetector::Induction}};
  for (const auto& [id, detector] : detectors) {
    INFO(id);
    const HeadMetricValues* v = run->headMetric(QString::fromLatin1(id));
    REQUIRE(v != nullptr);
    const hs::RowMatrixXf core = coreScores(*run, detector);
    REQUIRE(v->values.rows() == core.rows());
    CHECK(v->values == core);
    CHECK(v->note.contains(QStringLiteral("query positions")));
  }
  CHECK(headMetricText(*findHeadMetric(QStringLiteral("induction")), NAN) == QStringLiteral("—"));
}

TEST_CASE("The head grid's badges show the current run's scores and follow typing", "[head_metrics][window]") {
  MetricsWindow w(QStringLiteral("The cat sat. The cat"));
  REQUIRE(w.bar()->metricId() == QStringLiteral("induction"));  // on by default
  checkBadges(w, QStringLiteral("induction"), hs::HeadDetector::Induction);
  w.bar()->setMetricId(QStringLiteral("previous_token"));
  checkBadges(w, QStringLiteral("previous_token"), hs::HeadDetector::PreviousToken);
  w.bar()->setMetricId(QStringLiteral("duplicate_token"));
  checkBadges(w, QStringLiteral("duplicate_token"), hs::HeadDetector::DuplicateToken);

  // Typing: the next run's scores replace them.
  const auto before = w.run();
  PromptEdit* prompt = w.window.promptEdit();
  prompt->setFocus();
  prompt->moveCursor(QTextCursor::End);
  QTest::keyClicks(prompt, QStringLiteral(" sat"));
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.text == "The cat sat. The cat sat"; }));
  REQUIRE(w.run() != before);
  checkBadges(w, QStringLiteral("duplicate_token"), hs::HeadDetector::DuplicateToken);

  // The tooltip of a head gives every score.
  const QString tip = w.grid()->tooltipFor(5);
  const auto run = w.run();
  for (const HeadMetric& m : headMetrics()) {
    if (m.source != HeadMetric::Source::Run) continue;  // not asked for in this window
    CHECK(tip.contains(QStringLiteral("%1: %2").arg(m.name, headMetricText(m, run->headMetric(m.id)->values(1, 1)))));
  }
  CHECK(!tip.contains(QStringLiteral("OV copying")));
  CHECK(tip.startsWith(QStringLiteral("L1H1")));

  // No badges at all.
  w.bar()->setMetricId(QString());
  CHECK(w.grid()->item(0).badge.isEmpty());
  CHECK_FALSE(w.bar()->legend()->isVisible());
}

TEST_CASE("A prompt without repeats shows no duplicate or induction score, and says why", "[head_metrics][window]") {
  MetricsWindow w(QStringLiteral("The cat"));
  for (int i = 0; i < w.grid()->itemCount(); ++i) CHECK(w.grid()->item(i).badge == QStringLiteral("—"));
  CHECK(w.bar()->noteLabel()->text().contains(QStringLiteral("no score")));
  w.bar()->setMetricId(QStringLiteral("previous_token"));
  CHECK(w.grid()->item(0).badge != QStringLiteral("—"));
  // Filtering by a score nobody has leaves every cell empty, and clicking one selects nothing.
  w.bar()->setMetricId(QStringLiteral("induction"));
  w.bar()->setThreshold(0.0f);
  for (int i = 0; i < w.grid()->itemCount(); ++i) CHECK(w.grid()->itemRect(i).isEmpty());
}

TEST_CASE("Sorting and filtering by a score reorder the grid, and a click still selects the head it shows",
          "[head_metrics][window]") {
  MetricsWindow w(QStringLiteral("The cat sat on the mat. The cat sat on"));
  const auto run = w.run();
  const int n_head = run->n_head(), n = run->n_layer() * n_head;
  const hs::RowMatrixXf scores = coreScores(*run, hs::HeadDetector::Induction);
  ImageGridView* grid = w.grid();

  w.bar()->setSorted(true);
  const std::vector<int> order = grid->displayOrder();
  REQUIRE(static_cast<int>(order.size()) == n);
  for (size_t s = 1; s < order.size(); ++s) CHECK(scores.data()[order[s - 1]] >= scores.data()[order[s]]);
  CHECK(order != std::vector<int>([n] {
          std::vector<int> identity(static_cast<size_t>(n));
          for (int i = 0; i < n; ++i) identity[static_cast<size_t>(i)] = i;
          return identity;
        }()));  // the fixture's scores are not already in layer order
  // The best head is drawn first (top left) and keeps its label; clicking there selects it.
  const int best = order.front();
  CHECK(grid->slotOf(best) == 0);
  CHECK(grid->item(best).label == headLabel(best / n_head, best % n_head));
  for (int s : {0, n - 1, n / 2}) {
    const int index = order[static_cast<size_t>(s)];
    QTest::mouseClick(grid, Qt::LeftButton, Qt::NoModifier, grid->itemRect(index).center());
    INFO("slot " << s << " head " << index);
    CHECK(w.window.selection()->layer() == index / n_head);
    CHECK(w.window.selection()->head() == index % n_head);
    CHECK(grid->selectedIndex() == index);
  }
  // Sorted rows are ranks, not layers.
  CHECK(grid->indexAt(grid->itemRect(order[1]).center()) == order[1]);

  // Only the heads at or above the threshold, highest first.
  const float threshold = scores.maxCoeff() * 0.5f;
  w.bar()->setThreshold(threshold);
  const std::vector<int> kept = grid->displayOrder();
  REQUIRE(!kept.empty());
  CHECK(static_cast<int>(kept.size()) < n);
  for (int index : kept) CHECK(scores.data()[index] >= threshold);
  for (int i = 0; i < n; ++i)
    if (scores.data()[i] < threshold) CHECK(grid->itemRect(i).isEmpty());
  CHECK(w.bar()->noteLabel()->text().contains(QStringLiteral("%1 of %2 heads").arg(kept.size()).arg(n)));

  // Filtered in place (not sorted): kept heads stay in their layer/head cells.
  w.bar()->setSorted(false);
  const std::vector<int> in_place = grid->displayOrder();
  REQUIRE(static_cast<int>(in_place.size()) == n);
  for (int i = 0; i < n; ++i) CHECK(in_place[static_cast<size_t>(i)] == (scores.data()[i] >= threshold ? i : -1));
  const int shown = kept.back();
  QTest::mouseClick(grid, Qt::LeftButton, Qt::NoModifier, grid->itemRect(shown).center());
  CHECK(w.window.selection()->layer() == shown / n_head);
  CHECK(w.window.selection()->head() == shown % n_head);

  // Keys still walk every head in layer order, shown or not.
  w.bar()->setThreshold(std::nullopt);
  CHECK_FALSE(grid->hasDisplayOrder());
}

TEST_CASE("Values handed to the panel from elsewhere replace the run's for that metric", "[head_metrics][window]") {
  MetricsWindow w(QStringLiteral("The cat sat. The cat"));
  const auto run = w.run();
  HeadMetricValues external{QStringLiteral("induction"), hs::RowMatrixXf::Constant(run->n_layer(), run->n_head(), 0.25f),
                            QStringLiteral("mean over 100 prompts"), {}};
  external.values(1, 3) = 0.75f;
  w.bar()->setExternalValues(external);
  CHECK(w.grid()->item(0).badge == QStringLiteral("0.25"));
  CHECK(w.grid()->item(run->n_head() + 3).badge == QStringLiteral("0.75"));
  CHECK(w.bar()->noteLabel()->text() == QStringLiteral("mean over 100 prompts"));
  // They stay through the next run.
  w.window.promptEdit()->setPlainText(QStringLiteral("The cat sat. The cat sat"));
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.text == "The cat sat. The cat sat"; }));
  CHECK(w.grid()->item(0).badge == QStringLiteral("0.25"));
  // Values of another shape show as no score; clearing brings the run's back.
  w.bar()->setExternalValues({QStringLiteral("induction"), hs::RowMatrixXf::Zero(1, 1), {}, {}});
  CHECK(w.grid()->item(0).badge == QStringLiteral("—"));
  w.bar()->clearExternalValues(QStringLiteral("induction"));
  checkBadges(w, QStringLiteral("induction"), hs::HeadDetector::Induction);
  // Ids nobody registered are ignored.
  w.bar()->setExternalValues({QStringLiteral("no_such_metric"), hs::RowMatrixXf::Zero(2, 4), {}, {}});
  CHECK(w.bar()->metricCombo()->findData(QStringLiteral("no_such_metric")) < 0);
}

TEST_CASE("The heads panel's controls fit at 1280 x 800 and 1600 x 1000", "[head_metrics][window]") {
  for (QSize size : {QSize(1280, 800), QSize(1600, 1000)}) {
    MetricsWindow w(QStringLiteral("The cat sat. The cat"), size);
    INFO(size.width() << " x " << size.height());
    HeadMetricsBar* bar = w.bar();
    for (QWidget* control : std::initializer_list<QWidget*>{bar->metricCombo(), bar->sortCheck(), bar->filterCheck(),
                                                            bar->thresholdSpin()}) {
      INFO(control->objectName().toStdString());
      CHECK(control->isVisible());
      // Entirely inside the panel, and at least as wide as it asks.
      const QRect in_panel(control->mapTo(bar, QPoint(0, 0)), control->size());
      CHECK(bar->rect().contains(in_panel));
      CHECK(control->width() >= control->minimumSizeHint().width());
    }
    // Every thumbnail is inside the grid's widget.
    const QRect last = w.grid()->itemRect(w.grid()->itemCount() - 1);
    CHECK(w.grid()->rect().contains(last));
  }
}

TEST_CASE("Showing the OV copying score computes it once, with a run", "[head_metrics][window]") {
  MetricsWindow w(QStringLiteral("The cat sat. The cat"));
  const auto first = w.run();
  CHECK(first->headMetric(QStringLiteral("copying")) == nullptr);  // not computed while not shown
  w.bar()->setMetricId(QStringLiteral("copying"));
  REQUIRE(waitFor([&] { return w.run() != first && w.run()->headMetric(QStringLiteral("copying")) != nullptr; }));
  const hs::RowMatrixXf core = hs::copying_scores(*w.run()->model().weights());
  CHECK(w.run()->headMetric(QStringLiteral("copying"))->values == core);
  const HeadMetric& m = *findHeadMetric(QStringLiteral("copying"));
  CHECK(w.grid()->item(5).badge == headMetricText(m, core(5 / w.run()->n_head(), 5 % w.run()->n_head())));
}
