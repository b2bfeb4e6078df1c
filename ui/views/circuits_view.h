// The selected head's QK and OV circuits (core/analysis/circuits.h), in three bands:
//   above: the singular values of W_QK and of W_OV (rank <= d_head: the rest of d_model are 0),
//          and the eigenvalues of the full OV circuit W_E W_OV W_U with its copying score;
//   below: the token-to-token QK scores E W_QK E^T over the prompt's tokens (no positions), and
//          for each prompt token the tokens its OV circuit promotes most (E W_OV W_U).
// A caption says what is folded (norm weights) and what is ignored (biases, positions, ...).
#pragma once

#include <memory>

#include "core/analysis/circuits.h"
#include "ui/views/analysis_view.h"

class QComboBox;
class QLabel;
class QTableWidget;

namespace hs::ui {

// One head's spectra (shared between runs: they do not depend on the prompt) and what it does
// to this run's tokens.
struct CircuitsResult : ViewResult {
  std::shared_ptr<const hs::CircuitSpectrum> spectrum;
  hs::PromptCircuits prompt;
};

class BarChartView;
class HeatmapView;
class RefreshWhenShown;
class Selection;

class CircuitsView : public AnalysisView {
  Q_OBJECT

 public:
  static ViewDescriptor descriptor();
  // Tokens kept per OV row; the table shows the first kShownTop, the tooltip all of them.
  static constexpr int kTopK = 10;
  static constexpr int kShownTop = 5;

  // Its input (ViewOption and ViewInputs name): the token vectors, raw | extended | default.
  static constexpr const char* kEmbedding = "embedding";

  CircuitsView(Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult>) override {}  // drawn from its head's analysis
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  // The selected head's circuits.
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;

  BarChartView* qkSingularValues() const { return qk_sv_; }
  BarChartView* ovSingularValues() const { return ov_sv_; }
  BarChartView* eigenvalues() const { return eigen_; }
  HeatmapView* qkScores() const { return qk_; }
  QTableWidget* ovTable() const { return ov_table_; }
  QString copyingText() const;
  // What a token is to the head: the choice of the view's "Tokens as" box (Default: raw for
  // layer 0's heads, extended after; issue 21, docs/circuits.md).
  hs::TokenVectors tokenVectors() const;
  void setTokenVectors(hs::TokenVectors vectors);
  QComboBox* tokenVectorsBox() const { return vectors_box_; }
  // The choice as AnalysisKey::params: empty for the default, else {"raw"} or {"extended"}.
  QStringList tokenVectorParams() const;

  // The selection's key with the token vectors' choice in params (none for the default).
  AnalysisKey analysisKey(AnalysisKey selected) const override;
  ViewInputs viewInputs() const override;
  void setViewInputs(const ViewInputs& inputs) override;

  FigureText figureText() const override;
  QString figureFileStem() const override;

 private:
  void refresh();
  void fillSingularValues(BarChartView* chart, const std::vector<double>& values, const QString& name);
  void fillOvTable();
  void updateHighlight();

  std::shared_ptr<const CircuitsResult> result_;
  QLabel* title_ = nullptr;
  QLabel* folding_ = nullptr;
  QComboBox* vectors_box_ = nullptr;
  QLabel* qk_sv_caption_ = nullptr;
  QLabel* ov_sv_caption_ = nullptr;
  QLabel* eigen_caption_ = nullptr;
  QLabel* qk_caption_ = nullptr;
  QLabel* ov_caption_ = nullptr;
  BarChartView* qk_sv_ = nullptr;
  BarChartView* ov_sv_ = nullptr;
  BarChartView* eigen_ = nullptr;
  HeatmapView* qk_ = nullptr;
  QTableWidget* ov_table_ = nullptr;
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
