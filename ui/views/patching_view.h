// Activation patching between the prompt above (the clean run) and a corrupted prompt typed here:
// four heatmaps of the normalized effect (m - m_corrupt) / (m_clean - m_corrupt) of copying one
// clean activation into the corrupted run, m = logit(answer) - logit(wrong) at the last position:
// resid_pre, attn_out and mlp_out per layer x position, and each head's z per layer x head (or,
// for an estimate, per head and position: z_pos).
//
// Three methods draw the maps. The estimates, AtP and AtP* (its QK fix), come from two forward
// passes and one backward pass (core/analysis/attribution_patching.h): they are asked for as the
// prompts and answers are typed, on a worker, and a map is drawn only from an estimate of the
// inputs shown. The exact sweep is on demand (Run), with progress and Cancel; the core's batched
// sweep (core/analysis/patching.h) computes it on a worker, and the estimates of the same inputs
// with it, so that the side pane can set every node's estimate against its exact value and list
// where they disagree most. Both go through the view's one analysis (its key's last parameter
// says which); the newest request wins, so an estimate asked for while typing never waits for a
// sweep nobody asked to keep.
#pragma once

#include <array>
#include <string>
#include <vector>
#include <memory>
#include <optional>
#include <utility>

#include "core/analysis/attribution_patching.h"
#include "core/analysis/patching.h"
#include "ui/views/analysis_view.h"

class QButtonGroup;
class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;
class QTableWidget;

namespace hs::ui {

class HeatmapView;
class RefreshWhenShown;
class ScatterView;
class Selection;

// What one request computed: the estimates always; the four exact sweeps when Run asked for them.
struct PatchingViewResult : ViewResult {
  hs::PatchingInputs inputs;
  bool exact = false;                        // `sweeps` were computed
  std::array<hs::PatchingResult, 4> sweeps;  // in PatchingView::kSites order
  // [0]: AtP, [1]: AtP* (the QK fix), each in hs::kAtpSites order (resid_pre ... mlp_post).
  std::array<std::array<hs::AtpResult, 6>, 2> estimates;
  double estimate_ms = 0.0;                  // the two forward passes, the backward pass, the estimates
  const hs::AtpResult& estimate(hs::PatchMethod method, hs::AtpSite site) const;
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
  static constexpr std::array<hs::AtpSite, 4> kEstimateSites = {hs::AtpSite::ResidPre, hs::AtpSite::AttnOut,
                                                                 hs::AtpSite::MlpOut, hs::AtpSite::Z};
  static constexpr QSize kHeatmapFigureSize{1000, 560};
  static constexpr QSize kScatterFigureSize{720, 640};
  static constexpr int kWorstListed = 12;
  static constexpr int kTopNeurons = 20;
  // Its inputs (and command-line options): --corrupt, --answer, --wrong, --patch-method.
  static inline const QString kCorrupt = QStringLiteral("corrupt"), kAnswer = QStringLiteral("answer"),
                              kWrong = QStringLiteral("wrong"), kMethod = QStringLiteral("patch-method");
  // The last parameter of the analysis key: estimates only, or the exact sweep (and estimates).
  static inline const QString kEstimateOnly = QStringLiteral("estimate"), kExactSweep = QStringLiteral("exact");
  static ViewDescriptor descriptor();

  PatchingView(Selection* selection, QWidget* parent = nullptr);

  void setRun(std::shared_ptr<const RunResult> run) override;
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  // When the view has inputs that fit the run: the four exact maps, the four maps of the estimate
  // chosen (AtP unless AtP* is), and the four scatters of that estimate against the exact sweep,
  // all from one computation. Else nothing.
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;
  // kCorrupt, kAnswer and kWrong: the three fields as typed; kMethod: "atp", "atp_qk" or "exact".
  ViewInputs viewInputs() const override;
  void setViewInputs(const ViewInputs& inputs) override;
  void showProgress(double fraction, const QString& what) override;
  void showFailure(const QString& message) override;
  QString exportSkipReason(const RunResult& run) const override;
  // The line under the maps: the metrics, what changed since they were made, the pair's warnings.
  QString summaryText() const;
  // What makes the maps on screen another setting's than the one on screen (another model, prompt,
  // corrupted prompt, answer or wrong answer), as the summary words it; empty when they are current.
  // Such maps are greyed out and titled stale.
  QStringList staleReasons() const;
  bool mapsGreyed() const;
  // Whether the typed inputs make a sweep of `run` (the maps an export would compute).
  bool inputsFit(const RunResult& run) const;

  FigureText figureText() const override;
  QString figureFileStem() const override { return QStringLiteral("patching"); }

  // Starts the sweep (what Run does); false, with the reason shown, when the inputs do not fit.
  // The maps then show the exact method.
  bool run();
  void cancel();
  bool isRunning() const { return running_; }
  // The key a Run with the current inputs asks for, and the one the live estimate asks for.
  AnalysisKey key() const;
  AnalysisKey estimateKey() const;

  // What the maps show: an estimate (AtP, AtPQK) or the exact sweep.
  hs::PatchMethod method() const { return method_; }
  void setMethod(hs::PatchMethod method);
  // The newest estimate, whether or not it is of the inputs shown; null before the first.
  const std::shared_ptr<const PatchingViewResult>& estimateResult() const { return estimate_; }
  // Whether `r` was made from the run and the inputs on screen now.
  bool isCurrent(const PatchingViewResult& r) const;
  // The estimate the maps can show now (of the inputs on screen), or null.
  std::shared_ptr<const PatchingViewResult> currentEstimate() const;
  // Estimates: z per head and position (z_pos) in place of z per head.
  void setZByPosition(bool on);
  bool zByPosition() const { return z_by_pos_; }

  // The side pane: the estimate chosen (AtP unless AtP* is) against the exact sweep at one site.
  void setCompareSite(int site_index);
  int compareSite() const { return compare_site_; }
  ScatterView* scatter() const { return scatter_; }
  QTableWidget* worstTable() const { return worst_; }
  QTableWidget* neuronTable() const { return neurons_; }
  QString scatterNote() const;
  QPushButton* scatterRunButton() const { return scatter_run_; }
  // The nodes of the scatter, listed: (row, col) of the site's map, worst first.
  const std::vector<std::pair<int, int>>& worstNodes() const { return worst_nodes_; }
  // Picks a node of site `site_index` (a listed node, a scatter point, a map cell): its map cell
  // and scatter point outlined, and the selection moved to it (for z, the head).
  void pickNode(int site_index, int row, int col);
  QRadioButton* methodButton(hs::PatchMethod method) const;

  QLineEdit* corruptEdit() const { return corrupt_; }
  QLineEdit* answerEdit() const { return answer_; }
  QLineEdit* wrongEdit() const { return wrong_; }
  QPushButton* runButton() const { return run_button_; }
  QPushButton* cancelButton() const { return cancel_button_; }
  QProgressBar* progressBar() const { return progress_; }
  QString messageText() const;
  QString statusText() const;
  QString mapsCaptionText() const;
  HeatmapView* heatmap(hs::HookPoint site) const;

 private:
  // Checks the inputs against the run on screen; enables Run and says what is wrong or ready.
  bool validate();
  void setRunning(bool running);
  void refresh();  // when shown: the inputs checked against the run, the estimate asked for, the maps
  void requestEstimate();  // for the inputs shown, unless held or asked for already
  void drawMaps();
  void drawCompare();
  void highlightPicked();
  void updateSummary();
  QString nodeLabel(int site_index, int row, int col) const;
  // The estimate method the scatter and exports use: the one chosen, else AtP.
  hs::PatchMethod estimateMethod() const { return method_ == hs::PatchMethod::AtPQK ? method_ : hs::PatchMethod::AtP; }
  QString mapsSubtitle(const PatchingViewResult& r) const;

  std::shared_ptr<const RunResult> run_;
  std::shared_ptr<const PatchingViewResult> result_;    // the newest exact sweep
  std::shared_ptr<const PatchingViewResult> estimate_;  // the newest estimate
  // The estimate asked for last (run job, key), so a refresh does not ask twice.
  std::optional<std::pair<quint64, AnalysisKey>> estimate_asked_;
  bool running_ = false;
  // What the maps and the side pane draw now: each redraws only when what it should draw changed.
  struct Shown {
    std::shared_ptr<const PatchingViewResult> result;
    hs::PatchMethod method = hs::PatchMethod::AtP;
    bool z_pos = false;
    int n_head = 0;
    QString failure;
    bool valid = false;
    QStringList stale;  // staleReasons of the result, when shown
    bool operator==(const Shown&) const = default;
  };
  struct Compared {
    std::shared_ptr<const PatchingViewResult> result;   // an exact sweep of the inputs on screen
    std::shared_ptr<const PatchingViewResult> neurons;  // the estimate the neuron list is of
    hs::PatchMethod method = hs::PatchMethod::AtP;
    int site = -1;
    bool running = false, valid = false;
    bool operator==(const Compared&) const = default;
  };
  Shown shown_;
  Compared shown_compare_;
  bool maps_stale_ = true;
  QString estimate_failure_;  // why the last estimate failed (cleared when another is asked for)
  QString method_note_;       // an unknown --patch-method, said beside the inputs
  hs::PatchMethod method_ = hs::PatchMethod::AtP;
  bool z_by_pos_ = false;
  int compare_site_ = 0;
  std::optional<std::array<int, 3>> picked_;  // site, row, col
  std::vector<std::pair<int, int>> worst_nodes_;
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
  QLabel* maps_caption_ = nullptr;
  QButtonGroup* methods_ = nullptr;
  QCheckBox* z_pos_box_ = nullptr;
  QComboBox* compare_combo_ = nullptr;
  ScatterView* scatter_ = nullptr;
  QLabel* scatter_note_ = nullptr;
  QPushButton* scatter_run_ = nullptr;
  QTableWidget* worst_ = nullptr;
  QTableWidget* neurons_ = nullptr;
  QLabel* neurons_note_ = nullptr;
  std::array<HeatmapView*, 4> maps_{};
  QStringList staleReasons(const PatchingViewResult& r) const;
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
