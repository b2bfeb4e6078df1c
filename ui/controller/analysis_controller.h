// Runs the model and the analyses off the GUI thread. Every request gets a job number; a result
// whose job has been superseded by a newer request is dropped, so the latest request wins and
// the views only ever see consistent, immutable results.
//
// Loading a model is a job too: the previous model stays in use until the new one has loaded,
// and a failed load leaves it in place.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QString>

#include <cstdint>
#include <memory>
#include <optional>

#include "ui/controller/results.h"

namespace hs { class Model; }

namespace hs::ui {

struct LatestJobs;

class AnalysisController : public QObject {
  Q_OBJECT

 public:
  explicit AnalysisController(QObject* parent = nullptr);
  ~AnalysisController() override;

  const std::shared_ptr<const hs::Model>& model() const { return model_; }
  const std::shared_ptr<const RunResult>& currentRun() const { return run_; }
  bool isLoading() const { return loading_; }
  bool isRunning() const { return running_; }
  QString lastText() const { return text_; }

  // Number of top predictions kept per position.
  static constexpr int kTopK = 10;

  // Builds a RunResult synchronously on the calling thread (used by the worker jobs and by the
  // headless exporter). Throws hs::Error.
  // `previous`: an earlier run of the same model, whose common token prefix the core reuses.
  static std::shared_ptr<RunResult> computeRun(std::shared_ptr<const hs::Model> model, const QString& text,
                                               std::shared_ptr<const hs::ActivationCache> previous = nullptr);
  static std::shared_ptr<PositionResult> computePosition(std::shared_ptr<const RunResult> run, int pos,
                                                         std::optional<int32_t> target);
  static std::shared_ptr<LayerResult> computeLayer(std::shared_ptr<const RunResult> run, int layer);

 public Q_SLOTS:
  // Loads a model folder on a worker thread.
  void loadModel(const QString& dir);
  // Uses an already loaded model (tests, the headless exporter).
  void setModel(std::shared_ptr<const hs::Model> model);
  // Tokenizes and runs `text` on the current model.
  void requestRun(const QString& text);
  // Analyses at one position of the current run; target empty = the predicted next token.
  void requestPosition(int pos, std::optional<int32_t> target);
  void requestLayer(int layer);

 Q_SIGNALS:
  void loadStarted(const QString& dir);
  void loadProgress(double fraction, const QString& stage);
  void modelChanged(std::shared_ptr<const hs::Model> model);
  void modelLoadFailed(const QString& dir, const QString& message);

  void runStarted(quint64 job);
  void runReady(std::shared_ptr<const hs::ui::RunResult> result);
  void runFailed(const QString& message);
  void positionReady(std::shared_ptr<const hs::ui::PositionResult> result);
  void layerReady(std::shared_ptr<const hs::ui::LayerResult> result);
  void analysisFailed(const QString& message);
  void busyChanged(bool busy);

 private:
  void setRunning(bool running);

  // The analyses the views asked for last, so a run can compute them for its new result on the
  // same worker before handing it over (one hop instead of three: a keystroke's views are ready
  // with the run). `wanted_pos_` of -1: none asked yet.
  int wanted_pos_ = -1;
  std::optional<int32_t> wanted_target_;
  int wanted_layer_ = -1;
  bool wanted_pos_is_last_ = true;  // the selection was on the last token: it follows typing
  // Computed with the current run, waiting for the views' request (see requestPosition/Layer).
  std::shared_ptr<const PositionResult> prefetched_position_;
  std::optional<int32_t> prefetched_target_;
  std::shared_ptr<const LayerResult> prefetched_layer_;

  std::shared_ptr<const hs::Model> model_;
  std::shared_ptr<const RunResult> run_;
  QString text_;
  quint64 load_job_ = 0;
  quint64 run_job_ = 0;
  quint64 position_job_ = 0;
  quint64 layer_job_ = 0;
  bool loading_ = false;
  bool running_ = false;
  // The newest job numbers, shared with the workers so a superseded job skips its work.
  std::shared_ptr<LatestJobs> latest_;
  QElapsedTimer clock_;
};

}  // namespace hs::ui
