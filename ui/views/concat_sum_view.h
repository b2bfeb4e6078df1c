// Multi-head attention as a sum over heads, for the selected layer, in three rows as wide as the
// view:
//   top:    z concatenated [pos, head*d_head] × W_O [head*d_head, d_model] (+ b_O) = attn_out
//   middle: each head's z_h × W_O[h] = r_h [pos, d_model] (a row of small multiples on one
//           colour scale, drawn under them), and Σ_h r_h + b_O
//   below:  |concat − sum| with its largest value, and the shapes at every step.
// Selecting a head outlines its band in z and in W_O, and its r_h.
#pragma once

#include <QImage>

#include <memory>
#include <vector>

#include "core/analysis/view_data.h"
#include "ui/views/analysis_view.h"

class QLabel;
class QTableWidget;

namespace hs::ui {

// Concatenate-then-project beside project-then-sum for one layer (core/analysis/view_data.h),
// with each head's r_h as an image on the heads' shared colour range.
struct LayerResult : ViewResult, hs::LayerAnalysis {
  std::vector<QImage> head_result_images;  // [head]
};

class HeatmapView;
class ImageGridView;
class RefreshWhenShown;
class Selection;

class ConcatSumView : public AnalysisView {
  Q_OBJECT

 public:
  static ViewDescriptor descriptor();

  ConcatSumView(Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult>) override {}  // drawn from its layer's analysis
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  // Every layer's view.
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;

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
  QString figureFileStem() const override;

 private:
  void refresh();
  void updateHighlights();
  void fillShapes();

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
  QLabel* concat_op_ = nullptr;  // "+ b_O =" between the plots, or "=" without the bias
  QLabel* sum_op_ = nullptr;
  QLabel* shapes_summary_ = nullptr;
  QTableWidget* shapes_ = nullptr;
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
