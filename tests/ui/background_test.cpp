#include <catch2/catch.hpp>
#include <QThread>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#include "ui/base/background.h"

using hs::ui::runInBackground;
using hs::ui::waitForJobs;

namespace {

int threadNice() {
  errno = 0;
  return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
}

}  // namespace

TEST_CASE("Background jobs run on their low-priority thread, and waiting for a queued one neither runs it on the waiter nor lowers the waiter's priority",
          "[background]") {
  REQUIRE(threadNice() == 0);
  const Qt::HANDLE gui = QThread::currentThreadId();
  std::atomic<bool> release{false};
  // The first job holds the one background thread, so the second stays queued while we wait for it:
  // QFuture::waitForFinished would run it here.
  const QFuture<void> first(runInBackground([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 0;
  }));
  Qt::HANDLE second_thread = nullptr;
  int second_nice = 0;
  const QFuture<void> second(runInBackground([&] {
    second_thread = QThread::currentThreadId();
    second_nice = threadNice();
    return 0;
  }));
  std::vector<QFuture<void>> jobs = {second, first};  // the queued one first
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release.store(true);
  });
  waitForJobs(jobs);
  releaser.join();
  CHECK(jobs.empty());
  CHECK(second_thread != nullptr);
  CHECK(second_thread != gui);
  CHECK(second_nice == 19);
  CHECK(threadNice() == 0);  // the GUI thread kept its priority
}
