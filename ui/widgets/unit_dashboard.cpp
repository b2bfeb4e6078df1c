#include "ui/widgets/unit_dashboard.h"

#include <QLabel>
#include <QScrollArea>
#include <QVBoxLayout>

#include <algorithm>

#include "core/io/unit_dashboards.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/shaded_token_rows.h"

namespace hs::ui {

namespace {

// An example as a row: the tokens shaded by the unit's activation relative to `scale` (the
// unit's maximum, so rows compare across the dashboard), the example's position outlined.
ShadedTokenRows::Row example_row(const hs::UnitDashboardExample& e, float scale, const QString& label, bool gap) {
  ShadedTokenRows::Row r;
  r.label = label;
  r.label_tooltip = QStringLiteral("activation at the outlined token, and the prompt's line number");
  for (const std::string& t : e.tokens) r.tokens << QString::fromStdString(t);
  for (float v : e.values) r.weights.push_back(scale > 0 ? std::clamp(v / scale, 0.0f, 1.0f) : 0.0f);
  r.outlined = e.position - e.first;
  r.gap_above = gap;
  r.token_tooltip = QStringLiteral("%1: %2 of the maximum");
  return r;
}

}  // namespace

UnitDashboardWidget::UnitDashboardWidget(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  summary_ = new QLabel(this);
  summary_->setObjectName(QStringLiteral("unitDashboardSummary"));
  summary_->setWordWrap(true);
  layout->addWidget(summary_);
  histogram_ = new BarChartView(this);
  histogram_->setObjectName(QStringLiteral("unitDashboardHistogram"));
  histogram_->setValueAxisTitle(QStringLiteral("positions"));
  histogram_->setMinimumHeight(140);  // room for the rotated bin labels and the bars above them
  layout->addWidget(histogram_);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  auto* inner = new QWidget(scroll);
  auto* inner_layout = new QVBoxLayout(inner);
  inner_layout->setContentsMargins(0, 0, 0, 0);
  inner_layout->addWidget(new QLabel(QStringLiteral("Top activations"), inner));
  top_ = new ShadedTokenRows(inner);
  top_->setObjectName(QStringLiteral("unitDashboardTop"));
  inner_layout->addWidget(top_);
  inner_layout->addWidget(new QLabel(QStringLiteral("Examples by activation quantile (of a sample)"), inner));
  quantiles_ = new ShadedTokenRows(inner);
  quantiles_->setObjectName(QStringLiteral("unitDashboardQuantiles"));
  inner_layout->addWidget(quantiles_);
  inner_layout->addStretch(1);
  scroll->setWidget(inner);
  layout->addWidget(scroll, 1);
  setMessage(QStringLiteral("Scan a data set with --units to see this unit's dashboard."));
}

void UnitDashboardWidget::setDashboard(const hs::UnitDashboard& d) {
  summary_->setText(QStringLiteral("max activation %1 · active at %2% of %3 positions (%4) · %5")
                        .arg(static_cast<double>(d.act_max), 0, 'g', 4)
                        .arg(100.0 * d.frac_nonzero, 0, 'g', 3)
                        .arg(d.positions)
                        .arg(d.active_count)
                        .arg(QString::fromStdString(d.hook)));
  std::vector<BarChartView::Bar> bars;
  for (size_t i = 0; i < d.bar_heights.size(); ++i)
    bars.push_back({QString::number(d.bin_edges[i], 'g', 2), static_cast<double>(d.bar_heights[i]), QColor(70, 110, 190)});
  histogram_->setBars(std::move(bars));
  histogram_->setVisible(true);
  std::vector<ShadedTokenRows::Row> top;
  for (const auto& e : d.examples_top)
    top.push_back(example_row(e, d.act_max, QStringLiteral("%1 · line %2").arg(static_cast<double>(e.max_value), 0, 'g', 3).arg(e.index + 1), false));
  top_->setRows(std::move(top));
  if (d.examples_top.empty()) top_->setMessage(QStringLiteral("Never active on the data set."));
  std::vector<ShadedTokenRows::Row> quantiles;
  for (auto q = d.examples_quantiles.rbegin(); q != d.examples_quantiles.rend(); ++q) {
    bool first = true;
    for (const auto& e : q->examples) {
      quantiles.push_back(example_row(e, d.act_max,
                                      QStringLiteral("Q %1-%2 · %3").arg(q->quantile_low, 0, 'g', 2).arg(q->quantile_high, 0, 'g', 2)
                                          .arg(static_cast<double>(e.max_value), 0, 'g', 3),
                                      first && q != d.examples_quantiles.rbegin()));
      first = false;
    }
  }
  quantiles_->setRows(std::move(quantiles));
}

void UnitDashboardWidget::setMessage(const QString& message) {
  summary_->setText(message);
  histogram_->setBars({});
  histogram_->setVisible(false);
  top_->setRows({});
  top_->setMessage(QString());
  quantiles_->setRows({});
}

}  // namespace hs::ui
