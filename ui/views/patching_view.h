// Activation patching between the prompt above (the clean run) and a corrupted prompt typed here:
// four heatmaps of the normalized effect (m - m_corrupt) / (m_clean - m_corrupt) of copying one
// clean activation into the corrupted run, m = logit(answer) - logit(wrong) at the last position:
// resid_pre, attn_out and mlp_out per layer x position, and each head's z per layer x head. The
// sweep is on demand (Run), with progress and Cancel; the core's batched sweep (core/analysis/
// patching.h) computes it on a worker.
#pragma once

#include <array>
#include <string>
#include <vector>
#include <memory>

#include "core/analysis/patching.h"
#include "ui/views/analysis_view.h"

class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;

namespace hs::ui {

class HeatmapView;
class RefreshWhenShown;
class Selection;

// The four sweeps of one Run.
struct PatchingViewResult : ViewResult {
  hs::PatchingInputs inputs;
  std::array<hs::PatchingResult, 4> sweeps;  // in PatchingView::kSites order
  QStringList corrupt_labels;
  QString corrupt_text, answer_text, wrong_text;
  double elapsed_ms = 0.0;
  bool ablations_left_out = false;  // the run on screen had ablations; patching used plain runs
  // Whether the pair measures much (core/analysis/patching_checks.h), shown beside the maps.
  std::vector<std::string> warnings;
};

class PatchingView : public AnalysisView {
  Q_OBJECT

 public:
  static constexpr std::array<hs::HookPoint, 4> kSites = {hs::HookPoint::ResidPre, hs::HookPoint::AttnOut,
                                                          hs::HookPoint::MlpOut, hs::HookPoint::Z};
  static constexpr QSize kHeatmapFigureSize{1000, 560};
  // Its inputs (and command-line options): --corrupt, --answer, --wrong.
  static inline const QString kCorrupt = QStringLiteral("corrupt"), kAnswer = QStringLiteral("answer"),
                              kWrong = QStringLiteral("wrong");
  static ViewDescriptor descriptor();

  PatchingView(Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult> run) override;
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  // The four heatmaps when the view has inputs that fit the run, else the view as it is.
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;
  // kCorrupt, kAnswer and kWrong: the three fields as typed.
  ViewInputs viewInputs() const override;
  void setViewInputs(const ViewInputs& inputs) override;
  void showProgress(double fraction, const QString& what) override;
  void showFailure(const QString& message) override;
  QString exportSkipReason(const RunResult& run) const override;
  // The line under the maps: the metrics, what changed since they were made, the pair's warnings.
  QString summaryText() const;
  // Whether the typed inputs make a sweep of `run` (the maps an export would compute).
  bool inputsFit(const RunResult& run) const;

  FigureText figureText() const override;
  QString figureFileStem() const override { return QStringLiteral("patching"); }

  // Starts the sweep (what Run does); false, with the reason shown, when the inputs do not fit.
  bool run();
  void cancel();
  bool isRunning() const { return running_; }
  // The key a Run with the current inputs asks for.
  AnalysisKey key() const;

  QLineEdit* corruptEdit() const { return corrupt_; }
  QLineEdit* answerEdit() const { return answer_; }
  QLineEdit* wrongEdit() const { return wrong_; }
  QPushButton* runButton() const { return run_button_; }
  QPushButton* cancelButton() const { return cancel_button_; }
  QProgressBar* progressBar() const { return progress_; }
  QString messageText() const;
  QString statusText() const;
  HeatmapView* heatmap(hs::HookPoint site) const;

 private:
  // Checks the inputs against the run on screen; enables Run and says what is wrong or ready.
  bool validate();
  void setRunning(bool running);
  void refresh();  // when shown: the inputs checked against the run, the maps if new, the summary
  void drawMaps();
  void updateSummary();

  std::shared_ptr<const RunResult> run_;
  std::shared_ptr<const PatchingViewResult> result_;
  bool running_ = false;
  bool maps_dirty_ = false;  // a result the maps do not show yet
  QLabel* title_ = nullptr;
  QLabel* caption_ = nullptr;
  QLineEdit* corrupt_ = nullptr;
  QLabel* corrupt_count_ = nullptr;
  QLineEdit* answer_ = nullptr;
  QLineEdit* wrong_ = nullptr;
  QPushButton* run_button_ = nullptr;
  QPushButton* cancel_button_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* message_ = nullptr;
  QLabel* summary_ = nullptr;
  std::array<HeatmapView*, 4> maps_{};
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
