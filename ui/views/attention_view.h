// The selected head's attention pattern, large: query position on y (first token at the top),
// key position on x, the fixed colour range [0, 1], masked cells hatched. Clicking a row selects
// that destination position everywhere.
#pragma once

#include <QWidget>

#include <memory>

#include "ui/controller/results.h"
#include "ui/export/figure.h"

class QLabel;

namespace hs::ui {

class BarChartView;
class HeatmapView;
class RefreshWhenShown;
class Selection;

class AttentionView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  AttentionView(Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult> run);
  HeatmapView* heatmap() const { return heatmap_; }
  // The selected query position's row of the pattern, as bars over the keys.
  BarChartView* rowProfile() const { return row_bars_; }
  // Shows head (layer, head) regardless of the selection (used by the exporter).
  void showHead(int layer, int head);

  // The whole view (pattern and row profile) as a figure.
  FigureText figureText() const override;
  QSize figureSize() const override { return size(); }
  void paintFigure(QCPPainter& painter, QSize size) override;
  QString figureFileStem() const override;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void refresh();
  void updateSummary();
  void updateRowProfile();
  void keepCellsSquare();

  Selection* selection_;
  std::shared_ptr<const RunResult> run_;
  QLabel* title_ = nullptr;
  QLabel* summary_ = nullptr;
  HeatmapView* heatmap_ = nullptr;
  QLabel* row_caption_ = nullptr;
  BarChartView* row_bars_ = nullptr;
  QWidget* side_ = nullptr;
  int shown_layer_ = -1, shown_head_ = -1;
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
