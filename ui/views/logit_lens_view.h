// The logit lens: a streams x positions grid (each layer's resid_pre, then the final
// resid_post) in which every cell shows the token the model would predict if the residual
// stream stopped there, coloured by that token's probability, or by the probability of the
// selection's target token. The tooltip lists the top 5. Clicking a cell selects its position
// and layer.
#pragma once

#include <memory>

#include "core/analysis/logit_lens.h"
#include "ui/views/analysis_view.h"

class QComboBox;
class QLabel;

namespace hs::ui {

// The lens summary of one run for one target (core/analysis/logit_lens.h).
struct LensResult : ViewResult {
  std::shared_ptr<const hs::LogitLensSummary> lens;
};

class HeatmapView;
class RefreshWhenShown;
class Selection;
class TargetPicker;

class LogitLensView : public AnalysisView {
  Q_OBJECT

 public:
  static ViewDescriptor descriptor();
  static constexpr int kTopK = 5;

  LogitLensView(Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult> run) override { run_ = std::move(run); }
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  // The grid as shown, for the selection's target.
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;

  HeatmapView* grid() const { return grid_; }
  QComboBox* targetCombo() const;
  // The tooltip of a cell (row = stream, column = position).
  QString cellTooltip(int stream, int pos) const;

  FigureText figureText() const override;
  QString figureFileStem() const override { return QStringLiteral("logit_lens"); }

 private:
  void refresh();
  void refreshTargets();
  void updateHighlight();

  std::shared_ptr<const RunResult> run_;
  std::shared_ptr<const LensResult> result_;
  QLabel* title_ = nullptr;
  TargetPicker* target_ = nullptr;
  HeatmapView* grid_ = nullptr;
  QLabel* caption_ = nullptr;
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
