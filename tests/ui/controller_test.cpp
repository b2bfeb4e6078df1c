// The controller: work off the GUI thread, latest request wins, failures reported, models kept.
#include <catch2/catch.hpp>

#include <QSemaphore>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>
#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>

#include <atomic>

#include "core/model/model.h"
#include "ui/controller/analysis_controller.h"
#include "ui/base/deliver.h"
#include "ui/views/concat_sum_view.h"
#include "ui/views/contributions_view.h"
#include "ui/views/registry.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::AnalysisSpy;
using hs::ui::test::layerKey;
using hs::ui::test::positionKey;
using hs::ui::test::waitFor;

namespace {

// Occupies every thread of the shared pool, where analyses run, until released, so requests made
// meanwhile queue up behind it: the controller must then deliver only the newest of them.
class BusyPool {
 public:
  BusyPool() {
    QThreadPool* pool = QThreadPool::globalInstance();
    n_ = pool->maxThreadCount();
    for (int i = 0; i < n_; ++i) pool->start([this] { gate_.acquire(); });
  }
  ~BusyPool() { release(); }
  void release() {
    gate_.release(n_);
    n_ = 0;
  }

 private:
  QSemaphore gate_;
  int n_ = 0;
};

// A controller on the fixture model with every view's analysis, and spies on its runs and on the
// contributions (one position) and concat-vs-sum (one layer) analyses.
struct SpiedController {
  SpiedController() {
    test::addViewAnalyses(c);
    c.setModel(test::fixtureModel());
  }
  AnalysisController c;
  QSignalSpy ready{&c, &AnalysisController::runReady};
  AnalysisSpy pos{&c, QStringLiteral("contributions")};
  AnalysisSpy layer{&c, QStringLiteral("concat")};
};

std::shared_ptr<const PositionResult> computePosition(std::shared_ptr<const RunResult> run, int pos) {
  return std::dynamic_pointer_cast<const PositionResult>(
      AnalysisController::computeAnalysis(findView(QStringLiteral("contributions"))->analysis, run, positionKey(pos)));
}

std::shared_ptr<const LayerResult> computeLayer(std::shared_ptr<const RunResult> run, int layer) {
  return std::dynamic_pointer_cast<const LayerResult>(
      AnalysisController::computeAnalysis(findView(QStringLiteral("concat"))->analysis, run, layerKey(layer)));
}

}  // namespace

TEST_CASE("Only the latest run request is delivered", "[controller]") {
  // Runs have a thread of their own: the first run holds it in an analysis computed with it, so
  // the next two requests queue up behind it.
  auto gate = std::make_shared<QSemaphore>(0);
  auto held = std::make_shared<std::atomic<bool>>(false);
  AnalysisSpec hold;
  hold.id = QStringLiteral("hold");
  hold.compute = [gate, held](const RunResult&, const AnalysisKey&) {
    if (!held->exchange(true)) gate->acquire();  // the first run only
    return std::make_shared<ViewResult>();
  };
  AnalysisController c;
  c.addAnalysis(hold);
  c.setModel(test::fixtureModel());
  QSignalSpy ready(&c, &AnalysisController::runReady);
  c.requestRun(QStringLiteral("The"));
  REQUIRE(waitFor([&] { return held->load(); }));
  c.requestRun(QStringLiteral("The cat"));
  c.requestRun(QStringLiteral("The cat sat"));
  gate->release();
  REQUIRE(waitFor([&] { return !c.isRunning() && ready.count() >= 1; }));
  waitFor([] { return false; }, 200);  // anything stale would have arrived by now
  REQUIRE(ready.count() == 1);
  const auto run = ready.at(0).at(0).value<std::shared_ptr<const RunResult>>();
  CHECK(run->run.text == "The cat sat");
  CHECK(run->thumbnails.size() == static_cast<size_t>(run->n_layer() * run->n_head()));
  CHECK(run->next.size() == static_cast<size_t>(AnalysisController::kTopK));
  CHECK(c.currentRun() == run);
}

TEST_CASE("A prompt longer than the context is truncated with a visible warning", "[controller]") {
  AnalysisController c;
  c.setModel(test::fixtureModel());
  QSignalSpy ready(&c, &AnalysisController::runReady);
  QString text;
  for (int i = 0; i < 40; ++i) text += QStringLiteral("the cat ");
  c.requestRun(text);
  REQUIRE(waitFor([&] { return ready.count() == 1; }));
  const auto run = ready.at(0).at(0).value<std::shared_ptr<const RunResult>>();
  CHECK(run->n_pos() == test::fixtureModel()->config().n_ctx);
  CHECK(run->run.dropped_tokens > 0);
  CHECK(!run->run.warnings.empty());
}

TEST_CASE("Position and layer analyses arrive for the current run", "[controller]") {
  AnalysisController c;
  test::addViewAnalyses(c);
  c.setModel(test::fixtureModel());
  QSignalSpy ready(&c, &AnalysisController::runReady);
  c.requestRun(QStringLiteral("The cat sat on the mat"));
  REQUIRE(waitFor([&] { return ready.count() == 1; }));
  AnalysisSpy pos(&c, QStringLiteral("contributions"));
  AnalysisSpy layer(&c, QStringLiteral("concat"));
  BusyPool busy;
  c.request(QStringLiteral("contributions"), positionKey(0));
  c.request(QStringLiteral("contributions"), positionKey(2));  // supersedes the first
  c.request(QStringLiteral("concat"), layerKey(1));
  busy.release();
  REQUIRE(waitFor([&] { return pos.count() == 1 && layer.count() == 1; }));
  waitFor([] { return false; }, 100);
  CHECK(pos.count() == 1);
  const auto p = pos.at<PositionResult>(0);
  CHECK(p->pos == 2);
  CHECK(p->parts.max_abs_error < 1e-4f);
  const auto l = layer.at<LayerResult>(0);
  CHECK(l->layer == 1);
  CHECK(l->cs.max_abs_diff < 1e-4f);
  CHECK(l->head_result_images.size() == static_cast<size_t>(c.currentRun()->n_head()));
  // Colour ranges: attn_out's covers both of its panels; the heads' is a high quantile of |r_h|
  // across every head, so most of each head's values are drawn in visible colour, not white.
  CHECK(l->output_range >= l->cs.via_concat.cwiseAbs().maxCoeff());
  CHECK(l->output_range >= l->cs.via_sum.cwiseAbs().maxCoeff());
  float head_max = 0.0f;
  size_t values = 0, within = 0;
  for (const hs::RowMatrixXf& r : l->cs.head_results) {
    head_max = std::max(head_max, r.cwiseAbs().maxCoeff());
    values += static_cast<size_t>(r.size());
    within += static_cast<size_t>((r.array().abs() <= l->head_range).count());
  }
  CHECK(l->head_range > 0.0f);
  CHECK(l->head_range <= head_max);
  CHECK(static_cast<double>(within) >= 0.99 * static_cast<double>(values));  // about 99.5% by construction
  CHECK(static_cast<double>(within) < static_cast<double>(values));          // the largest saturate
}

TEST_CASE("The analyses the views asked for are computed with the next run and handed over at once", "[controller]") {
  // Typing: the selection follows the last token and stays on its layer. The run computes those
  // analyses on its worker, so asking for them when the run lands answers without another hop.
  SpiedController s;
  AnalysisController& c = s.c;
  QSignalSpy& ready = s.ready;
  AnalysisSpy &pos = s.pos, &layer = s.layer;
  c.requestRun(QStringLiteral("The cat sat"));
  REQUIRE(waitFor([&] { return ready.count() == 1; }));
  c.request(QStringLiteral("contributions"), positionKey(c.currentRun()->n_pos() - 1));
  c.request(QStringLiteral("concat"), layerKey(1));
  REQUIRE(waitFor([&] { return pos.count() == 1 && layer.count() == 1; }));

  c.requestRun(QStringLiteral("The cat sat on the mat"));
  REQUIRE(waitFor([&] { return ready.count() == 2; }));
  const auto run = c.currentRun();
  const int last = run->n_pos() - 1;
  c.request(QStringLiteral("contributions"), positionKey(last));
  c.request(QStringLiteral("concat"), layerKey(1));
  CHECK(pos.count() == 2);  // delivered inside the calls: no worker round trip
  CHECK(layer.count() == 2);
  const auto p = pos.at<PositionResult>(1);
  const auto l = layer.at<LayerResult>(1);
  CHECK(p->run_job == run->job);
  CHECK(p->pos == last);
  CHECK(l->run_job == run->job);
  CHECK(l->layer == 1);
  // The same numbers as computing them afresh.
  const auto fresh_p = computePosition(run, last);
  const auto fresh_l = computeLayer(run, 1);
  CHECK(p->write_norms == fresh_p->write_norms);
  CHECK(p->target == fresh_p->target);
  CHECK(l->cs.via_sum == fresh_l->cs.via_sum);

  // Another position than the prefetched one still goes to a worker and arrives later.
  c.request(QStringLiteral("contributions"), positionKey(0));
  CHECK(pos.count() == 2);
  REQUIRE(waitFor([&] { return pos.count() == 3; }));
  CHECK(pos.at<PositionResult>(2)->pos == 0);
}

TEST_CASE("Loading a model happens off the GUI thread and a failure keeps the previous model", "[controller]") {
  AnalysisController c;
  QSignalSpy changed(&c, &AnalysisController::modelChanged);
  QSignalSpy failed(&c, &AnalysisController::modelLoadFailed);
  QSignalSpy progress(&c, &AnalysisController::loadProgress);
  c.loadModel(test::fixtureModelDir());
  CHECK(c.isLoading());
  REQUIRE(waitFor([&] { return changed.count() == 1; }));
  const auto model = c.model();
  REQUIRE(model);
  QTemporaryDir tmp;
  c.loadModel(test::makeBrokenModelDir(tmp.path()));
  REQUIRE(waitFor([&] { return failed.count() == 1; }));
  CHECK(c.model() == model);
  CHECK(!failed.at(0).at(1).toString().isEmpty());
  c.loadModel(tmp.filePath(QStringLiteral("does-not-exist")));
  REQUIRE(waitFor([&] { return failed.count() == 2; }));
  CHECK(c.model() == model);
}

TEST_CASE("No worker outlives its controller: a running analysis is cancelled and waited for", "[controller]") {
  // A worker still running when the program tears down races its exit (CI once hung here, in a
  // test whose window was closed while its model was loading), so the controller's destructor
  // cancels what it can and waits for the rest.
  auto started = std::make_shared<std::atomic<bool>>(false), saw_cancel = std::make_shared<std::atomic<bool>>(false),
       returned = std::make_shared<std::atomic<bool>>(false);
  AnalysisSpec spec;
  spec.id = QStringLiteral("long");
  spec.with_every_run = false;
  spec.compute_long = [=](const RunResult&, const AnalysisKey&, const AnalysisJob& job) {
    *started = true;
    for (int i = 0; i < 3000 && !job.cancelled(); ++i) QThread::msleep(1);
    *saw_cancel = job.cancelled();
    QThread::msleep(50);  // still busy after seeing it: the destructor must wait for the return
    *returned = true;
    return std::make_shared<ViewResult>();
  };
  auto c = std::make_unique<AnalysisController>();
  c->addAnalysis(spec);
  c->setModel(test::fixtureModel());
  QSignalSpy ready(c.get(), &AnalysisController::runReady);
  c->requestRun(QStringLiteral("The cat"));
  REQUIRE(waitFor([&] { return ready.count() == 1; }));
  c->request(QStringLiteral("long"), AnalysisKey{});
  REQUIRE(waitFor([&] { return started->load(); }));
  c->loadModel(test::fixtureModelDir());  // and a load in flight
  c.reset();
  CHECK(saw_cancel->load());
  CHECK(returned->load());
}

TEST_CASE("A worker's answer always arrives through the event loop even when the work finished first", "[controller]") {
  // Qt 6.4's QFuture::then(context, f) runs f inside then() when the future has already finished;
  // a request could then answer before it returned. deliverLater must post such an answer.
  QObject context;
  int calls = 0;
  QThread* delivered_on = nullptr;
  deliverLater(QtFuture::makeReadyFuture(41), &context, [&](int v) {
    calls += v;
    delivered_on = QThread::currentThread();
  });
  CHECK(calls == 0);  // not inside the call
  REQUIRE(waitFor([&] { return calls == 41; }));
  CHECK(delivered_on == context.thread());

  // The usual case: the work finishes later on a pool thread, the answer comes on context's thread.
  QSemaphore gate;
  auto later = QtConcurrent::run([&gate] {
    gate.acquire();
    return 1;
  });
  deliverLater(later, &context, [&](int v) {
    calls += v;
    delivered_on = QThread::currentThread();
  });
  gate.release();
  REQUIRE(waitFor([&] { return calls == 42; }));
  CHECK(delivered_on == context.thread());
}

TEST_CASE("The controller never answers inside the request that asked", "[controller]") {
  // The fixture model's analyses take microseconds, so a worker can finish before the request
  // returns; its answer must still come later, never re-entering the caller.
  SpiedController s;
  AnalysisController& c = s.c;
  QSignalSpy& ready = s.ready;
  AnalysisSpy &pos = s.pos, &layer = s.layer;
  c.requestRun(QStringLiteral("The cat"));
  CHECK(ready.count() == 0);
  REQUIRE(waitFor([&] { return ready.count() == 1; }));
  for (int i = 0; i < 200; ++i) {
    const int p = pos.count(), l = layer.count();
    c.request(QStringLiteral("contributions"), positionKey(i % 2));  // never the prefetched last position
    c.request(QStringLiteral("concat"), layerKey(i % 2));
    CHECK(pos.count() == p);
    CHECK(layer.count() == l + (i == 0 ? 1 : 0));  // only the run's prefetched layer 0, by design
    REQUIRE(waitFor([&] { return pos.count() == p + 1 && layer.count() >= l + 1; }));
  }
}
