// Units below the head (issue 25 item 4): one view class over a source of units, registered
// twice: "Neurons" (the MLP neurons of the selected layer, mlp.hook_post; a gated MLP's gated
// product) and "Features" (the latents of a loaded sparse autoencoder or transcoder, LoadedSaes).
//
// Left: the source, and the units with the largest activation at the selected position, or the
// largest |attribution| to the target (activation x gradient of the metric the Attribution view
// explains: the target's logit at the selected position, or its difference with the second
// token). Right, for the chosen unit (clicked in the table, typed, or else the top one): its
// activation over the prompt as shaded tokens (CircuitsVis's text_neuron_activations), its logit
// effects (its output direction through W_U, no final norm, as Neuronpedia's), and its dashboard
// once a scan of a data set has made one (not yet: the area says so).
//
// The numbers are core's (core/analysis/units.h, core/features/features.h), computed on a worker
// by the view's analysis; what does not depend on the chosen unit is kept for the next request of
// the same run and position, so choosing another unit costs only its logit effects.
#pragma once

#include <QFuture>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/analysis/attribution_data.h"
#include "core/analysis/top_k.h"
#include "core/analysis/units.h"
#include "ui/views/analysis_view.h"

class QComboBox;
class QGroupBox;
class QLabel;
class QRadioButton;
class QScrollArea;
class QSpinBox;
class QTableWidget;
class QVBoxLayout;

namespace hs {
class Model;
struct Sae;
}  // namespace hs

namespace hs::ui {

class ActivationStrip;
class RefreshWhenShown;
class SaeEditPanel;
class TargetPicker;
class UnitDashboardWidget;

enum class UnitKind { Neuron, Latent };

// The attributions at a base's position: activation x dM/dactivation for every unit.
struct UnitsAttribution {
  hs::RowVectorXf attribution;      // [n_units] at target.pos
  QString note;                     // why there is no attribution (attribution then all 0)
  std::vector<int> by_attribution;  // the top units at target.pos by |attribution|
};

// Every unit's activation at every position [pos, n_units], one shared row per position: a
// keystroke's latents share the unchanged rows of the previous keystroke's instead of copying them:
// a dense copy is fresh pages per keystroke, whose faults cost more than the new row's encoding
// (docs/benchmarks.md, 5 December).
class UnitActs {
 public:
  UnitActs() = default;
  explicit UnitActs(const hs::RowMatrixXf& all);  // [pos, n_units]
  // The first `n` rows of `before` (shared) followed by the rows of `rest` [k, n_units].
  UnitActs(const UnitActs& before, Eigen::Index n, const hs::RowMatrixXf& rest);

  Eigen::Index rows() const { return static_cast<Eigen::Index>(rows_.size()); }
  Eigen::Index cols() const { return cols_; }
  const hs::RowVectorXf& row(Eigen::Index p) const { return *rows_[static_cast<size_t>(p)]; }
  float operator()(Eigen::Index p, Eigen::Index u) const { return row(p)(u); }
  hs::RowMatrixXf dense() const;  // [pos, n_units]
  // Whether position p's row is the same object in both (shared, not copied).
  bool sharesRow(const UnitActs& other, Eigen::Index p) const {
    return p < rows() && p < other.rows() && rows_[static_cast<size_t>(p)] == other.rows_[static_cast<size_t>(p)];
  }

 private:
  std::vector<std::shared_ptr<const hs::RowVectorXf>> rows_;
  Eigen::Index cols_ = 0;
};

// What does not depend on the chosen unit: every unit's activations on the run and their
// attributions at the position.
struct UnitsBase {
  UnitKind kind = UnitKind::Neuron;
  int layer = -1;                   // neurons: the layer
  QString sae_id, sae_label;        // latents: the loaded SAE (LoadedSaes)
  std::shared_ptr<const hs::Sae> sae;
  std::shared_ptr<const hs::ActivationCache> plain;  // the run explained (without ablations)
  hs::TargetMetric target;
  std::vector<hs::Prediction> top;  // the predictions after target.pos, for the target pickers
  UnitActs acts;                    // [pos, n_units]
  std::vector<int> by_activation;   // the top units at target.pos, largest activation first
  bool post_norm = false;           // the units' output passes a norm before it joins the stream
  int n_units() const { return static_cast<int>(acts.cols()); }

  // The attributions (a backward pass): computed with the activations for neurons; for latents a
  // second stage (UnitsView::computeAttribution, the view's own job once the activations are
  // shown), null until then. Set once; the base is shared, so under a lock.
  std::shared_ptr<const UnitsAttribution> attribution() const {
    std::lock_guard lock(attribution_mutex_);
    return attribution_;
  }
  void setAttribution(std::shared_ptr<const UnitsAttribution> a) const {
    std::lock_guard lock(attribution_mutex_);
    if (!attribution_) attribution_ = std::move(a);
  }

 private:
  mutable std::mutex attribution_mutex_;
  mutable std::shared_ptr<const UnitsAttribution> attribution_;
};

struct UnitsResult : ViewResult {
  std::shared_ptr<const UnitsBase> base;  // null: nothing to show (no SAE), `message` says why
  QString message;
  bool ablations_left_out = false;
  int unit = -1;             // the unit shown on the right
  bool unit_chosen = false;  // chosen by the person (else the top unit by activation)
  hs::LogitEffects effects;
  QString effects_error;     // the logit effects could not be computed
};

class UnitsView : public AnalysisView {
  Q_OBJECT

 public:
  static constexpr int kTopUnits = 20;    // rows of the table
  static constexpr int kTopTokens = 10;   // logit effects each way
  static constexpr int kTargetChoices = 10;
  // Options: Neurons --neuron N; Features --feature N and --feature-sae K (the K-th SAE loaded,
  // counting from 0).
  static inline const QString kNeuron = QStringLiteral("neuron"), kFeature = QStringLiteral("feature"),
                              kFeatureSae = QStringLiteral("feature-sae");
  static ViewDescriptor neuronsDescriptor();
  static ViewDescriptor featuresDescriptor();
  // The view's compute, for tests: the analysis of `run` for `key` (params: the source, the unit).
  // Latents: the activations only; the attributions are the second stage, below.
  static std::shared_ptr<UnitsResult> compute(UnitKind kind, const RunResult& run, const AnalysisKey& key);
  // The second stage: the attributions at `base`'s position (one backward pass), stored in `base`
  // (kept if already there) and returned. The view runs it as its own job when a result without
  // them is shown; export calls it directly.
  static std::shared_ptr<const UnitsAttribution> computeAttribution(const UnitsBase& base);

  UnitsView(UnitKind kind, Selection* selection, QWidget* parent = nullptr);
  ~UnitsView() override;

  void setRun(std::shared_ptr<const RunResult> run) override;
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  AnalysisKey analysisKey(AnalysisKey selected) const override;
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;
  QString exportSkipReason(const RunResult& run) const override;
  ViewInputs viewInputs() const override;
  void setViewInputs(const ViewInputs& inputs) override;
  void showFailure(const QString& message) override;
  bool showUnit(const UnitRef& unit) override;

  FigureText figureText() const override;
  QString figureFileStem() const override;

  UnitKind kind() const { return kind_; }
  // The unit the person chose (-1: the top one at the position) and the one shown.
  int chosenUnit() const { return unit_; }
  int shownUnit() const;
  void chooseUnit(int unit);
  // Features: the loaded SAE shown (its LoadedSaes id; empty: none loaded).
  QString saeId() const { return sae_id_; }
  void chooseSae(const QString& id);
  bool sortByAttribution() const;
  void setSortByAttribution(bool by_attribution);
  // The table as CSV: unit, activation, attribution, one row per listed unit.
  QString tableCsv() const;
  bool isCurrent() const;
  // Whether the shown result's attributions are still being computed (the table says "computing…").
  bool attributionPending() const;

  // For tests and screenshots.
  QTableWidget* unitTable() const { return table_; }
  ActivationStrip* strip() const { return strip_; }
  QTableWidget* topTokens() const { return top_tokens_; }
  QTableWidget* bottomTokens() const { return bottom_tokens_; }
  QComboBox* sourceCombo() const { return source_; }
  QLabel* dashboardLabel() const { return dashboard_; }
  QLabel* messageLabel() const { return message_; }
  UnitDashboardWidget* dashboardWidget() const { return dashboard_widget_; }
  // The shown dashboard's folder and unit number in it (empty, -1: none shown).
  std::pair<QString, qint64> shownDashboard() const { return dashboard_shown_; }
  SaeEditPanel* editPanel() const { return edit_panel_; }  // Features only: latent edits, quality
  QString statusText() const;
  QString messageText() const;

 private:
  void refresh();
  void refreshContent();
  void refreshSources();
  void refreshTable();
  void refreshUnit();
  // The chosen unit's dashboard from the opened folders (LoadedDashboards), read on a worker.
  void updateDashboard(int unit);
  void refreshTargets();
  void updateStatus();
  void saveTableCsv();
  void startAttribution();  // the shown result's second stage, when it lacks it
  QString unitName(int unit) const;    // "L2 neuron 117", "latent 1234"
  QString sourceTitle() const;         // "L2 MLP neurons", "SAE name · hook"

  UnitKind kind_;
  std::shared_ptr<const RunResult> run_;
  std::shared_ptr<const UnitsResult> result_;
  QString failure_;
  int unit_ = -1;
  QString sae_id_;
  int sae_index_input_ = -1;  // --feature-sae, until the SAE list has it
  const void* model_ = nullptr;  // the model the chosen unit was chosen on
  QLabel* title_ = nullptr;
  QComboBox* source_ = nullptr;
  QSpinBox* unit_box_ = nullptr;
  QRadioButton* by_activation_ = nullptr;
  QRadioButton* by_attribution_ = nullptr;
  TargetPicker* target_ = nullptr;
  TargetPicker* versus_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* message_ = nullptr;
  QLabel* table_caption_ = nullptr;
  QTableWidget* table_ = nullptr;
  QLabel* strip_caption_ = nullptr;
  ActivationStrip* strip_ = nullptr;
  QLabel* effects_caption_ = nullptr;
  QTableWidget* top_tokens_ = nullptr;
  QTableWidget* bottom_tokens_ = nullptr;
  QGroupBox* dashboard_box_ = nullptr;
  QLabel* dashboard_ = nullptr;
  UnitDashboardWidget* dashboard_widget_ = nullptr;
  QScrollArea* dashboard_scroll_ = nullptr;
  QVBoxLayout* right_layout_ = nullptr;
  std::pair<QString, qint64> dashboard_wanted_{QString(), -1}, dashboard_shown_{QString(), -1};
  // What the model's folder carries for its units (saes/ and heldout.jsonl), looked up once per
  // model folder rather than on the GUI thread at every refresh.
  struct FolderExtras {
    std::string dir;       // the folder looked at (empty: none yet)
    QStringList saes;      // shippedSaeFolders
    bool heldout = false;  // LoadedDashboards::kHeldOutPassages is there
  };
  const FolderExtras& folderExtras(const hs::Model& model);
  FolderExtras folder_extras_;
  QString dashboard_units_;  // the shown units' source when the box offers to build their dashboards
  int dashboard_unit_ = -1;  // the unit the box was last updated for
  RefreshWhenShown* refresher_ = nullptr;
  SaeEditPanel* edit_panel_ = nullptr;
  std::vector<QFuture<void>> in_flight_;
  std::shared_ptr<const UnitsBase> attribution_job_;  // the base whose attributions are in flight
  // The attributions the table draws: pending means not yet drawn, not merely not yet computed
  // (a worker stores them before the GUI thread gets to draw them).
  std::shared_ptr<const UnitsAttribution> shown_attribution_;
};

}  // namespace hs::ui
