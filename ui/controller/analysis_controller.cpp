#include "ui/controller/analysis_controller.h"

#include <QFuture>
#include <QMetaObject>
#include <QPointer>
#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <exception>

#include "core/error.h"
#include "core/model/model.h"
#include "core/model/thread_scope.h"
#include "core/analysis/view_data.h"
#include "ui/base/deliver.h"
#include "ui/controller/grid_images.h"
#include "ui/controller/head_metrics.h"

namespace hs::ui {
namespace {

// What a worker hands back: a result or a message for a person, never an exception (QFuture
// only carries QException subclasses across threads).
template <typename T>
struct Outcome {
  std::shared_ptr<T> value;
  QString error;
};

template <typename T, typename F>
Outcome<T> capture(F&& f) {
  Outcome<T> out;
  try {
    out.value = f();
  } catch (const hs::Error& e) {
    out.error = QString::fromStdString(e.what());
  } catch (const std::bad_alloc&) {
    out.error = QStringLiteral("Out of memory. Try a shorter prompt or a smaller model.");
  } catch (const std::exception& e) {
    out.error = QStringLiteral("Unexpected error: %1").arg(QString::fromStdString(e.what()));
  }
  return out;
}

// The views' analyses are small products; on a pool thread an OpenMP team costs more than it
// saves (docs/benchmarks.md, "Measurements behind the code"). OpenMP's thread count is per
// calling thread, so this only affects the worker it runs on.
void useOneThread() { omp_set_num_threads(1); }

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

AnalysisKey followRun(AnalysisKey key, unsigned reads, bool pos_was_last, const RunResult& run) {
  if ((reads & kReadsPosition) || key.pos >= 0) key.pos = pos_was_last || key.pos < 0 ? run.n_pos() - 1 : std::min(key.pos, run.n_pos() - 1);
  if (reads & kReadsLayer) key.layer = std::clamp(key.layer, 0, run.n_layer() - 1);
  if (reads & kReadsHead) key.head = std::clamp(key.head, 0, run.n_head() - 1);
  return key;
}

// One registered analysis: what the views asked for last, its newest job and what the current
// run computed for it ahead of the asking.
struct AnalysisController::Slot {
  AnalysisSpec spec;
  quint64 job = 0;
  // The newest job number, shared with the workers so a queued job that has been superseded
  // skips its work instead of computing a result nobody will see.
  std::shared_ptr<std::atomic<quint64>> latest = std::make_shared<std::atomic<quint64>>(0);
  std::optional<AnalysisKey> wanted;
  bool wanted_pos_is_last = true;  // the selection was on the last token: it follows typing
  std::shared_ptr<const ViewResult> prefetched;
  bool shown = true;
  // How long it takes to compute: a moving average over its delivered results, so that one slow
  // computation (the other core busy for a moment, a first computation's one-time work) does not
  // make it "expensive"; judged only once two results are in.
  double cost_ms = 0.0;
  int measurements = 0;
  void measured(double ms) {
    cost_ms = measurements++ == 0 ? ms : 0.75 * cost_ms + 0.25 * ms;
  }
  bool cheap() const { return measurements < 2 || cost_ms <= AnalysisController::kHiddenAheadMs; }
};

AnalysisController::AnalysisController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<std::shared_ptr<const hs::ui::RunResult>>();
  qRegisterMetaType<std::shared_ptr<const hs::ui::ViewResult>>();
  latest_run_ = std::make_shared<std::atomic<quint64>>(0);
  latest_load_ = std::make_shared<std::atomic<quint64>>(0);
  load_pool_.setMaxThreadCount(1);
  run_pool_.setMaxThreadCount(1);
  clock_.start();
}

// Every job counter moves past its workers, so a queued job skips its work, a long analysis sees
// itself cancelled and a load stops at its next stage; then the workers are waited for. Their
// continuations are tied to this object and are dropped with it.
AnalysisController::~AnalysisController() {
  constexpr quint64 kGone = ~quint64{0};
  latest_run_->store(kGone);
  latest_load_->store(kGone);
  for (const auto& slot : slots_) slot->latest->store(kGone);
  for (QFuture<void>& f : in_flight_) f.waitForFinished();
}

void AnalysisController::track(QFuture<void> future) {
  std::erase_if(in_flight_, [](const QFuture<void>& f) { return f.isFinished(); });
  in_flight_.push_back(std::move(future));
}

void AnalysisController::addAnalysis(AnalysisSpec spec) {
  if (slotOf(spec.id)) return;
  auto slot = std::make_unique<Slot>();
  slot->spec = std::move(spec);
  slots_.push_back(std::move(slot));
}

void AnalysisController::setShown(const QString& id, bool shown) {
  if (Slot* slot = slotOf(id)) slot->shown = shown;
}

bool AnalysisController::hasReady(const QString& id, const AnalysisKey& key) const {
  const Slot* slot = slotOf(id);
  return slot && run_ && slot->prefetched && slot->prefetched->run_job == run_->job && slot->prefetched->key == key;
}

bool AnalysisController::isCheap(const QString& id) const {
  const Slot* slot = slotOf(id);
  return slot && slot->cheap();
}

AnalysisController::Slot* AnalysisController::slotOf(const QString& id) const {
  for (const auto& s : slots_)
    if (s->spec.id == id) return s.get();
  return nullptr;
}

std::shared_ptr<RunResult> AnalysisController::computeRun(std::shared_ptr<const hs::Model> model, const QString& text,
                                                         std::shared_ptr<const hs::ActivationCache> previous) {
  return computeRun(std::move(model), text, std::move(previous), {}, nullptr);
}

std::shared_ptr<RunResult> AnalysisController::computeRun(std::shared_ptr<const hs::Model> model, const QString& text,
                                                         std::shared_ptr<const hs::ActivationCache> previous,
                                                         const hs::Interventions& ablations,
                                                         std::shared_ptr<const hs::ActivationCache> previous_plain,
                                                         std::shared_ptr<const RunResult> previous_result,
                                                         hs::OverlongPolicy overlong) {
  // The earlier run's thumbnails can be reused only if they belong to the cache the run extends.
  const bool same_cache = previous_result && previous && previous_result->run.cache == previous;
  if (!model) throw hs::Error("No model is loaded. Open a model folder (File > Open Model Folder).");
  const auto t0 = std::chrono::steady_clock::now();
  auto result = std::make_shared<RunResult>();
  hs::TextRunOptions options;
  options.overlong = overlong;
  options.previous = std::move(previous);
  options.run.interventions = ablations;
  result->run = hs::run_text(model, text.toStdString(), options);
  if (!ablations.empty()) {
    // The plain run of the same tokens, for the before/after panel. Toggling an ablation on an
    // unchanged prompt finds it in previous_plain whole (run_tokens shows it again).
    result->baseline = hs::run_tokens(model, result->run.tokens, hs::RunOptions{}, std::move(previous_plain)).cache;
    result->ablation = hs::compare_runs(*result->baseline, *result->run.cache, kTopK);
  }
  for (const std::string& label : result->run.token_labels) result->labels << QString::fromStdString(label);
  hs::RunOverview overview =
      hs::overview_of_run(*result->run.cache, kTopK, 64, same_cache ? &previous_result->thumbnail_grids : nullptr);
  result->next = std::move(overview.next);
  result->thumbnails.reserve(overview.thumbnails.size());
  for (const hs::PooledGrid& grid : overview.thumbnails) result->thumbnails.push_back(patternImage(grid));
  result->thumbnail_grids = std::move(overview.thumbnails);
  result->head_metrics = computeHeadMetrics(*result, same_cache ? previous_result.get() : nullptr);
  result->worker_ms = msSince(t0);
  return result;
}

std::shared_ptr<const ViewResult> AnalysisController::computeAnalysis(const AnalysisSpec& spec,
                                                                      std::shared_ptr<const RunResult> run,
                                                                      const AnalysisKey& key, const AnalysisJob& job) {
  QElapsedTimer clock;
  clock.start();
  std::shared_ptr<ViewResult> result = spec.compute_long ? spec.compute_long(*run, key, job) : spec.compute(*run, key);
  result->compute_ms = static_cast<double>(clock.nsecsElapsed()) / 1e6;
  result->run_job = run->job;
  result->key = key;
  result->run = std::move(run);
  return result;
}

void AnalysisController::loadModel(const QString& dir) {
  const quint64 job = ++load_job_;
  latest_load_->store(job);
  loading_ = true;
  Q_EMIT loadStarted(dir);
  QPointer<AnalysisController> self(this);
  auto progress = [self, job, latest = latest_load_](double fraction, const std::string& stage) {
    if (latest->load() != job) throw hs::Cancelled();  // superseded, or the controller is going
    const QString text = QString::fromStdString(stage);
    QMetaObject::invokeMethod(
        self.data(),
        [self, job, fraction, text] {
          if (self && self->load_job_ == job) Q_EMIT self->loadProgress(fraction, text);
        },
        Qt::QueuedConnection);
  };
  const std::string path = dir.toStdString();
  auto loaded = QtConcurrent::run(&load_pool_, [path, progress] {
    auto out = capture<const hs::Model>([&] { return hs::Model::load(path, progress); });
    hs::release_thread_team();  // the load's team: only the run thread keeps one
    return out;
  });
  track(QFuture<void>(loaded));
  deliverLater(loaded, this, [this, job, dir](Outcome<const hs::Model> out) {
    if (job != load_job_) return;  // a newer load was asked for
    loading_ = false;
    if (!out.value) {
      Q_EMIT modelLoadFailed(dir, out.error);
      return;
    }
    setModel(out.value);
  });
}

void AnalysisController::setModel(std::shared_ptr<const hs::Model> model) {
  model_ = std::move(model);
  run_.reset();
  Q_EMIT modelChanged(model_);
}

void AnalysisController::requestRun(const QString& text) {
  text_ = text;
  if (!model_) return;
  const quint64 job = ++run_job_;
  auto latest = latest_run_;
  latest->store(job);
  setRunning(true);
  Q_EMIT runStarted(job);
  const qint64 requested_at = clock_.nsecsElapsed();
  // Typing at the end of the prompt extends the previous tokens: the core reuses that prefix.
  std::shared_ptr<const hs::ActivationCache> previous, previous_plain;
  std::shared_ptr<const RunResult> previous_result;
  if (run_ && run_->run.model == model_) {
    previous = run_->run.cache;
    previous_plain = run_->plainCache();
    previous_result = run_;
  }
  // The analyses the views will ask for once this run lands, computed right after it on the same
  // worker (one hop instead of one per view: a keystroke's views are ready with the run).
  struct Ahead {
    AnalysisSpec spec;
    std::optional<AnalysisKey> wanted;
    bool pos_was_last = true;
    std::shared_ptr<const ViewResult> result;
  };
  auto ahead = std::make_shared<std::vector<Ahead>>();
  for (const auto& slot : slots_)
    if (slot->spec.with_every_run && (slot->shown || isCheap(slot->spec.id)))
      ahead->push_back({slot->spec, slot->wanted, slot->wanted_pos_is_last, nullptr});
  auto ran = QtConcurrent::run(&run_pool_, [model = model_, text, job, latest, previous, previous_plain, previous_result,
                                ablations = ablations_, ahead,
                                overlong = keep_last_ ? hs::OverlongPolicy::KeepLastWithWarning
                                                      : hs::OverlongPolicy::TruncateWithWarning] {
    return capture<RunResult>([&]() -> std::shared_ptr<RunResult> {
      if (latest->load() != job) return nullptr;  // superseded before it started
      auto result = computeRun(model, text, previous, ablations, previous_plain, previous_result, overlong);
      result->job = job;
      for (Ahead& a : *ahead) {
        if (latest->load() != job) break;
        // Best effort: a failure here only means the view asks again and sees the error then.
        try {
          useOneThread();
          const AnalysisKey key = followRun(a.wanted.value_or(AnalysisKey{}), a.spec.reads, a.pos_was_last, *result);
          a.result = computeAnalysis(a.spec, result, key);
        } catch (const std::exception&) {
          a.result.reset();
        }
      }
      return result;
    });
  });
  track(QFuture<void>(ran));
  deliverLater(ran, this, [this, job, requested_at, ahead](Outcome<RunResult> out) {
    if (job != run_job_) return;  // stale: a newer run was requested meanwhile
    setRunning(false);
    if (!out.value) {
      if (!out.error.isEmpty()) Q_EMIT runFailed(out.error);
      return;
    }
    out.value->latency_ms = (clock_.nsecsElapsed() - requested_at) / 1e6;
    run_ = out.value;
    for (Ahead& a : *ahead)
      if (Slot* slot = slotOf(a.spec.id); slot && a.result) {
        slot->measured(a.result->compute_ms);
        slot->prefetched = std::move(a.result);
      }
    Q_EMIT runReady(run_);
  });
}

void AnalysisController::request(const QString& id, const AnalysisKey& key) {
  Slot* slot = slotOf(id);
  if (!slot) {
    Q_EMIT analysisFailed(QStringLiteral("No analysis named \"%1\" is registered.").arg(id));
    return;
  }
  slot->wanted = key;
  slot->wanted_pos_is_last = run_ && key.pos == run_->n_pos() - 1;
  if (!run_) return;
  const quint64 job = ++slot->job;
  slot->latest->store(job);
  auto pre = std::move(slot->prefetched);
  if (pre && pre->run_job == run_->job && pre->key == key) {
    Q_EMIT analysisReady(id, pre);  // computed with the run
    return;
  }
  // A long analysis reports progress through the event loop and stops once superseded or
  // cancelled (the job number moved on).
  AnalysisJob context;
  QPointer<AnalysisController> self(this);
  context.progress = [self, id, job, latest = slot->latest](double fraction, const QString& what) {
    if (latest->load() != job || !self) return;
    QMetaObject::invokeMethod(
        self.data(),
        [self, id, job, fraction, what] {
          Slot* s = self ? self->slotOf(id) : nullptr;
          if (s && s->job == job) Q_EMIT self->analysisProgress(id, fraction, what);
        },
        Qt::QueuedConnection);
  };
  context.cancelled = [job, latest = slot->latest] { return latest->load() != job; };
  auto computed = QtConcurrent::run([spec = slot->spec, run = run_, key, job, latest = slot->latest, context] {
    auto out = capture<const ViewResult>([&]() -> std::shared_ptr<const ViewResult> {
      if (latest->load() != job) return nullptr;
      useOneThread();
      try {
        return computeAnalysis(spec, run, key, context);
      } catch (const hs::Cancelled&) {
        return nullptr;  // asked for: nothing to report
      }
    });
    hs::release_thread_team();  // a long analysis (patching) may have used both cores
    return out;
  });
  track(QFuture<void>(computed));
  deliverLater(computed, this, [this, id, job, on_demand = slot->spec.on_demand](Outcome<const ViewResult> out) {
    Slot* slot = slotOf(id);
    if (!slot || job != slot->job) return;
    if (!out.value) {
      if (!out.error.isEmpty()) {
        // An on-demand analysis shows its failure itself, beside the inputs the person gave.
        if (!on_demand) Q_EMIT analysisFailed(out.error);
        Q_EMIT analysisFailedFor(id, out.error);
      }
      return;
    }
    slot->measured(out.value->compute_ms);
    if (!run_ || out.value->run_job != run_->job) return;  // computed for a replaced run
    Q_EMIT analysisReady(id, out.value);
  });
}

void AnalysisController::cancel(const QString& id) {
  Slot* slot = slotOf(id);
  if (!slot) return;
  slot->latest->store(++slot->job);
}

void AnalysisController::setRunning(bool running) {
  if (running == running_) return;
  running_ = running;
  Q_EMIT busyChanged(running_ || loading_);
}

}  // namespace hs::ui
