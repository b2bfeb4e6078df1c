// The unit dashboard widget (ui/widgets/unit_dashboard.h) shows a dashboard `scan --units` wrote:
// a scan of the built-in model's shipped SAE over a few prompts, read back with the app's reader.
#include <catch2/catch.hpp>

#include <QLabel>

#include <filesystem>
#include <fstream>

#include "core/analysis/scan.h"
#include "core/analysis/unit_dataset.h"
#include "core/io/unit_dashboards.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/shaded_token_rows.h"
#include "ui/widgets/unit_dashboard.h"

TEST_CASE("The unit dashboard widget shows a dashboard written by scan --units", "[ui][units]") {
  const auto model = hs::Model::load(hs::builtin_model_dir());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "hs_unit_dashboard_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream in(dir / "prompts.txt");
    in << "The cat sat on the mat, and the cat slept.\nShe saw a big dog. The big dog saw her too.\n"
          "Tom and Lily went to the shop. Tom bought an apple and Lily bought an apple.\n";
  }
  hs::ScanOptions o;
  o.input = dir / "prompts.txt";
  o.units = "mlp:0";
  o.threads = 1;
  o.aggregates = {"induction"};
  hs::ScanState s = hs::new_scan_state(*model, o, hs::scan_settings(*model, o));
  hs::run_scan(*model, o, s);
  hs::write_unit_dashboards(*model, hs::resolve_unit_source(*model, o.units), s.units, s.settings, dir / "scan.units");
  const hs::UnitDashboardIndex index = hs::read_unit_dashboard_index(dir / "scan.units");
  int64_t unit = 0;
  while (s.units.active(unit) < 3) ++unit;
  const hs::UnitDashboard d = hs::read_unit_dashboard(index, unit);

  hs::ui::UnitDashboardWidget w;
  w.setDashboard(d);
  CHECK(w.summaryLabel()->text().contains(QStringLiteral("max activation")));
  CHECK(w.histogram()->barCount() == static_cast<int>(d.bar_heights.size()));
  CHECK(w.topRows()->rowCount() == static_cast<int>(d.examples_top.size()));
  REQUIRE(w.topRows()->rowCount() > 0);
  CHECK(w.topRows()->row(0).weights[static_cast<size_t>(w.topRows()->row(0).outlined)] == Approx(1.0f));
  int quantile_examples = 0;
  for (const auto& q : d.examples_quantiles) quantile_examples += static_cast<int>(q.examples.size());
  CHECK(w.quantileRows()->rowCount() == quantile_examples);
  w.setMessage(QStringLiteral("The dashboards are of another model."));
  CHECK(w.summaryLabel()->text().contains(QStringLiteral("another model")));
  CHECK(w.topRows()->rowCount() == 0);
  std::filesystem::remove_all(dir);
}
