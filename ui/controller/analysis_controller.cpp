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
#include "ui/controller/deliver.h"
#include "ui/controller/thumbnails.h"

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

// The per-position and per-layer analyses are small products; on a pool thread an OpenMP team
// costs more than it saves (measured: the layer analysis of the built-in model arrived ~90 ms
// after the run on a loaded 2-core machine, ~1 ms with one thread). OpenMP's thread count is
// per calling thread, so this only affects the worker it runs on.
void useOneThread() { omp_set_num_threads(1); }

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The pools: loads get their own thread so a 500 MB load never queues runs behind it.
QThreadPool* loadPool() {
  static QThreadPool* pool = [] {
    auto* p = new QThreadPool;
    p->setMaxThreadCount(1);
    return p;
  }();
  return pool;
}

// The q-quantile of |x| over the matrices' values, from at most 2^14 evenly spaced samples: a
// colour range needs no more, and it is computed with every keystroke's layer analysis (all
// 55K values of the built-in model's 8 heads at 27 tokens took 0.3-0.5 ms; 16K take 0.1).
float absQuantile(const std::vector<hs::RowMatrixXf>& ms, double q) {
  size_t total = 0;
  for (const auto& m : ms) total += static_cast<size_t>(m.size());
  if (total == 0) return 0.0f;
  const size_t stride = std::max<size_t>(1, (total + (size_t{1} << 14) - 1) >> 14);
  std::vector<float> sample;
  sample.reserve(total / stride + 1);
  size_t i = 0;
  for (const auto& m : ms)
    for (Eigen::Index k = 0; k < m.size(); ++k, ++i)
      if (i % stride == 0) sample.push_back(std::abs(m.data()[k]));
  const auto nth = sample.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(sample.size() - 1));
  std::nth_element(sample.begin(), nth, sample.end());
  return *nth;
}

}  // namespace

// Job numbers readable from worker threads, so a queued job that has already been superseded
// skips its work instead of computing a result nobody will see.
struct LatestJobs {
  std::atomic<quint64> run{0}, position{0}, layer{0};
};

AnalysisController::AnalysisController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<std::shared_ptr<const hs::ui::RunResult>>();
  qRegisterMetaType<std::shared_ptr<const hs::ui::PositionResult>>();
  qRegisterMetaType<std::shared_ptr<const hs::ui::LayerResult>>();
  latest_ = std::make_shared<LatestJobs>();
  clock_.start();
}

// Workers hold copies of their inputs and a share of latest_; their continuations are tied to
// this object and are dropped when it goes, so nothing waits here.
AnalysisController::~AnalysisController() = default;

std::shared_ptr<RunResult> AnalysisController::computeRun(std::shared_ptr<const hs::Model> model, const QString& text,
                                                         std::shared_ptr<const hs::ActivationCache> previous) {
  if (!model) throw hs::Error("No model is loaded. Open a model folder (File > Open Model Folder).");
  const auto t0 = std::chrono::steady_clock::now();
  auto result = std::make_shared<RunResult>();
  hs::TextRunOptions options;
  options.overlong = hs::OverlongPolicy::TruncateWithWarning;
  options.previous = std::move(previous);
  result->run = hs::run_text(std::move(model), text.toStdString(), options);
  const hs::ActivationCache& cache = *result->run.cache;
  for (const std::string& label : result->run.token_labels) result->labels << QString::fromStdString(label);
  result->next = hs::top_predictions(cache, cache.n_pos() - 1, kTopK);
  const int n_head = cache.config().n_heads;
  result->thumbnails.reserve(static_cast<size_t>(cache.n_layer() * n_head));
  for (int l = 0; l < cache.n_layer(); ++l)
    for (int h = 0; h < n_head; ++h) result->thumbnails.push_back(patternThumbnail(cache, l, h));
  result->worker_ms = msSince(t0);
  return result;
}

std::shared_ptr<PositionResult> AnalysisController::computePosition(std::shared_ptr<const RunResult> run, int pos,
                                                                    std::optional<int32_t> target) {
  const hs::ActivationCache& cache = *run->run.cache;
  pos = std::clamp(pos, 0, cache.n_pos() - 1);
  auto result = std::make_shared<PositionResult>();
  result->run_job = run->job;
  result->pos = pos;
  result->top = hs::top_predictions(cache, pos, kTopK);
  result->target_is_prediction = !target.has_value();
  result->target = target.value_or(result->top.empty() ? 0 : result->top.front().id);
  result->write_norms = hs::head_write_norms(cache, pos);
  result->parts = hs::decompose_residual(cache, pos);
  result->dla = hs::direct_logit_attribution(cache, result->parts, result->target);
  result->run = std::move(run);
  return result;
}

std::shared_ptr<LayerResult> AnalysisController::computeLayer(std::shared_ptr<const RunResult> run, int layer) {
  auto result = std::make_shared<LayerResult>();
  result->run_job = run->job;
  result->layer = std::clamp(layer, 0, run->n_layer() - 1);
  result->cs = hs::concat_vs_sum(*run->run.cache, result->layer);
  const float out_range = std::max(result->cs.via_concat.cwiseAbs().maxCoeff(), result->cs.via_sum.cwiseAbs().maxCoeff());
  result->output_range = out_range > 0.0f ? out_range : 1.0f;
  const float head_range = absQuantile(result->cs.head_results, 0.995);
  result->head_range = head_range > 0.0f ? head_range : result->output_range;
  for (const hs::RowMatrixXf& r : result->cs.head_results)
    result->head_result_images.push_back(signedMatrixImage(r, result->head_range));
  result->run = std::move(run);
  return result;
}

void AnalysisController::loadModel(const QString& dir) {
  const quint64 job = ++load_job_;
  loading_ = true;
  Q_EMIT loadStarted(dir);
  QPointer<AnalysisController> self(this);
  auto progress = [self, job](double fraction, const std::string& stage) {
    const QString text = QString::fromStdString(stage);
    QMetaObject::invokeMethod(
        self.data(),
        [self, job, fraction, text] {
          if (self && self->load_job_ == job) Q_EMIT self->loadProgress(fraction, text);
        },
        Qt::QueuedConnection);
  };
  const std::string path = dir.toStdString();
  auto loaded = QtConcurrent::run(loadPool(), [path, progress] {
    return capture<const hs::Model>([&] { return hs::Model::load(path, progress); });
  });
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
  auto jobs = latest_;
  jobs->run = job;
  setRunning(true);
  Q_EMIT runStarted(job);
  const qint64 requested_at = clock_.nsecsElapsed();
  // Typing at the end of the prompt extends the previous tokens: the core reuses that prefix.
  std::shared_ptr<const hs::ActivationCache> previous;
  if (run_ && run_->run.model == model_) previous = run_->run.cache;
  // The analyses the views will ask for once this run lands, computed right after it on the same
  // worker: the position follows the last token if the selection was there, the layer stays.
  struct Prefetch {
    std::shared_ptr<const PositionResult> position;
    std::shared_ptr<const LayerResult> layer;
  };
  auto prefetch = std::make_shared<Prefetch>();
  const bool follow_last = wanted_pos_ < 0 || wanted_pos_is_last_;
  const int pos = wanted_pos_, layer = std::max(wanted_layer_, 0);
  const std::optional<int32_t> target = wanted_target_;
  auto ran = QtConcurrent::run([model = model_, text, job, jobs, previous, prefetch, follow_last, pos, layer, target] {
    return capture<RunResult>([&]() -> std::shared_ptr<RunResult> {
      if (jobs->run.load() != job) return nullptr;  // superseded before it started
      auto result = computeRun(model, text, previous);
      result->job = job;
      if (jobs->run.load() == job) {
        // Best effort: a failure here only means the views ask again and see the error then.
        try {
          useOneThread();
          const int n = result->n_pos();
          prefetch->position = computePosition(result, follow_last ? n - 1 : std::min(pos, n - 1), target);
          prefetch->layer = computeLayer(result, std::min(layer, result->n_layer() - 1));
        } catch (const std::exception&) {
          prefetch->position.reset();
          prefetch->layer.reset();
        }
      }
      return result;
    });
  });
  deliverLater(ran, this, [this, job, requested_at, prefetch, target](Outcome<RunResult> out) {
    if (job != run_job_) return;  // stale: a newer run was requested meanwhile
    setRunning(false);
    if (!out.value) {
      if (!out.error.isEmpty()) Q_EMIT runFailed(out.error);
      return;
    }
    out.value->latency_ms = (clock_.nsecsElapsed() - requested_at) / 1e6;
    run_ = out.value;
    prefetched_position_ = prefetch->position;
    prefetched_target_ = target;
    prefetched_layer_ = prefetch->layer;
    Q_EMIT runReady(run_);
  });
}

void AnalysisController::requestPosition(int pos, std::optional<int32_t> target) {
  wanted_pos_ = pos;
  wanted_target_ = target;
  wanted_pos_is_last_ = run_ && pos == run_->n_pos() - 1;
  if (!run_) return;
  const quint64 job = ++position_job_;
  auto pre = std::move(prefetched_position_);
  if (pre && pre->run_job == run_->job && pre->pos == pos && prefetched_target_ == target) {
    Q_EMIT positionReady(pre);  // computed with the run
    return;
  }
  auto jobs = latest_;
  jobs->position = job;
  auto computed = QtConcurrent::run([run = run_, pos, target, job, jobs] {
    return capture<PositionResult>([&]() -> std::shared_ptr<PositionResult> {
      if (jobs->position.load() != job) return nullptr;
      useOneThread();
      return computePosition(run, pos, target);
    });
  });
  deliverLater(computed, this, [this, job](Outcome<PositionResult> out) {
    if (job != position_job_) return;
    if (!out.value) {
      if (!out.error.isEmpty()) Q_EMIT analysisFailed(out.error);
      return;
    }
    if (!run_ || out.value->run_job != run_->job) return;  // computed for a replaced run
    Q_EMIT positionReady(out.value);
  });
}

void AnalysisController::requestLayer(int layer) {
  wanted_layer_ = layer;
  if (!run_) return;
  const quint64 job = ++layer_job_;
  auto pre = std::move(prefetched_layer_);
  if (pre && pre->run_job == run_->job && pre->layer == layer) {
    Q_EMIT layerReady(pre);  // computed with the run
    return;
  }
  auto jobs = latest_;
  jobs->layer = job;
  auto computed = QtConcurrent::run([run = run_, layer, job, jobs] {
    return capture<LayerResult>([&]() -> std::shared_ptr<LayerResult> {
      if (jobs->layer.load() != job) return nullptr;
      useOneThread();
      return computeLayer(run, layer);
    });
  });
  deliverLater(computed, this, [this, job](Outcome<LayerResult> out) {
    if (job != layer_job_) return;
    if (!out.value) {
      if (!out.error.isEmpty()) Q_EMIT analysisFailed(out.error);
      return;
    }
    if (!run_ || out.value->run_job != run_->job) return;
    Q_EMIT layerReady(out.value);
  });
}

void AnalysisController::setRunning(bool running) {
  if (running == running_) return;
  running_ = running;
  Q_EMIT busyChanged(running_ || loading_);
}

}  // namespace hs::ui
