// File > Scan Data Set: the dialog's choice runs core/analysis/scan.h on a worker, and the data
// set's per-head means reach the head grid as External metrics with the live badges' colouring.
#include <catch2/catch.hpp>

#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QLabel>
#include <QMessageBox>
#include <QTest>
#include <QTimer>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/analysis/scan.h"
#include "core/analysis/unit_dataset.h"
#include "core/io/unit_dashboards.h"
#include "ui/controller/loaded_dashboards.h"
#include "ui/controller/head_metrics.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/window/main_window.h"
#include "ui/window/scan_dialog.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

namespace {

std::string fileText(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::filesystem::path scratchFile(const std::string& name) {
  return hs::test::scratch_dir() / name;
}

struct ScanWindow {
  MainWindow window;
  ScanWindow() : window(MainWindowOptions{test::fixtureModelDir(), QStringLiteral("The cat sat. The cat"), false}) {
    window.resize(1400, 900);
    window.show();
    window.activateWindow();
    REQUIRE(QTest::qWaitForWindowActive(&window));
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  }
};

// Opens File > Scan Data Set and fills its dialog with `fill` once it is on screen.
void scanFromMenu(MainWindow& window, const std::function<void(ScanDialog&)>& fill) {
  bool filled = false;
  QTimer::singleShot(0, &window, [&] {
    if (auto* dialog = qobject_cast<ScanDialog*>(QApplication::activeModalWidget())) {
      fill(*dialog);
      filled = true;
      dialog->accept();
    }
  });
  auto* action = window.findChild<QAction*>(QStringLiteral("actionScanDataSet"));
  REQUIRE(action != nullptr);
  action->trigger();
  REQUIRE(filled);
}

}  // namespace

TEST_CASE("File > Scan Data Set shows the data set's mean scores in the head grid", "[scan][window]") {
  const auto input = scratchFile("prompts.txt");
  {
    std::ofstream out(input);
    out << "The cat sat. The cat sat\nA dog ran and a dog ran\n\nThe cat ran. The dog sat. The cat\n";
  }
  ScanWindow w;
  scanFromMenu(w.window, [&](ScanDialog& d) {
    d.setInputFile(QString::fromStdString(input.string()));
    d.setMaxTokens(20);
  });
  HeadMetricsBar* bar = w.window.headMetricsBar();
  REQUIRE(waitFor([&] { return bar->metricId() == QStringLiteral("induction_dataset"); }));

  // The same scan in the core, directly.
  hs::ScanOptions o;
  o.input = input;
  o.max_tokens = 20;
  const auto model = test::fixtureModel();
  hs::ScanState expected = hs::new_scan_state(*model, o, hs::scan_settings(*model, o));
  hs::run_scan(*model, o, expected);
  REQUIRE(expected.prompts == 3);

  const HeadMetricValues* shown = bar->currentValues();
  REQUIRE(shown != nullptr);
  const HeadMetric* metric = findHeadMetric(QStringLiteral("induction_dataset"));
  REQUIRE(metric != nullptr);
  CHECK(metric->source == HeadMetric::Source::External);
  // The live badge's colouring.
  const HeadMetric* live = findHeadMetric(QStringLiteral("induction"));
  CHECK(metric->low == live->low);
  CHECK(metric->high == live->high);
  CHECK(metric->colors == live->colors);
  const int n_head = model->config().n_heads;
  ImageGridView* grid = w.window.headGrid();
  REQUIRE(grid->itemCount() == model->config().n_layers * n_head);
  REQUIRE(shown->values.rows() == model->config().n_layers);
  for (int l = 0; l < model->config().n_layers; ++l)
    for (int h = 0; h < n_head; ++h) CHECK(shown->values(l, h) == static_cast<float>(expected.grids.at("induction").mean(l, h)));
  // The grid's badges (sorted or not, the item of a head carries its label).
  for (int i = 0; i < grid->itemCount(); ++i) {
    const QString label = grid->item(i).label;
    bool found = false;
    for (int l = 0; l < model->config().n_layers && !found; ++l)
      for (int h = 0; h < n_head && !found; ++h)
        if (label == QStringLiteral("L%1H%2").arg(l).arg(h)) {
          found = true;
          CHECK(grid->item(i).badge == headMetricText(*metric, shown->values(l, h)));
        }
    CHECK(found);
  }
  CHECK(bar->metricCombo()->findData(QStringLiteral("induction_dataset")) >= 0);
  CHECK(bar->noteLabel()->text().contains(QStringLiteral("3 prompts")));
}

TEST_CASE("File > Scan Data Set on a file that cannot be read says so", "[scan][window]") {
  ScanWindow w;
  QString message;
  QTimer watcher;
  QObject::connect(&watcher, &QTimer::timeout, [&] {
    if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
      message = box->text();
      box->close();
    }
  });
  watcher.start(20);
  scanFromMenu(w.window, [&](ScanDialog& d) {
    d.setInputFile(QString::fromStdString(scratchFile("no-such-file.txt").string()));
  });
  REQUIRE(waitFor([&] { return !message.isEmpty(); }));
  CHECK(message.contains(QStringLiteral("cannot read the input")));
  CHECK(message.contains(QStringLiteral("no-such-file.txt")));
  CHECK(w.window.headMetricsBar()->metricId() == QStringLiteral("induction"));
}

namespace {

// A copy of the fixture model in `dir`: the same files, or (perturbed) with one weight byte near the
// end of model.safetensors changed: the same family, shape and name, other weights.
void copyFixtureModel(const std::filesystem::path& dir, bool perturbed) {
  hs::test::copy_model_folder(test::fixtureModelDir().toStdString(), dir, perturbed ? 4 : 0);
}

}  // namespace

TEST_CASE("Data-set scores are shown only on runs of the model they were made with", "[scan][window]") {
  const auto input = scratchFile("prompts_identity.txt");
  {
    std::ofstream out(input);
    out << "The cat sat. The cat sat\nA dog ran and a dog ran\n";
  }
  // Both copies have the fixture's folder name, family and shape: only their files tell them apart.
  const auto other = hs::test::scratch_dir() / "other" / "f32_prefixed";
  const auto same = hs::test::scratch_dir() / "same" / "f32_prefixed";
  copyFixtureModel(other, true);
  copyFixtureModel(same, false);

  ScanWindow w;
  scanFromMenu(w.window, [&](ScanDialog& d) {
    d.setInputFile(QString::fromStdString(input.string()));
    d.setMaxTokens(20);
  });
  HeadMetricsBar* bar = w.window.headMetricsBar();
  REQUIRE(waitFor([&] { return bar->metricId() == QStringLiteral("induction_dataset") && bar->currentValues(); }));
  const hs::RowMatrixXf scanned = bar->currentValues()->values;
  const std::string scanned_with = w.window.controller()->model()->fingerprint();

  auto open = [&](const std::filesystem::path& dir) {
    w.window.loadModel(QString::fromStdString(dir.string()));
    REQUIRE(waitFor([&] {
      const auto run = w.window.controller()->currentRun();
      return run && run->model().dir() == dir;
    }));
  };

  // Other weights of the same shape: the scores are not this model's, and the note says whose they are.
  open(other);
  CHECK(w.window.controller()->model()->fingerprint() != scanned_with);
  CHECK(bar->metricId() == QStringLiteral("induction_dataset"));
  CHECK(bar->currentValues() == nullptr);
  CHECK(bar->noteLabel()->text().contains(QStringLiteral("made with another model")));
  const HeadMetric* metric = findHeadMetric(QStringLiteral("induction_dataset"));
  for (int i = 0; i < w.window.headGrid()->itemCount(); ++i)
    CHECK(w.window.headGrid()->item(i).badge == headMetricText(*metric, NAN));  // "—": no score

  // A copy of the very files is the same model, wherever it lies.
  open(same);
  CHECK(w.window.controller()->model()->fingerprint() == scanned_with);
  REQUIRE(bar->currentValues() != nullptr);
  CHECK(bar->currentValues()->values == scanned);
  CHECK(bar->noteLabel()->text().contains(QStringLiteral("2 prompts")));
}

TEST_CASE("File > Scan Data Set with unit dashboards writes the folder headscope-cli would and opens it", "[scan][window][dashboards]") {
  const auto input = scratchFile("prompts_units.txt");
  {
    std::ofstream out(input);
    out << "The cat sat. The cat sat\nA dog ran and a dog ran\nThe cat ran. The dog sat. The cat\n";
  }
  LoadedDashboards::instance().clear();
  ScanWindow w;
  scanFromMenu(w.window, [&](ScanDialog& d) {
    d.setInputFile(QString::fromStdString(input.string()));
    d.setMaxTokens(20);
    d.setUnits(QStringLiteral("mlp:0"));
  });
  REQUIRE(waitFor([&] { return !LoadedDashboards::instance().list().empty(); }, 60000));
  const auto index = LoadedDashboards::instance().list().front();
  const std::filesystem::path folder = index->folder;
  // The same scan in the core, its dashboards written as headscope-cli scan --units does.
  hs::ScanOptions o;
  o.input = input;
  o.max_tokens = 20;
  o.units = "mlp:0";
  const auto model = test::fixtureModel();
  CHECK(index->units == model->config().d_mlp);
  CHECK(index->fingerprint() == model->fingerprint());
  hs::ScanState expected = hs::new_scan_state(*model, o, hs::scan_settings(*model, o));
  hs::run_scan(*model, o, expected);
  const std::filesystem::path core = scratchFile("prompts_units_core.units");
  std::filesystem::remove_all(core);
  hs::write_unit_dashboards(*model, hs::resolve_unit_source(*model, o.units), expected.units, expected.settings, core);
  int64_t fired = 0;
  while (expected.units.active(fired) == 0) ++fired;
  for (const int64_t u : {int64_t{0}, fired}) {
    const std::string name = "u" + std::to_string(u) + ".json";
    INFO(name);
    REQUIRE(std::filesystem::exists(folder / name));
    CHECK(fileText(folder / name) == fileText(core / name));
  }
  // Nothing half-written beside it, and the window says where it is.
  CHECK_FALSE(std::filesystem::exists(folder.string() + ".tmp"));
  LoadedDashboards::instance().clear();
  std::filesystem::remove_all(folder);
  std::filesystem::remove_all(core);
}
