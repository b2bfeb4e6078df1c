#include "ui/base/background.h"

#include <QCoreApplication>
#include <QThread>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace hs::ui {

QThreadPool* backgroundPool() {
  static QThreadPool* pool = [] {
    auto* p = new QThreadPool;  // lives as long as the process: views wait for their jobs when destroyed
    p->setMaxThreadCount(1);
    return p;
  }();
  return pool;
}

void lowerThreadPriority() {
  const QCoreApplication* app = QCoreApplication::instance();
  if (app && QThread::currentThread() == app->thread()) return;
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
}

void waitForJobs(std::vector<QFuture<void>>& jobs) {
  for (const QFuture<void>& f : jobs)
    while (!f.isFinished()) QThread::msleep(1);
  jobs.clear();
}

}  // namespace hs::ui
