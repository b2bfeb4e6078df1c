// Runs the model and the views' analyses off the GUI thread. Every request gets a job number; a
// result whose job has been superseded by a newer request is dropped, so the latest request wins
// and the views only ever see consistent, immutable results.
//
// Analyses are registered by id (addAnalysis) and scheduled by one keyed queue: per id, the
// newest request wins, and each run also computes, on its own worker, what every analysis was
// last asked for, moved to the new run (AnalysisSpec::with_every_run), so that asking for it
// when the run lands answers at once. An analysis whose view is hidden comes along only while it
// is cheap: at a long prompt one of them can cost more than the run, and a keystroke would wait
// for a view nobody sees. It is computed when its view is shown again.
//
// Loading a model is a job too: the previous model stays in use until the new one has loaded,
// and a failed load leaves it in place.
#pragma once

#include <QElapsedTimer>
#include <QFuture>
#include <QThreadPool>
#include <QObject>
#include <QString>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ui/controller/results.h"

namespace hs { class Model; }

namespace hs::ui {

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

  // Number of top predictions kept after the last position.
  static constexpr int kTopK = 10;

  // Builds a RunResult synchronously on the calling thread (used by the worker jobs and by the
  // headless exporter). Throws hs::Error.
  // `previous`: an earlier run of the same model, whose common token prefix the core reuses.
  static std::shared_ptr<RunResult> computeRun(std::shared_ptr<const hs::Model> model, const QString& text,
                                               std::shared_ptr<const hs::ActivationCache> previous = nullptr);
  // The same with ablations: the ablated run (which the views show) and, when there are any, the
  // plain run of the same tokens and the comparison of the two (RunResult::baseline, ablation).
  // `previous_plain`: an earlier plain run to reuse the prefix of.
  static std::shared_ptr<RunResult> computeRun(std::shared_ptr<const hs::Model> model, const QString& text,
                                               std::shared_ptr<const hs::ActivationCache> previous,
                                               const hs::Interventions& ablations,
                                               std::shared_ptr<const hs::ActivationCache> previous_plain,
                                               std::shared_ptr<const RunResult> previous_result = nullptr,
                                               hs::OverlongPolicy overlong = hs::OverlongPolicy::TruncateWithWarning);
  // Computes `spec`'s analysis of `run` for `key` on the calling thread, with its bookkeeping
  // filled in. Throws hs::Error (hs::Cancelled when `job` says so).
  static std::shared_ptr<const ViewResult> computeAnalysis(const AnalysisSpec& spec,
                                                           std::shared_ptr<const RunResult> run, const AnalysisKey& key,
                                                           const AnalysisJob& job = {});

  // Registers an analysis that request() can ask for by its id. Ids are unique.
  void addAnalysis(AnalysisSpec spec);
  bool hasAnalysis(const QString& id) const { return slotOf(id) != nullptr; }

  // Whether analysis `id`'s view is on screen (default: yes). A hidden analysis is computed with
  // each run only while it is cheap (isCheap).
  void setShown(const QString& id, bool shown);
  static constexpr double kHiddenAheadMs = 10.0;
  // Whether the current run already computed analysis `id` for `key`: request() then answers
  // at once instead of starting a job.
  bool hasReady(const QString& id, const AnalysisKey& key) const;
  // Whether analysis `id` is cheap enough to compute while its view is hidden: a moving average
  // of its computations' times (which one slow computation does not push over) is at most
  // kHiddenAheadMs, or it has been computed fewer than twice.
  bool isCheap(const QString& id) const;

  // The heads ablated in every run from now on (zero or mean ablations of hook_z); empty: plain
  // runs. Takes effect with the next requestRun.
  void setAblations(hs::Interventions ablations) { ablations_ = std::move(ablations); }
  const hs::Interventions& ablations() const { return ablations_; }
  // Text longer than the model's context: keep its first n_ctx tokens (the default) or BOS and its
  // last ones (where typing happens). Takes effect with the next requestRun.
  void setKeepLast(bool keep_last) { keep_last_ = keep_last; }
  bool keepLast() const { return keep_last_; }

 public Q_SLOTS:
  // Loads a model folder on a worker thread.
  void loadModel(const QString& dir);
  // Uses an already loaded model (tests, the headless exporter).
  void setModel(std::shared_ptr<const hs::Model> model);
  // Tokenizes and runs `text` on the current model.
  void requestRun(const QString& text);
  // Analysis `id` of the current run for `key`. Answered by analysisReady(id, ...), through the
  // event loop, or at once when the run already computed it for this key.
  void request(const QString& id, const AnalysisKey& key);
  // Stops analysis `id`'s job in flight (its AnalysisJob::cancelled turns true); nothing of it is
  // delivered.
  void cancel(const QString& id);

 Q_SIGNALS:
  void loadStarted(const QString& dir);
  void loadProgress(double fraction, const QString& stage);
  void modelChanged(std::shared_ptr<const hs::Model> model);
  void modelLoadFailed(const QString& dir, const QString& message);

  void runStarted(quint64 job);
  void runReady(std::shared_ptr<const hs::ui::RunResult> result);
  void runFailed(const QString& message);
  void analysisReady(const QString& id, std::shared_ptr<const hs::ui::ViewResult> result);
  void analysisFailed(const QString& message);  // not for on-demand analyses: see analysisFailedFor
  void analysisFailedFor(const QString& id, const QString& message);
  // A long analysis's progress (AnalysisJob::progress), on the GUI thread, for the current job only.
  void analysisProgress(const QString& id, double fraction, const QString& what);
  void busyChanged(bool busy);

 private:
  struct Slot;
  Slot* slotOf(const QString& id) const;
  void setRunning(bool running);
  // Keeps `future` until it finishes, so the destructor can wait for it.
  void track(QFuture<void> future);

  std::vector<std::unique_ptr<Slot>> slots_;
  std::shared_ptr<const hs::Model> model_;
  std::shared_ptr<const RunResult> run_;
  QString text_;
  hs::Interventions ablations_;
  bool keep_last_ = false;
  quint64 load_job_ = 0;
  // The newest load's job number, shared with the loading worker so a superseded load stops at its
  // next stage.
  std::shared_ptr<std::atomic<quint64>> latest_load_;
  quint64 run_job_ = 0;
  bool loading_ = false;
  bool running_ = false;
  // The newest run's job number, shared with the workers so a superseded run skips its work.
  std::shared_ptr<std::atomic<quint64>> latest_run_;
  QElapsedTimer clock_;
  // Loads get their own thread so a large model's load never queues runs behind it. Runs all
  // happen on one thread, the only one that keeps an OpenMP team (hs::release_thread_team).
  QThreadPool load_pool_;
  QThreadPool run_pool_;
  // Every worker started and not yet known to be finished. No worker outlives the controller: the
  // workers post to it, and a thread still running at exit races the program's teardown.
  std::vector<QFuture<void>> in_flight_;
};

}  // namespace hs::ui
