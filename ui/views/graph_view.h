// The Graph view (issue 26): the attribution graph of the prompt's next-token prediction over the
// loaded transcoders (core/analysis/attribution_graph.h), pruned by influence with both thresholds
// adjustable live (core/analysis/graph_prune.h), drawn by layer and position (GraphCanvas). Hover
// shows a node's numbers and a feature's top logits; a click highlights its strongest paths to the
// logits and lists its strongest edges; a double-click opens a feature in the Features view (its
// dashboard). Nodes can be pinned and grouped into named supernodes. The graph saves as
// Neuronpedia's graph JSON, and such files (ours or circuit-tracer's) open here too: an opened
// file is shown as what it is, never as the typed prompt's graph.
#pragma once

#include <QFuture>
#include <QString>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/analysis/attribution_graph.h"
#include "core/analysis/graph_prune.h"
#include "core/analysis/info_routes.h"
#include "core/analysis/qk_trace.h"
#include "core/io/graph_json.h"
#include "ui/views/analysis_view.h"
#include "ui/widgets/graph_canvas.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QScrollArea;
class QTextBrowser;
class QTimer;

namespace hs {
class Model;
struct Sae;
}  // namespace hs

namespace hs::ui {

class RefreshWhenShown;

// A graph's pruner, used by one worker at a time (it caches the edge scores of the last node
// threshold).
struct GraphPruning {
  std::mutex mutex;
  std::unique_ptr<hs::GraphPruner> pruner;
};

// One pruning of a graph, as the view draws it and saves it.
struct PrunedPicture {
  double node_threshold = 0.8, edge_threshold = 0.98;
  std::shared_ptr<const hs::PrunedGraph> pruned;
  std::shared_ptr<const GraphPicture> picture;
  double prune_ms = 0.0;
};

struct GraphResult : ViewResult {
  QString mode;  // GraphView::kFeatures, kNeurons or kRoutes
  // Why there is no graph (no transcoders loaded, a layer without one, ...): shown instead.
  QString problem;
  // Routes mode: the information-flow routes and their picture (no pruning: the threshold is the
  // analysis's own input).
  std::shared_ptr<const hs::InfoRoutes> routes;
  std::shared_ptr<const GraphPicture> routes_picture;
  std::shared_ptr<const hs::AttributionGraph> graph;
  std::shared_ptr<const hs::Model> model;  // the run's (ViewResult::run is set only after compute)
  std::vector<std::shared_ptr<const hs::Sae>> transcoders;
  hs::GraphLabels labels;
  std::shared_ptr<GraphPruning> pruning;
  PrunedPicture first;  // at the default thresholds
  double build_ms = 0.0;
};

class GraphView : public AnalysisView {
  Q_OBJECT

 public:
  static ViewDescriptor descriptor();
  static constexpr double kNodeThreshold = 0.8, kEdgeThreshold = 0.98;
  // Features whose top logits the hover shows (the most influential kept ones): each is a product
  // with the unembedding, made on the worker.
  static constexpr int kLogitFeatures = 200;
  static constexpr double kRouteThreshold = 0.04;  // LM-TT's default
  static constexpr int kQkPairs = 12;               // pairs a QK trace lists
  static inline const QString kNodeThresholdOption = QStringLiteral("node-threshold"),
                              kEdgeThresholdOption = QStringLiteral("edge-threshold"),
                              kModeOption = QStringLiteral("graph-mode"),
                              kRouteThresholdOption = QStringLiteral("route-threshold");
  // The modes: nodes are transcoder features, MLP neurons, or the routes' residual states.
  static inline const QString kFeatures = QStringLiteral("features"), kNeurons = QStringLiteral("neurons"),
                              kRoutes = QStringLiteral("routes");

  // The graph of `run` over the transcoders named in key.params (LoadedSaes ids), pruned at the
  // default thresholds. Throws hs::Error when a transcoder is gone or does not fit.
  // With `job`: progress while the backward passes run, and a stop when it is cancelled.
  static std::shared_ptr<GraphResult> compute(const RunResult& run, const AnalysisKey& key, const AnalysisJob* job = nullptr);
  // One pruning of `result`'s graph: any thread (it takes the pruner's lock).
  static PrunedPicture prune(const GraphResult& result, double node_threshold, double edge_threshold);

  GraphView(Selection* selection, QWidget* parent = nullptr);
  ~GraphView() override;

  void setRun(std::shared_ptr<const RunResult> run) override;
  void setResult(std::shared_ptr<const ViewResult> result) override;
  std::shared_ptr<const ViewResult> result() const override { return result_; }
  AnalysisKey analysisKey(AnalysisKey selected) const override;
  std::vector<ExportFigure> exportFigures(const RunResult& run) override;
  QString exportSkipReason(const RunResult& run) const override;
  ViewInputs viewInputs() const override;
  void setViewInputs(const ViewInputs& inputs) override;
  void showProgress(double fraction, const QString& what) override;
  void showFailure(const QString& message) override;

  FigureText figureText() const override;
  QString figureFileStem() const override;
  QSize figureSize() const override;
  void paintFigure(QPainter& painter, QSize size) override;

  // Thresholds: each change prunes again on a worker.
  void setThresholds(double node_threshold, double edge_threshold);
  double nodeThreshold() const;
  double edgeThreshold() const;
  QString mode() const;
  void setMode(const QString& mode);
  double routeThreshold() const;
  void setRouteThreshold(double threshold);
  // Why head `head` of `layer` attends from `query_pos` to `key_pos` (QK tracing, on a worker):
  // with the graph's transcoders when every layer has one loaded, else with MLP neurons. The
  // result shows in the details panel; qkTrace() is the last one finished (null: none yet).
  void traceAttention(int layer, int head, int query_pos, int key_pos);
  std::shared_ptr<const hs::QkTrace> qkTrace() const { return qk_; }
  // Whether the drawn graph is the current run's at the thresholds set (no pruning on its way).
  bool isCurrent() const;
  // Opens a graph file (Neuronpedia's JSON) on a worker; closeFile() returns to the prompt's graph.
  void openFile(const QString& path);
  void closeFile();
  bool showingFile() const { return !file_path_.isEmpty(); }
  // Writes the shown graph at the thresholds set as Neuronpedia's graph JSON (atomically); returns
  // an empty string, or why it could not.
  QString saveJson(const QString& path) const;

  // For tests and screenshots.
  GraphCanvas* canvas() const { return canvas_; }
  QDoubleSpinBox* nodeThresholdBox() const { return node_box_; }
  QDoubleSpinBox* edgeThresholdBox() const { return edge_box_; }
  QCheckBox* pinnedOnlyBox() const { return pinned_only_; }
  QComboBox* modeBox() const { return mode_box_; }
  QSpinBox* qkQueryBox() const { return qk_query_; }
  QSpinBox* qkKeyBox() const { return qk_key_; }
  QPushButton* qkButton() const { return qk_button_; }
  QTextBrowser* details() const { return details_; }
  QString statusText() const;
  QString messageText() const;
  const PrunedPicture& shownPruning() const { return shown_; }

 private:
  void refresh();
  void updateStatus();
  void updateDetails();
  void startPrune();
  void showNodeMenu(int index, const QPoint& global_pos);
  void openNode(int index);
  QString qkHtml() const;
  // The QK row follows the selection: its head, its position as the query, and the key that head
  // attends to most from there.
  void updateQkRow();
  // Whether the model's folder carries SAEs of its own (its saes/), listed once per folder.
  bool modelHasSaes(const hs::Model& model) const;

  std::shared_ptr<const RunResult> run_;
  std::shared_ptr<const GraphResult> result_;
  PrunedPicture shown_;        // of result_
  quint64 prune_job_ = 0;
  bool prune_pending_ = false;
  QString failure_, progress_;
  // An opened graph file, shown instead of the prompt's graph.
  QString file_path_;
  std::shared_ptr<const GraphPicture> file_picture_;
  QString file_summary_;
  quint64 file_job_ = 0;
  std::vector<QFuture<void>> in_flight_;
  mutable std::string shipped_for_;  // modelHasSaes's folder and answer
  mutable bool has_shipped_ = false;
  // The last QK trace asked for (job number), and the last finished, or why it failed.
  quint64 qk_job_ = 0;
  std::shared_ptr<const hs::QkTrace> qk_;
  QString qk_error_;
  QStringList qk_tokens_;  // the traced run's tokens, for labels

  QLabel* title_ = nullptr;
  QLabel* message_ = nullptr;
  QLabel* status_ = nullptr;
  QComboBox* mode_box_ = nullptr;
  QDoubleSpinBox* route_box_ = nullptr;
  QWidget* prune_controls_ = nullptr;
  QWidget* route_controls_ = nullptr;
  QDoubleSpinBox* node_box_ = nullptr;
  QDoubleSpinBox* edge_box_ = nullptr;
  QCheckBox* pinned_only_ = nullptr;
  // "Why does the selected head attend from q to k?": any attention edge, in every mode.
  QLabel* qk_head_ = nullptr;
  QSpinBox* qk_query_ = nullptr;
  QSpinBox* qk_key_ = nullptr;
  QPushButton* qk_button_ = nullptr;
  QPushButton* open_button_ = nullptr;
  QPushButton* save_button_ = nullptr;
  GraphCanvas* canvas_ = nullptr;
  QScrollArea* scroll_ = nullptr;
  // The graph (a result or an opened file) the canvas was last scrolled to the logits for.
  const void* scrolled_for_ = nullptr;
  QTextBrowser* details_ = nullptr;
  QTimer* prune_timer_ = nullptr;
  RefreshWhenShown* refresher_ = nullptr;
};

}  // namespace hs::ui
