// Heads over Data: a scan that describes each head (core/analysis/head_dataset.h), opened with
// File > Open Scan Results or made with File > Scan Data Set, shown as a scatter of every head
// and the selected head's dashboard; never as the loaded model's when another model made it.
#include <catch2/catch.hpp>

#include <QAction>
#include <QApplication>
#include <QLabel>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QSettings>
#include <QTabWidget>
#include <QTableWidget>
#include <QTest>
#include <QTimer>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/analysis/scan.h"
#include "core/io/scan_io.h"
#include "core/model/model.h"
#include "ui/controller/selection.h"
#include "ui/views/head_dataset_view.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/widgets/scatter_view.h"
#include "ui/widgets/shaded_token_rows.h"
#include "ui/window/scan_dialog.h"
#include "test_window.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

namespace {

// A scan of repeated random tokens with heads: BOS + R + R, |R| = 11 (the fixture's context is 24).
hs::ScanState headsScan(int64_t stop_after = -1) {
  const auto model = test::fixtureModel();
  hs::ScanOptions o;
  o.repeat_random = 11;
  o.limit = 20;
  o.heads = true;
  hs::ScanState state = hs::new_scan_state(*model, o, hs::scan_settings(*model, o));
  hs::ScanControl control;
  control.stop_after = stop_after;
  hs::run_scan(*model, o, state, control);
  return state;
}

std::filesystem::path writeScan(const hs::ScanState& state, const std::string& name) {
  const auto path = hs::test::scratch_dir() / name;
  hs::write_scan_output(state, path);
  return path;
}

HeadDatasetView* showView(test::Window& w) {
  auto* view = w.window.viewAs<HeadDatasetView>(QStringLiteral("head_data"));
  REQUIRE(view != nullptr);
  w.window.tabs()->setCurrentWidget(view);
  return view;
}

// Opens `path` with File > Open Scan Results (without its file dialog) and waits for the result.
void openScan(test::Window& w, const std::filesystem::path& path) {
  bool shown = false;
  QObject::connect(&w.window, &MainWindow::scanResultsShown, &w.window, [&] { shown = true; });
  w.window.openScanResultsFile(QString::fromStdString(path.string()));
  REQUIRE(waitFor([&] { return shown; }, 30000));
}

}  // namespace

TEST_CASE("Heads over Data shows an opened scan: a point per head, and clicking one selects it", "[head_data][scan]") {
  const hs::ScanState state = headsScan();
  REQUIRE(!state.heads.empty());
  const auto path = writeScan(state, "heads_scan.json");
  test::Window w(QStringLiteral("The cat sat. The cat"));
  HeadDatasetView* view = showView(w);
  CHECK_FALSE(view->showsScan());
  CHECK(view->emptyMessage().contains(QStringLiteral("Scan Data Set")));
  CHECK(view->emptyMessage().contains(QStringLiteral("--heads")));

  openScan(w, path);
  REQUIRE(view->showsScan());
  const int L = state.n_layers, H = state.n_heads;
  ScatterView* scatter = view->scatter();
  REQUIRE(scatter->pointCount() == L * H);
  CHECK_FALSE(scatter->diagonalShown());
  // The default axes: the data set's mean previous-token and induction scores, as the scan has them.
  CHECK(view->xAxis() == QStringLiteral("previous_token"));
  CHECK(view->yAxis() == QStringLiteral("induction"));
  for (int i = 0; i < scatter->pointCount(); ++i) {
    const auto [l, h] = view->pointHead(i);
    CHECK(scatter->point(i).x == state.grids.at("previous_token").mean(l, h));
    CHECK(scatter->point(i).y == state.grids.at("induction").mean(l, h));
    CHECK(scatter->point(i).group == l);
  }
  // The head metrics went to the heads panel as a finished scan's do.
  CHECK(w.window.headMetricsBar()->metricId() == QStringLiteral("induction_dataset"));
  REQUIRE(w.window.headMetricsBar()->currentValues() != nullptr);

  // Axes of the head descriptions: mean distance against mean output norm.
  view->setAxes(QStringLiteral("mean_distance"), QStringLiteral("output_norm"));
  REQUIRE(scatter->pointCount() == L * H);
  for (int i = 0; i < scatter->pointCount(); ++i) {
    const auto [l, h] = view->pointHead(i);
    CHECK(scatter->point(i).x == state.heads.mean_distance(l, h));
    CHECK(scatter->point(i).y == state.heads.mean_output_norm(l, h));
  }

  // Click a point: the window's selection follows, and the dashboard shows that head.
  scatter->replotNow();
  QWidget* plot = scatter->findChild<QWidget*>(QStringLiteral("scatterPlot"));
  REQUIRE(plot != nullptr);
  const int pick = scatter->pointCount() - 1;  // L1H3
  QTest::mouseClick(plot, Qt::LeftButton, Qt::NoModifier, plot->mapFrom(scatter, scatter->pointCenter(pick)));
  REQUIRE(scatter->highlighted() >= 0);  // points can overlap: whichever was hit is selected
  const auto [layer, head] = view->pointHead(scatter->highlighted());
  CHECK(w.window.selection()->layer() == layer);
  CHECK(w.window.selection()->head() == head);
  const QString label = QStringLiteral("L%1H%2").arg(layer).arg(head);
  CHECK(view->headLabelWidget()->text().contains(label));

  // Its distance bars are the scan's profile, d = 0 up to the last distance with mass.
  const std::vector<double> profile = state.heads.distance_profile(layer, head);
  int last = 0;
  for (int d = 0; d < static_cast<int>(profile.size()); ++d)
    if (profile[static_cast<size_t>(d)] > 0.0) last = d;
  BarChartView* bars = view->distanceBars();
  REQUIRE(bars->barCount() == last + 1);
  for (int d = 0; d <= last; ++d) {
    CHECK(bars->bar(d).value == profile[static_cast<size_t>(d)]);
    CHECK(bars->plottedValue(d) == profile[static_cast<size_t>(d)]);
  }
  CHECK(view->entropyBars()->barCount() == hs::HeadDatasetStats::kEntropyBins);
  // Tokens and examples of that head.
  const auto keys = state.heads.key_tokens(layer, head, HeadDatasetView::kTopTokens);
  REQUIRE(view->keyTable()->rowCount() == static_cast<int>(keys.size()));
  CHECK(view->keyTable()->item(0, 2)->text() == QString::number(keys[0].count));
  CHECK(view->queryTable()->rowCount() > 0);
  REQUIRE(view->examples()->rowCount() > 0);
  const ShadedTokenRows::Row& row = view->examples()->row(0);
  CHECK(row.outlined == row.tokens.size() - 1);
  CHECK(row.label.startsWith(QStringLiteral("D1")));

  // Selecting a head elsewhere (the head grid, the arrow keys) moves the ring and the dashboard.
  w.window.selection()->setHead(0, 1);
  CHECK(view->pointHead(scatter->highlighted()) == std::pair<int, int>{0, 1});
  CHECK(view->headLabelWidget()->text().contains(QStringLiteral("L0H1")));

  // It exports: one figure of the view as shown, and Export All gets the scan.
  CHECK(view->exportFigures(*w.run()).size() == 1);
  CHECK(w.window.exportAllOptions(QStringLiteral("/tmp/x")).scan == w.window.dataSetScan());
}

TEST_CASE("Heads over Data says a scan is partial", "[head_data][scan]") {
  const hs::ScanState state = headsScan(5);
  REQUIRE_FALSE(state.complete);
  const auto path = writeScan(state, "heads_scan_partial.json");
  test::Window w(QStringLiteral("The cat sat. The cat"));
  HeadDatasetView* view = showView(w);
  openScan(w, path);
  REQUIRE(view->showsScan());
  CHECK(view->titleLabel()->text().contains(QStringLiteral("partial scan")));
  CHECK(view->figureText().subtitle.contains(QStringLiteral("partial scan")));
}

TEST_CASE("A scan made with another model is not shown as the loaded model's", "[head_data][scan]") {
  const auto path = writeScan(headsScan(), "heads_scan_other.json");
  // The same file, said to be of other weights.
  nlohmann::json j;
  {
    std::ifstream in(path);
    in >> j;
  }
  j["settings"]["model"]["fingerprint"] = "0123456789abcdef";
  j["settings"]["model"]["name"] = "some-other-model";
  const auto other = hs::test::scratch_dir() / "heads_scan_other_model.json";
  {
    std::ofstream out(other);
    out << j.dump();
  }
  test::Window w(QStringLiteral("The cat sat. The cat"));
  HeadDatasetView* view = showView(w);
  openScan(w, other);
  // Kept, marked as the other model's: nothing of it on this model's views or head grid.
  REQUIRE(w.window.dataSetScan() != nullptr);
  CHECK_FALSE(view->showsScan());
  CHECK(view->emptyMessage().contains(QStringLiteral("some-other-model")));
  CHECK(view->emptyMessage().contains(QString::fromStdString(w.run()->model().name())));
  CHECK(view->scatter()->pointCount() == 0);
  CHECK(view->exportFigures(*w.run()).empty());
  CHECK(view->exportSkipReason(*w.run()).contains(QStringLiteral("another model")));
  CHECK(w.window.headMetricsBar()->currentValues() == nullptr);
  CHECK(w.window.headMetricsBar()->noteLabel()->text().contains(QStringLiteral("another model")));
}

TEST_CASE("Scan results that cannot be read give a message and leave the window as it was", "[head_data][scan]") {
  const auto broken = hs::test::scratch_dir() / "heads_scan_broken.json";
  {
    std::ofstream out(broken);
    out << "{\"settings\": {\"format\": \"headscope-scan\"";  // cut short
  }
  test::Window w(QStringLiteral("The cat sat. The cat"));
  HeadDatasetView* view = showView(w);
  QString failed, boxed;
  QObject::connect(&w.window, &MainWindow::scanResultsFailed, &w.window, [&](const QString& m) { failed = m; });
  QTimer watcher;
  QObject::connect(&watcher, &QTimer::timeout, [&] {
    if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
      boxed = box->text();
      box->close();
    }
  });
  watcher.start(20);
  for (const auto& path : {broken, hs::test::scratch_dir() / "no_such_scan.json"}) {
    failed.clear();
    boxed.clear();
    w.window.openScanResultsFile(QString::fromStdString(path.string()));
    REQUIRE(waitFor([&] { return !boxed.isEmpty(); }));
    CHECK(boxed == failed);
    CHECK(boxed.contains(QString::fromStdString(path.filename().string())));
  }
  CHECK(w.window.dataSetScan() == nullptr);
  CHECK_FALSE(view->showsScan());
  CHECK(w.window.headMetricsBar()->metricId() == QStringLiteral("induction"));
  // Still usable: a new prompt runs, and a good file opens.
  const quint64 before = w.run()->job;
  w.window.promptEdit()->setPlainText(QStringLiteral("A dog ran. A dog"));
  REQUIRE(waitFor([&] { return w.run()->job != before; }));
  openScan(w, writeScan(headsScan(), "heads_scan_after_broken.json"));
  CHECK(view->showsScan());
}

TEST_CASE("File > Scan Data Set with Describe each head fills Heads over Data", "[head_data][scan][window]") {
  QSettings().remove(QStringLiteral("scan/heads"));
  {
    ScanDialog dialog(24);
    CHECK(dialog.options().heads);  // on by default
    dialog.setDescribeHeads(false);
    CHECK_FALSE(dialog.options().heads);
  }
  test::Window w(QStringLiteral("The cat sat. The cat"));
  HeadDatasetView* view = showView(w);
  bool filled = false;
  QTimer::singleShot(0, &w.window, [&] {
    if (auto* dialog = qobject_cast<ScanDialog*>(QApplication::activeModalWidget())) {
      dialog->setRepeatRandom(11);
      dialog->setLimit(12);
      dialog->setDescribeHeads(true);
      filled = true;
      dialog->accept();
    }
  });
  w.window.findChild<QAction*>(QStringLiteral("actionScanDataSet"))->trigger();
  REQUIRE(filled);
  REQUIRE(waitFor([&] { return w.window.dataSetScan() != nullptr; }, 60000));
  CHECK(w.window.dataSetScan()->state->prompts == 12);
  REQUIRE(view->showsScan());
  CHECK(view->scatter()->pointCount() == w.run()->n_layer() * w.run()->n_head());
  CHECK(view->titleLabel()->text().contains(QStringLiteral("repeated random tokens")));
}

TEST_CASE("The OV copying axis is the heads panel's copying score, asked for when chosen", "[head_data][scan]") {
  const auto path = writeScan(headsScan(), "heads_scan_copying.json");
  test::Window w(QStringLiteral("The cat sat. The cat"));
  HeadDatasetView* view = showView(w);
  openScan(w, path);
  REQUIRE(view->showsScan());
  view->setAxes(QStringLiteral("copying"), QStringLiteral("induction"));
  // The Model metric comes with the run the view asked for.
  REQUIRE(waitFor([&] { return w.run()->headMetric(QStringLiteral("copying")) != nullptr; }, 30000));
  const HeadMetricValues* copying = w.run()->headMetric(QStringLiteral("copying"));
  REQUIRE(waitFor([&] { return view->scatter()->pointCount() == w.run()->n_layer() * w.run()->n_head(); }));
  for (int i = 0; i < view->scatter()->pointCount(); ++i) {
    const auto [l, h] = view->pointHead(i);
    CHECK(view->scatter()->point(i).x == copying->values(l, h));
  }
}
