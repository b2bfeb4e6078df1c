#include "ui/base/stall_monitor.h"

#include <algorithm>
#include <ctime>

namespace hs::ui {

namespace {

// The calling thread's CPU time (the monitor's ticks run on the GUI thread).
qint64 threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<qint64>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

StallMonitor::StallMonitor(int interval_ms, QObject* parent) : QObject(parent), interval_ms_(interval_ms) {
  timer_.setTimerType(Qt::PreciseTimer);
  timer_.setInterval(interval_ms_);
  connect(&timer_, &QTimer::timeout, this, &StallMonitor::tick);
}

void StallMonitor::start() {
  reset();
  timer_.start();
}

void StallMonitor::stop() { timer_.stop(); }

void StallMonitor::reset() {
  clock_.start();
  last_ns_ = 0;
  last_cpu_ns_ = 0;
  max_gap_ms_ = 0.0;
  max_busy_ms_ = 0.0;
  stalls_over_50_ = 0;
  ticks_ = 0;
}

void StallMonitor::tick() {
  const qint64 now = clock_.nsecsElapsed();
  const qint64 cpu = threadCpuNs();
  const double gap_ms = (now - last_ns_) / 1e6 - interval_ms_;
  const double busy_ms = (cpu - last_cpu_ns_) / 1e6;
  last_ns_ = now;
  last_cpu_ns_ = cpu;
  ++ticks_;
  if (ticks_ == 1) return;  // the first tick measures the start, not the loop
  max_gap_ms_ = std::max(max_gap_ms_, gap_ms);
  max_busy_ms_ = std::max(max_busy_ms_, busy_ms);
  if (gap_ms > 50.0) ++stalls_over_50_;
}

}  // namespace hs::ui
