// The selected head's attention pattern, large: query position on y (first token at the top),
// key position on x, the fixed colour range [0, 1], masked cells hatched. Clicking a row selects
// that destination position everywhere. Its other mode shows each edge's attribution
// A[q, k] * dM/dA[q, k] to the metric the Attribution view explains (the selection's target at the
// selected position, or its logit difference against Selection::versus), on a signed scale.
#pragma once

#include <memory>

#include "core/analysis/attribution_data.h"
#include "ui/views/analysis_view.h"

class QLabel;
class QPushButton;
class QRadioButton;

namespace hs {
class Model;
}

namespace hs::ui {

class BarChartView;
class HeatmapView;
struct HeatmapCells;
class ImageGridView;
class RefreshWhenShown;
class Selection;

// The view's analysis: the key's head pattern of the run, coloured for drawing. Computed with
// each run on its worker, so a keystroke at a long prompt reaches the GUI thread ready to draw.
// In edge mode (AttentionView::kEdgeParams in the key's params) the cells are the edge
// attributions instead, of the plain run (gradients explain a run without edits).
struct AttentionPatternResult : ViewResult {
  std::shared_ptr<const HeatmapCells> cells;
  bool edges = false;
  hs::TargetMetric target;                            // edges: the metric explained
  std::shared_ptr<const hs::RowMatrixXf> edge_values;  // edges: [query, key], 0 above the diagonal
  bool ablations_left_out = false;                    // edges: the run on screen had ablations
};

class AttentionView : public AnalysisView {
  Q_OBJECT

 public:
  static ViewDescriptor descriptor();
  // Head (layer, head)'s pattern over the run: [query, key], later keys masked. Thread-safe.
  static std::shared_ptr<const HeatmapCells> patternCells(const RunResult& run, int layer, int head);
  // Export All: each head's pattern is a figure of this size.
  static constexpr QSize kPatternFigureSize{820, 780};
  enum class Mode { Pattern, EdgeAttribution };
  static inline const QString kEdgeParams = QStringLiteral("edges");
  // Head (layer, head)'s edge attributions to the metric of `key` (pos, target, versus) on the
  // plain run. Throws hs::Error. Thread-safe.
  static std::shared_ptr<AttentionPatternResult> edgeCells(const RunResult& run, const AnalysisKey& key);

  AttentionView(Selection* selection, QWidget* parent = nullptr);
  ~AttentionView() override;

  void setRun(std::shared_ptr<const RunResult> run) override;
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return prepared_; }
  // Edge mode reads the position, target and versus too.
  AnalysisKey analysisKey(AnalysisKey selected) const override;
  void showFailure(const QString& message) override;
  void setMode(Mode mode);
  Mode mode() const { return mode_; }
  QRadioButton* edgeButton() const { return edge_button_; }
  QString summaryText() const;
  // The overview of every head, then each head's pattern.
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;
  HeatmapView* heatmap() const { return heatmap_; }
  // The selected query position's row of the pattern, as bars over the keys.
  BarChartView* rowProfile() const { return row_bars_; }
  // "Reset Zoom" beside the pattern (enabled while zoomed in), and the caption saying what is shown.
  QPushButton* resetZoomButton() const { return reset_zoom_; }
  QLabel* zoomCaption() const { return zoom_caption_; }
  // Shows head (layer, head) regardless of the selection (used by the exporter).
  void showHead(int layer, int head);

  // The whole view (pattern and row profile) as a figure.
  FigureText figureText() const override;
  QString figureFileStem() const override;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void refresh();
  void updateSummary();
  void updateRowProfile();
  void keepCellsSquare();
  void updateZoomCaption();
  // Edge mode: whether the prepared cells are the edges of (layer, head) for the selection now.
  bool edgesReady(int layer, int head) const;
  QString edgeMetricText() const;  // "logit(␣mat) at _the (11)", of the prepared edges

  std::shared_ptr<const RunResult> run_;
  QLabel* title_ = nullptr;
  QLabel* summary_ = nullptr;
  QLabel* note_ = nullptr;
  HeatmapView* heatmap_ = nullptr;
  QLabel* row_caption_ = nullptr;
  BarChartView* row_bars_ = nullptr;
  QWidget* side_ = nullptr;
  QLabel* zoom_caption_ = nullptr;
  QPushButton* reset_zoom_ = nullptr;
  // The model the zoom was made on: a new model shows its prompt whole.
  std::weak_ptr<const hs::Model> zoom_model_;
  int shown_layer_ = -1, shown_head_ = -1;
  Mode mode_ = Mode::Pattern;
  bool shown_edges_ = false;  // the heatmap holds edge attributions (of prepared_)
  QString failure_;           // edge mode: why the edges could not be computed
  QRadioButton* pattern_button_ = nullptr;
  QRadioButton* edge_button_ = nullptr;
  std::shared_ptr<const AttentionPatternResult> prepared_;
  // A new run waits for its pattern, prepared on the worker, until the window's turn of the event
  // loop is over; then the pattern is built here instead.
  bool refresh_owed_ = false;
  RefreshWhenShown* refresher_ = nullptr;
  std::unique_ptr<ImageGridView> overview_;  // Export All's overview of every head, never shown
};

}  // namespace hs::ui
