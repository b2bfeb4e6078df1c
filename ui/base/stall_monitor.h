// Measures how long the GUI thread goes without running its event loop: a fast timer notes the
// gap between its ticks; a gap much longer than the interval is a stall the person would feel.
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

 private:
  void tick();

  QTimer timer_;
  QElapsedTimer clock_;
  qint64 last_ns_ = 0;
  int interval_ms_;
  double max_gap_ms_ = 0.0;
  int stalls_over_50_ = 0;
  int ticks_ = 0;
};

}  // namespace hs::ui
