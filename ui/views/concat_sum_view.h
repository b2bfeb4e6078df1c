// Multi-head attention as a sum over heads, for the selected layer, side by side:
//   left:  z concatenated [pos, head*d_head] × W_O [head*d_head, d_model] (+ b_O) = attn_out
//   right: each head's z_h × W_O[h] = r_h [pos, d_model] (small multiples), and Σ_h r_h + b_O
//   below: |concat − sum| with its largest value, and the shapes at every step.
// Selecting a head outlines its band in z and in W_O, and its r_h.
#pragma once

#include <QWidget>

#include <memory>

#include "ui/controller/results.h"
#include "ui/export/figure.h"

class QLabel;
class QTableWidget;

namespace hs::ui {

class HeatmapView;
class ImageGridView;
class RefreshWhenShown;
class Selection;

class ConcatSumView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  ConcatSumView(Selection* selection, QWidget* parent = nullptr);

  void setLayerResult(std::shared_ptr<const LayerResult> result);
  const std::shared_ptr<const LayerResult>& layerResult() const { return result_; }

  HeatmapView* zPlot() const { return z_; }
  HeatmapView* woPlot() const { return wo_; }
  HeatmapView* concatPlot() const { return concat_out_; }
  HeatmapView* sumPlot() const { return sum_out_; }
  HeatmapView* differencePlot() const { return diff_; }
  ImageGridView* headResults() const { return results_; }
  QTableWidget* shapesTable() const { return shapes_; }
  QString differenceText() const;

  FigureText figureText() const override;
  QSize figureSize() const override { return size(); }
  void paintFigure(QCPPainter& painter, QSize size) override;
  QString figureFileStem() const override;

 private:
  void refresh();
  void updateHighlights();
  void fillShapes();

  Selection* selection_;
  std::shared_ptr<const LayerResult> result_;
  QLabel* title_ = nullptr;
  QLabel* concat_caption_ = nullptr;
  QLabel* sum_caption_ = nullptr;
  QLabel* results_caption_ = nullptr;
  QLabel* sum_out_caption_ = nullptr;
  QLabel* diff_label_ = nullptr;
  QLabel* z_caption_ = nullptr;
  QLabel* wo_caption_ = nullptr;
  QLabel* concat_out_caption_ = nullptr;
  HeatmapView* z_ = nullptr;
  HeatmapView* wo_ = nullptr;
  HeatmapView* concat_out_ = nullptr;
  HeatmapView* sum_out_ = nullptr;
  HeatmapView* diff_ = nullptr;
  ImageGridView* results_ = nullptr;
  QLabel* shapes_summary_ = nullptr;
  QTableWidget* shapes_ = nullptr;
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
