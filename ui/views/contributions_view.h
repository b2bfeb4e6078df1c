// What each part of the model adds to the residual stream at the selected position: a layers x
// heads heatmap (head write norm, or direct logit attribution to a target token) above bars for
// every component of the final residual stream, and the check that the parts sum to the whole.
#pragma once

#include <memory>

#include "core/analysis/view_data.h"
#include "ui/views/analysis_view.h"

class QButtonGroup;
class QLabel;
class QRadioButton;

namespace hs::ui {

// The analyses at one destination position: the residual decomposition, the heads' write norms
// and direct logit attribution to a target token (core/analysis/view_data.h).
struct PositionResult : ViewResult, hs::PositionAnalysis {};

class BarChartView;
class HeatmapView;
class RefreshWhenShown;
class Selection;
class TargetPicker;

class ContributionsView : public AnalysisView {
  Q_OBJECT

 public:
  enum class Mode { WriteNorm, LogitAttribution };
  static ViewDescriptor descriptor();
  // Predictions offered as targets.
  static constexpr int kTopK = 10;

  ContributionsView(Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult> run) override;
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  // At the selected position: the write norms, then the logit attribution.
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;
  void setPositionResult(std::shared_ptr<const PositionResult> result);
  const std::shared_ptr<const PositionResult>& positionResult() const { return result_; }
  void setMode(Mode mode);
  Mode mode() const { return mode_; }

  HeatmapView* headHeatmap() const { return heads_; }
  BarChartView* bars() const { return bars_; }
  QString checkText() const;

  // The whole view as a figure.
  FigureText figureText() const override;
  QString figureFileStem() const override;

 private:
  void refresh();
  void refreshTargets();
  void updateHighlights();

  std::shared_ptr<const RunResult> run_;
  std::shared_ptr<const PositionResult> result_;
  Mode mode_ = Mode::WriteNorm;
  QRadioButton* norm_button_ = nullptr;
  QRadioButton* dla_button_ = nullptr;
  TargetPicker* target_ = nullptr;
  QLabel* position_ = nullptr;
  QLabel* heads_caption_ = nullptr;
  QLabel* bars_caption_ = nullptr;
  QLabel* check_ = nullptr;
  HeatmapView* heads_ = nullptr;
  BarChartView* bars_ = nullptr;
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
