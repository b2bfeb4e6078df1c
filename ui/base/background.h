// The views' second-stage work (a Features view's attributions, an SAE's reconstruction quality on
// the prompt): what is shown after the first answer and must stay out of the next keystroke's way.
// On 2 cores such a job at full priority slowed the next forward pass (docs/benchmarks.md,
// 5 December), and on the global pool it held a thread the next analysis needed. So it runs on one
// process-wide thread of its own, one job at a time, at the lowest priority (Linux: the thread's
// nice value, which an unprivileged process cannot lower back: hence a pool of its own), with a
// one-thread OpenMP team that it hands back afterwards (release_thread_team).
#pragma once

#include <QFuture>
#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>
#include <type_traits>
#include <utility>
#include <vector>
#include "core/model/thread_scope.h"

namespace hs::ui {

QThreadPool* backgroundPool();
// Sets the calling thread's nice value to 19 (the background pool's thread, on each job); never
// the GUI thread's.
void lowerThreadPriority();

// Waits until each job has finished, on the thread that runs it. QFuture::waitForFinished would
// instead run a job still queued on the waiting thread ("stealing" it): the GUI thread then took
// the job's low priority for good, and a window closing with a queued job hung in Qt's future
// (seen in hs_bench_keys with the Features view, 5 December). For destructors.
void waitForJobs(std::vector<QFuture<void>>& jobs);

template <class F>
QFuture<std::invoke_result_t<F>> runInBackground(F f) {
  return QtConcurrent::run(backgroundPool(), [f = std::move(f)]() mutable {
    lowerThreadPriority();
    struct Release {
      ~Release() { hs::release_thread_team(); }
    } release;
    hs::ThreadScope one(1);
    return f();
  });
}

}  // namespace hs::ui
