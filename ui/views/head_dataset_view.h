// Heads over Data: every head of the last data-set scan that described heads (scan --heads, or
// File > Scan Data Set with "Describe each head"; core/analysis/head_dataset.h) as a point of a
// scatter by two per-head quantities, and for the selected head a dashboard: its attention by
// distance, the entropy of its patterns, the tokens it reads from and at which it looks, and
// example contexts from each decile of its output norm with its pattern row over them.
//
// Everything shown was computed by the scan; the view only lays it out (a few hundred numbers
// and tokens per head), so it is cheap and does not depend on the prompt. It shows a scan only
// on runs of the model it was made with (DataSetScan), like the heads panel's "(data set)" scores.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "ui/views/analysis_view.h"

class QComboBox;
class QLabel;
class QTableWidget;

namespace hs {
class HeadDatasetStats;
}

namespace hs::ui {

class BarChartView;
class RefreshWhenShown;
class ScatterView;
class ShadedTokenRows;

class HeadDatasetView : public AnalysisView {
  Q_OBJECT

 public:
  static ViewDescriptor descriptor();

  // A per-head quantity the scatter can put on an axis (its id is the --head-data-x/-y value).
  struct Axis {
    QString id;
    QString name;        // the combo's and the axis title's
    QString definition;  // the combo's tooltip
  };
  static const std::vector<Axis>& axes();
  static constexpr int kMaxDistanceBars = 64;  // d = 0 .. 63, then one bar for "≥ 64"
  static constexpr int kTopTokens = 20;
  static constexpr int kExamplesPerDecile = 2;

  HeadDatasetView(Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult> run) override;
  void setScan(std::shared_ptr<const DataSetScan> scan) override;
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;
  QString exportSkipReason(const RunResult& run) const override;
  // The scatter's axes: {"head-data-x": id, "head-data-y": id}.
  ViewInputs viewInputs() const override;
  void setViewInputs(const ViewInputs& inputs) override;

  FigureText figureText() const override;
  QString figureFileStem() const override;

  // A scan of the run's model is on screen (false: the empty state says why).
  bool showsScan() const;
  // What the view says instead of a scan (empty when it has one of the run's model to show).
  QString emptyMessage() const;
  // The head of scatter point `index` (layer, head).
  std::pair<int, int> pointHead(int index) const;
  QString xAxis() const;
  QString yAxis() const;
  void setAxes(const QString& x, const QString& y);

  ScatterView* scatter() const { return scatter_; }
  BarChartView* distanceBars() const { return distance_; }
  BarChartView* entropyBars() const { return entropy_; }
  QTableWidget* keyTable() const { return key_table_; }
  QTableWidget* queryTable() const { return query_table_; }
  ShadedTokenRows* examples() const { return examples_; }
  QLabel* titleLabel() const { return title_; }
  QLabel* headLabelWidget() const { return head_title_; }

 private:
  void refresh();
  void refreshScatter();
  void refreshHead();
  void updateHighlight();
  // The value of axis `id` for a head; NaN: none (no score, or not known yet).
  double axisValue(const QString& id, int layer, int head) const;
  const hs::HeadDatasetStats* stats() const;
  QString scanSubtitle() const;

  std::shared_ptr<const RunResult> run_;
  std::shared_ptr<const DataSetScan> scan_;
  std::vector<int> point_heads_;  // [point] layer * n_heads + head

  QLabel* title_ = nullptr;
  QLabel* caption_ = nullptr;
  QWidget* body_ = nullptr;
  QLabel* empty_ = nullptr;
  QComboBox* x_combo_ = nullptr;
  QComboBox* y_combo_ = nullptr;
  ScatterView* scatter_ = nullptr;
  QLabel* head_title_ = nullptr;
  BarChartView* distance_ = nullptr;
  BarChartView* entropy_ = nullptr;
  QLabel* key_caption_ = nullptr;
  QLabel* query_caption_ = nullptr;
  QTableWidget* key_table_ = nullptr;
  QTableWidget* query_table_ = nullptr;
  QLabel* examples_caption_ = nullptr;
  ShadedTokenRows* examples_ = nullptr;
  RefreshWhenShown* refresher_ = nullptr;
  bool copying_asked_ = false;  // runWanted sent for the OV copying score
};

}  // namespace hs::ui
