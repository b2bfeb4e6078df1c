// Measures how long the GUI thread goes without running its event loop: a fast timer notes the
// gap between its ticks; a gap much longer than the interval is a stall the person would feel.
// It also notes the GUI thread's own CPU time in each gap: the work done on it, which a busy or
// CPU-throttled machine does not inflate (a wall-clock gap there can be the scheduler's, not ours).
// Used by the tests and by `HEADSCOPE_STALL_MONITOR=1 headscope` (prints a summary at exit).
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>

namespace hs::ui {

class StallMonitor : public QObject {
  Q_OBJECT

 public:
  explicit StallMonitor(int interval_ms = 5, QObject* parent = nullptr);

  void start();
  void stop();
  void reset();
  // The longest time between two ticks, minus the interval (0 when the loop never stalled).
  double maxStallMs() const { return max_gap_ms_; }
  // Ticks that came late enough for a person to notice the stall.
  int stallsOver50ms() const { return stalls_over_50_; }
  int ticks() const { return ticks_; }
  // The most CPU time the GUI thread spent between two ticks: the longest piece of work it did.
  double maxBusyMs() const { return max_busy_ms_; }

 private:
  void tick();

  QTimer timer_;
  QElapsedTimer clock_;
  qint64 last_ns_ = 0;
  qint64 last_cpu_ns_ = 0;
  int interval_ms_;
  double max_gap_ms_ = 0.0;
  double max_busy_ms_ = 0.0;
  int stalls_over_50_ = 0;
  int ticks_ = 0;
};

}  // namespace hs::ui
