// One unit's dashboard from a data set (`scan --units`, docs/scan.md "Unit dashboards"): its
// maximum and frequency, the histogram of its positive activations, its top contexts and examples
// from each quantile of its activations, as shaded token rows. The Neurons and Features views host
// it; it shows a message instead when there is no dashboard, or when the one found is of other
// units (another model, SAE or layer).
#pragma once

#include <QWidget>

namespace hs {
struct UnitDashboard;
}

class QLabel;

namespace hs::ui {

class BarChartView;
class ShadedTokenRows;

class UnitDashboardWidget : public QWidget {
  Q_OBJECT

 public:
  explicit UnitDashboardWidget(QWidget* parent = nullptr);

  void setDashboard(const hs::UnitDashboard& dashboard);
  void setMessage(const QString& message);  // no dashboard: why

  // For tests.
  QLabel* summaryLabel() const { return summary_; }
  BarChartView* histogram() const { return histogram_; }
  ShadedTokenRows* topRows() const { return top_; }
  ShadedTokenRows* quantileRows() const { return quantiles_; }

 private:
  QLabel* summary_ = nullptr;
  BarChartView* histogram_ = nullptr;
  ShadedTokenRows* top_ = nullptr;
  ShadedTokenRows* quantiles_ = nullptr;
};

}  // namespace hs::ui
