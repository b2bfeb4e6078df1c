// The HeadScope window: the model and the prompt on top, the tokens as the model sees them, the
// heads on the left, the views on the right, the run's facts in the status bar.
#pragma once

#include <QMainWindow>
#include <QPointer>
#include <QTimer>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/model/intervention.h"
#include "ui/controller/results.h"
#include "ui/views/analysis_view.h"
#include "ui/window/export_all.h"

class QComboBox;
class QDockWidget;
class QLabel;
class QProgressBar;
class QToolButton;
class QSplitter;
class QTabWidget;
class QMessageBox;
class QMenu;

namespace hs {
class Model;
struct ScanOptions;
}

namespace hs::ui {

class AblationPanel;
class Ablations;
class AnalysisController;
class AnalysisView;
class ExportAllJob;
class SaeLoader;
class ScanJob;
class HeadMetricsBar;
class ImageGridView;
class PromptEdit;
class Selection;
class TokenStrip;

// How the window starts.
struct MainWindowOptions {
  QString model_dir;             // empty: the built-in model
  QString text;                  // empty: the example prompt
  bool restore_settings = true;  // window geometry from QSettings (off in tests)
  QString view = {};             // the id of the tab shown first (ui/views/registry.cpp); empty: the first
  int layer = 0, head = 0;       // the head selected once the first run is in
  hs::Interventions ablations = {};  // heads ablated from the start (undo removes them)
  ViewInputsById view_inputs = {};   // what the command line gives each view (its descriptor's options)
  // Text longer than the context: keep its last tokens (true) or its first (false); unset: the
  // choice saved in QSettings ("prompt/keep_last"), else the first.
  std::optional<bool> keep_last = std::nullopt;
  // A scan output to open at start (File > Open Scan Results); empty: none.
  QString scan_results = {};
  // Sparse autoencoder folders to load once the model is in (File > Open Sparse Autoencoder).
  QStringList sae_dirs = {};
  // Latent edits applied once those SAEs are in (`--sae-edit`, headscope-cli run's syntax).
  QString sae_edits = {};
  // Unit dashboard folders to open (`scan --units` output; File > Open Unit Dashboards).
  QStringList dashboard_dirs = {};
};

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(const MainWindowOptions& options = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  AnalysisController* controller() const { return controller_; }
  QComboBox* keepChoice() const { return keep_choice_; }
  Selection* selection() const { return selection_; }
  PromptEdit* promptEdit() const { return prompt_; }
  TokenStrip* tokenStrip() const { return tokens_; }
  ImageGridView* headGrid() const { return head_grid_; }
  // The heads panel's "Scores:" control (badges, sorting and filtering of the head grid).
  HeadMetricsBar* headMetricsBar() const { return head_metrics_; }
  // The heads ablated in every run (with undo), and the dock that lists them and compares runs.
  Ablations* ablations() const { return ablations_; }
  AblationPanel* ablationPanel() const { return ablation_panel_; }
  QDockWidget* ablationDock() const { return ablation_dock_; }
  // The tab of the view with this id (ui/views/registry.cpp), or null.
  AnalysisView* view(const QString& id) const;
  template <class View>
  View* viewAs(const QString& id) const {
    return qobject_cast<View*>(viewObject(id));
  }
  QTabWidget* tabs() const { return tabs_; }
  // The width the heads panel keeps (the splitter's left side): chosen by dragging the splitter,
  // saved in QSettings ("window/headsWidth"), given back whenever the room allows (after a dock
  // closes, on a wider window); a model or tab switch leaves it alone.
  int headsWidth() const { return heads_width_; }
  // `--view ablation`: not a tab but the Ablation dock, shown from the start.
  static constexpr const char* kAblationViewId = "ablation";
  // The debounce between a keystroke and the run it starts.
  static constexpr int kDebounceMs = 150;

 public Q_SLOTS:
  void openModelFolder();
  void openCheckpointFile();
  void loadModel(const QString& dir);
  void exportCurrentView();
  void exportAll();
  // What File > Export All exports into `dir`: the window's selection (head, position, target) and
  // each view's inputs, so every figure is of the state on screen.
  ExportAllJob::Options exportAllOptions(const QString& dir) const;
  // File > Scan Data Set: asks what to scan, runs it on a worker with progress and cancel in the
  // status bar, and shows the per-head means in the head grid ("… (data set)" metrics).
  void scanDataSet();
  // File > Open Scan Results: asks for the output of `headscope-cli scan` (OUT.json, or OUT.npz
  // with OUT.npz.json beside it) and opens it.
  void openScanResults();
  // Reads a scan output on a worker; then, as a finished File > Scan Data Set does, its per-head
  // means go to the heads panel and the scan to the views. A file that cannot be read leaves the
  // window as it was and says why in a message box. Results made with another model than the
  // loaded one are kept marked as that model's: shown only on runs of it.
  void openScanResultsFile(const QString& path);
  // The last scan with per-head descriptions handed to the views (null: none yet).
  std::shared_ptr<const DataSetScan> dataSetScan() const { return scan_; }
  // File > Open Sparse Autoencoder: asks for a folder and loads it (loadSaeFolder).
  void openSaeFolder();
  // File > Open Unit Dashboards: asks for a folder `headscope-cli scan --units` wrote and opens it.
  void openDashboardFolder();
  // Reads the folder's index on a worker; when it is one, adds it to LoadedDashboards (the Neurons
  // and Features views show the chosen unit's dashboard from it) and says what it holds in the
  // status bar; otherwise says why in a message box and leaves the list as it was.
  // `then` (if given) runs after, either way.
  void loadDashboardFolder(const QString& dir, std::function<void()> then = {});
  // Builds the dashboards of `units` (a scan --units source) from the model folder's held-out
  // passages (LoadedDashboards::kHeldOutPassages) as File > Scan Data Set would, with progress in
  // the status bar and in the views (LoadedDashboards::building), and opens them.
  void buildUnitDashboards(const QString& units);
  // Opens, on a worker, every dashboard folder the app has written (its data folder's
  // dashboards/), behind any opened otherwise: dashboards built once are there in later sessions.
  void loadOwnDashboards();
  // Loads the SAE folders the model folder carries (its saes/) that are not loaded or loading.
  void loadShippedSaes(const QString& model_dir);
  // Where a scan with unit dashboards from the window writes them.
  static QString dashboardsFolderFor(const hs::ScanOptions& options);
  // Reads an SAE or transcoder folder on a worker and, when each of its SAEs fits the current
  // model, adds them to LoadedSaes (the Features view lists them); otherwise says why in a
  // message box and leaves the list as it was. Before a model is in, it waits for it.
  void loadSaeFolder(const QString& dir);

 Q_SIGNALS:
  // A scan's results reached the window (from a finished scan or a file): for tests and scripts.
  void scanResultsShown();
  // Opening scan results failed; `message` is what the message box said.
  void scanResultsFailed(const QString& message);
  // An SAE folder was loaded, or refused (`message` is what the message box said).
  void saeLoaded(const QString& dir);
  void saeLoadFailed(const QString& dir, const QString& message);

 public:

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  // The parts of the window, one file each: main_window.cpp (construction, layout, settings,
  // drops), main_window_menus.cpp, main_window_ablation.cpp, main_window_status.cpp,
  // main_window_runs.cpp, main_window_models.cpp, main_window_export.cpp, main_window_scan.cpp,
  // main_window_saes.cpp.
  void buildCentral();
  // Gives the heads panel its width back (headsWidth) where the views' minimum allows.
  void applyHeadsWidth();
  bool eventFilter(QObject* watched, QEvent* event) override;
  QObject* viewObject(const QString& id) const;
  // menus
  void buildMenus();
  void showShortcuts();
  void showAbout();
  // ablation
  void buildAblationDock();
  void addHeadActions(int index, QMenu* menu);
  void onAblationsChanged();
  // status
  void buildStatusBar();
  void updateStatus();
  void showBanner(const QString& html, bool error);
  void hideBanner();
  // runs
  void connectEverything();
  void onRunReady(std::shared_ptr<const RunResult> run);
  void onRunFailed(const QString& message);
  // Asks for each view's analysis of the current run for the selection, when it has not yet.
  void requestAnalyses();
  // models
  void onModelChanged(std::shared_ptr<const hs::Model> model);
  void onModelLoadFailed(const QString& dir, const QString& message);
  void refreshModelCombo();
  void updateRecentMenu();
  // sparse autoencoders (main_window_saes.cpp)
  void buildSaeMenu(QMenu* file);
  void updateSaeMenu();
  // A new model: the loaded SAEs that do not fit it are unloaded (a status message says which),
  // then the folders waiting for a model are loaded.
  void onModelChangedForSaes();
  // The command line's --sae-edit, once its SAEs have loaded (or failed to).
  void applyCommandLineSaeEdits();
  // The head ablations plus every edited SAE spliced in: what each run applies.
  hs::Interventions runInterventions();
  // scan
  // dashboards_only: a dashboard build (buildUnitDashboards): its results do not replace the head
  // grid's scores, and LoadedDashboards says how far it is.
  void startScan(const hs::ScanOptions& options, bool dashboards_only = false);
  // A finished or opened scan: its means to the heads panel, and (when it describes heads) the
  // scan to every view. `source` names it in titles.
  void showScanResults(std::shared_ptr<const hs::ScanState> state, const QString& source);

  AnalysisController* controller_ = nullptr;
  Selection* selection_ = nullptr;
  QComboBox* model_combo_ = nullptr;
  PromptEdit* prompt_ = nullptr;
  TokenStrip* tokens_ = nullptr;
  QLabel* banner_ = nullptr;
  QSplitter* splitter_ = nullptr;
  ImageGridView* head_grid_ = nullptr;
  HeadMetricsBar* head_metrics_ = nullptr;
  QLabel* heads_caption_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  Ablations* ablations_ = nullptr;
  AblationPanel* ablation_panel_ = nullptr;
  QDockWidget* ablation_dock_ = nullptr;
  QLabel* status_ablations_ = nullptr;
  // "Keep: first / last n_ctx tokens" for text longer than the model's context.
  QComboBox* keep_choice_ = nullptr;
  std::vector<AnalysisView*> views_;  // the tabs, in registry order
  struct Asked {
    quint64 run_job = 0;
    std::optional<AnalysisKey> key;
  };
  std::vector<Asked> asked_;  // [view] the analysis last asked for
  QLabel* status_model_ = nullptr;
  QLabel* status_tokens_ = nullptr;
  QLabel* status_time_ = nullptr;
  QLabel* status_next_ = nullptr;
  std::optional<std::pair<int, int>> first_head_;  // MainWindowOptions' head, until the first run
  hs::Interventions first_ablations_;              // MainWindowOptions' ablations, until a model is in
  QLabel* status_busy_ = nullptr;     // loading and exporting
  QLabel* status_running_ = nullptr;  // a run in flight
  QProgressBar* progress_ = nullptr;
  QMenu* recent_menu_ = nullptr;
  QTimer debounce_;
  QString loading_dir_;
  QString builtin_dir_;
  QString builtin_error_;
  std::shared_ptr<const RunResult> run_;
  QPointer<QMessageBox> load_error_box_;
  std::unique_ptr<ExportAllJob> export_job_;
  std::unique_ptr<ScanJob> scan_job_;
  QStringList shipped_loading_;  // loadShippedSaes's folders not yet loaded or refused
  std::shared_ptr<const DataSetScan> scan_;
  bool opening_scan_ = false;  // a scan file is being read
  SaeLoader* sae_loader_ = nullptr;
  QMenu* sae_menu_ = nullptr;
  QStringList pending_sae_dirs_;  // waiting for a model
  QString pending_sae_edits_;     // --sae-edit, until its SAEs are in
  int sae_loads_before_edits_ = 0;  // --sae folders still loading before --sae-edit applies
  QPointer<QMessageBox> sae_error_box_;
  QToolButton* scan_cancel_ = nullptr;
  bool restore_settings_ = true;
  int heads_width_ = 0;  // 0: not chosen yet (the first run chooses it by the model's heads)
  QTimer heads_width_timer_;
};

}  // namespace hs::ui
