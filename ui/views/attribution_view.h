// Explaining the current prediction with gradients (issue 23 part 5): for the metric the
// Contributions view targets (the target token's logit at the selected position, or its logit
// difference against a second token), the attribution of every input token (gradient x input, or
// integrated gradients with its completeness error), and every head's, MLP layer's and neuron's
// estimated effect of zero-ablating it, -a . dM/da, all recomputed as the person types. Clicking
// a head runs its exact zero ablation beside the estimate. The numbers are core's
// (core/analysis/attribution.h); this view draws them.
#pragma once

#include <QFuture>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/analysis/attribution.h"
#include "core/analysis/attribution_data.h"
#include "ui/views/analysis_view.h"

class QLabel;
class QRadioButton;
class QSpinBox;
class QTableWidget;

namespace hs::ui {

class BarChartView;
class HeatmapView;
class RefreshWhenShown;
class Selection;
class TargetPicker;

// One attribution of one run (the plain run: without the window's ablations).
struct AttributionResult : ViewResult {
  hs::TargetMetric target;
  hs::InputAttribution input;
  hs::ComponentAttribution components;
  std::vector<hs::NeuronEstimate> top_neurons;  // by |estimate|, largest first
  std::vector<hs::Prediction> top;              // the predictions after target.pos, for the pickers
  std::shared_ptr<const hs::ActivationCache> plain;  // the run explained, for the exact ablations
  bool ablations_left_out = false;  // the run on screen had ablations; this explains the plain run
  int backward_passes = 0;
  std::vector<std::string> warnings;  // an integrated-gradients result that does not add up
};

class AttributionView : public AnalysisView {
  Q_OBJECT

 public:
  // Its inputs (and command-line options): --attr-method, --ig-steps. The second token of a logit
  // difference is the selection's (Selection::versus), shared with the attention view's edges.
  static inline const QString kMethod = QStringLiteral("attr-method"), kSteps = QStringLiteral("ig-steps");
  static constexpr int kDefaultSteps = 32;
  static constexpr int kTopNeurons = 20;
  static constexpr int kTopK = 10;  // predictions offered as targets
  static constexpr QSize kFigureSize{1100, 620};
  static ViewDescriptor descriptor();
  // What the view's compute does, for tests and the CLI's twin: the attribution of `run`'s plain
  // run for `key` (params: method name, steps). Throws hs::Error; hs::Cancelled when `job` says so.
  static std::shared_ptr<AttributionResult> compute(const RunResult& run, const AnalysisKey& key,
                                                    const AnalysisJob& job = {});

  AttributionView(Selection* selection, QWidget* parent = nullptr);
  ~AttributionView() override;

  void setRun(std::shared_ptr<const RunResult> run) override;
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  AnalysisKey analysisKey(AnalysisKey selected) const override;
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;
  ViewInputs viewInputs() const override;
  void setViewInputs(const ViewInputs& inputs) override;
  void showFailure(const QString& message) override;

  FigureText figureText() const override;
  QString figureFileStem() const override { return QStringLiteral("attribution"); }

  hs::InputAttributionMethod method() const;
  void setMethod(hs::InputAttributionMethod method);
  int steps() const;
  void setSteps(int steps);

  // For tests and the screenshots.
  BarChartView* tokenBars() const { return token_bars_; }
  HeatmapView* headHeatmap() const { return heads_; }
  BarChartView* mlpBars() const { return mlp_bars_; }
  QTableWidget* neuronTable() const { return neurons_; }
  TargetPicker* targetPicker() const { return target_; }
  TargetPicker* versusPicker() const { return versus_; }
  QSpinBox* stepsBox() const { return steps_; }
  QString titleText() const;
  QString completenessText() const;
  QString ablationText() const;
  QString statusText() const;
  // Whether the result drawn is of the run and key the view has now.
  bool isCurrent() const;
  // The exact zero ablation of head (layer, head) for the shown result, once computed.
  std::optional<double> exactAblation(int layer, int head) const;

 private:
  void refresh();
  void refreshTargets();
  void updateStatus();
  void updateAblation();
  void startExactAblation(int layer, int head);
  QString metricText() const;  // "logit(␣mat) − logit(␣hat) at _the (11)"

  std::shared_ptr<const RunResult> run_;
  std::shared_ptr<const AttributionResult> result_;
  QString failure_;
  QLabel* title_ = nullptr;
  TargetPicker* target_ = nullptr;
  TargetPicker* versus_ = nullptr;
  QRadioButton* gxi_button_ = nullptr;
  QRadioButton* ig_button_ = nullptr;
  QSpinBox* steps_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* tokens_caption_ = nullptr;
  BarChartView* token_bars_ = nullptr;
  QLabel* completeness_ = nullptr;
  QLabel* heads_caption_ = nullptr;
  HeatmapView* heads_ = nullptr;
  QLabel* ablation_ = nullptr;
  QLabel* mlp_caption_ = nullptr;
  BarChartView* mlp_bars_ = nullptr;
  QTableWidget* neurons_ = nullptr;
  RefreshWhenShown* refresher_ = nullptr;
  // Exact ablations of the shown result, by (layer, head); the one the person asked about.
  std::map<std::pair<int, int>, double> exact_;
  std::pair<int, int> asked_head_{-1, -1};
  quint64 ablation_job_ = 0;
  QString ablation_error_;
  std::vector<QFuture<void>> in_flight_;
};

}  // namespace hs::ui
