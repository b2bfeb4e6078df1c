// Keystroke latency of the GUI, headless: the real MainWindow on Qt's offscreen platform, a
// sentence typed into its prompt editor one key at a time.
//
//   hs_bench_keys [--model DIR] [--text SENTENCE] [--interval-ms 100] [--settle-ms 50] [--view ID]
//                 [--sae DIR]...
//
// --view ID: that view's tab is on screen while typing (default: the first); with an analysis of
// its own, phase 1 also waits for it and reports shown_view_ms (request -> its result).
// --sae DIR: load that SAE folder into the window first (File > Open Sparse Autoencoder), so the
// Features view (--view features) shows its latents.
//
// Phase 1 ("step"): one key, then wait until the views' data for that text is ready, then the
// next key. Per key it records
//   debounce_ms  text change -> the run's request (MainWindow's debounce timer, reported apart),
//   run_ms       request -> RunResult delivered on the GUI thread (tokenize, forward pass, top-k,
//                thumbnails on the worker, then the hop back),
//   views_ms     request -> run, position analysis and layer analysis all delivered for this
//                text (what the attention, contributions and concat-vs-sum views show).
// Phase 2 ("typing"): keys at a steady --interval-ms, runs overlapping typing, to look for stalls.
//
// Then, for the last text, the same work timed synchronously on one thread (no hops, no queue):
// computeRun (full and extending the previous prompt by one key), the contributions and concat-vs-sum
// views' analyses,
// so the latency above can be split into work and hand-overs.
//
// Throughout, a 1 ms precise QTimer ticks on the GUI thread; the longest gap between two ticks
// (minus the interval) is the longest time the GUI thread could not react: the stall a person
// would feel. Prints one JSON object.
//
// Every event the GUI thread dispatches is timed as well (TimedApplication): the slowest ones,
// with what they were and what inside them took longest, show what a stall consists of.
//
// Without --model: the built-in model (hs::builtin_model_dir()); when it is not there yet, the
// committed test fixture tests/fixtures/models/f32_prefixed, and "model_kind" says so.
#include <QApplication>
#include <QElapsedTimer>
#include <QEvent>
#include <QEventLoop>
#include <QMetaEnum>
#include <QSettings>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#ifdef HEADSCOPE_HAVE_QTEST
#include <QTest>
#endif

#include <omp.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/analysis/head_scores.h"
#include "core/analysis/view_data.h"
#include "core/model/model.h"
#include "core/model/position_block_stats.h"
#include "core/model/thread_scope.h"
#include "core/session/session.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/results.h"
#include "ui/controller/selection.h"
#include "ui/views/registry.h"
#include "ui/window/main_window.h"
#include "ui/style/app_style.h"
#include "ui/widgets/prompt_edit.h"

namespace {

using hs::ui::AnalysisController;
using hs::ui::findView;
using hs::ui::keyFromSelection;
using hs::ui::kReadsLayer;
using hs::ui::kReadsPosition;
using hs::ui::kReadsTarget;
using hs::ui::AnalysisView;
using hs::ui::ViewDescriptor;
using hs::ui::viewRegistry;
using hs::ui::MainWindow;
using hs::ui::MainWindowOptions;
using hs::ui::RunResult;
using hs::ui::ViewResult;

constexpr const char* kSentence = "The quick brown fox jumps over the lazy dog, and the cat sat on the mat.";

double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

long threadMinorFaults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// The GUI thread's heartbeat: the longest gap between ticks of a 1 ms timer. On a loaded machine
// a gap can also be the scheduler running someone else; the GUI thread's own CPU time during the
// gap ("busy") tells our work from that.
class Heartbeat : public QObject {
 public:
  Heartbeat() {
    timer_.setTimerType(Qt::PreciseTimer);
    timer_.setInterval(1);
    QObject::connect(&timer_, &QTimer::timeout, this, [this] { tick(); });
  }
  void start() {
    reset();
    timer_.start();
  }
  void reset() {
    clock_.start();
    last_ns_ = -1;
    max_gap_ms_ = 0;
    max_busy_ms_ = 0;
    busy_of_max_ms_ = 0;
    over_16_ = 0;
    ticks_ = 0;
  }
  double maxStallMs() const { return max_gap_ms_; }
  // The longest gap counted in the GUI thread's CPU time, and the CPU time within the longest gap.
  double maxBusyMs() const { return max_busy_ms_; }
  double busyOfMaxMs() const { return busy_of_max_ms_; }
  int stallsOver16ms() const { return over_16_; }
  int ticks() const { return ticks_; }

 private:
  void tick() {
    const qint64 now = clock_.nsecsElapsed();
    const double cpu = threadCpuMs();
    ++ticks_;
    if (last_ns_ >= 0) {
      const double gap = static_cast<double>(now - last_ns_) / 1e6 - 1.0;
      const double busy = cpu - last_cpu_ms_;
      if (gap > max_gap_ms_) {
        max_gap_ms_ = gap;
        busy_of_max_ms_ = busy;
      }
      max_busy_ms_ = std::max(max_busy_ms_, busy);
      if (gap > 16.0) ++over_16_;
    }
    last_ns_ = now;
    last_cpu_ms_ = cpu;
  }
  QTimer timer_;
  QElapsedTimer clock_;
  qint64 last_ns_ = -1;
  double last_cpu_ms_ = 0;
  double max_gap_ms_ = 0;
  double max_busy_ms_ = 0;
  double busy_of_max_ms_ = 0;
  int over_16_ = 0;
  int ticks_ = 0;
};

// Times every event dispatch on the GUI thread. Dispatches nest (a paint inside a repaint, a
// slot's own sendEvent); each outermost one is kept with the longest dispatch directly inside it,
// so a stall reads as "UpdateRequest to MainWindow, of which Paint to HeatmapView ...".
class TimedApplication : public QApplication {
 public:
  using QApplication::QApplication;

  struct Dispatch {
    double ms = 0;
    double cpu_ms = 0;
    long faults = 0;  // the GUI thread's minor page faults within the dispatch
    std::string what;
    std::string inner;  // the longest nested dispatch
    double inner_ms = 0;
  };

  bool notify(QObject* receiver, QEvent* event) override {
    if (!recording_ || QThread::currentThread() != thread()) return QApplication::notify(receiver, event);
    Frame frame;
    frame.t0 = clock_.nsecsElapsed();
    frame.cpu0 = threadCpuMs();
    frame.faults0 = threadMinorFaults();
    // Who and what, noted before the dispatch (it may delete the receiver); turned into text only
    // for the few that are kept, so the timing adds little to what it times.
    const Target target{receiver ? receiver->metaObject()->className() : "null",
                        receiver ? receiver->objectName() : QString(), event->type()};
    stack_.push_back(&frame);
    const bool handled = QApplication::notify(receiver, event);
    stack_.pop_back();
    const double ms = static_cast<double>(clock_.nsecsElapsed() - frame.t0) / 1e6;
    if (!stack_.empty()) {
      Frame& parent = *stack_.back();
      if (ms > parent.inner_ms) {
        parent.inner_ms = ms;
        parent.inner = target;
      }
    } else if (ms >= 1.0) {
      const std::string what = describe(target);
      ++counts_[what];
      Dispatch d{ms, threadCpuMs() - frame.cpu0, threadMinorFaults() - frame.faults0, what, frame.inner_ms > 0 ? describe(frame.inner) : std::string(),
                 frame.inner_ms};
      slowest_.push_back(std::move(d));
      std::sort(slowest_.begin(), slowest_.end(), [](const Dispatch& a, const Dispatch& b) { return a.ms > b.ms; });
      if (slowest_.size() > 8) slowest_.pop_back();
    }
    return handled;
  }

  void startRecording() {
    clock_.start();
    slowest_.clear();
    counts_.clear();
    recording_ = true;
  }
  // How often each kind of outermost dispatch took 1 ms or more.
  std::map<std::string, int> takeCounts() { return std::move(counts_); }
  std::vector<Dispatch> takeSlowest() {
    recording_ = false;
    return std::move(slowest_);
  }

 private:
  struct Target {
    const char* class_name = "";  // static storage: the class's meta-object
    QString object_name;
    QEvent::Type type = QEvent::None;
  };
  struct Frame {
    qint64 t0 = 0;
    double cpu0 = 0;
    long faults0 = 0;
    Target inner;
    double inner_ms = 0;
  };
  static std::string describe(const Target& t) {
    const char* type = QMetaEnum::fromType<QEvent::Type>().valueToKey(t.type);
    std::string s = type ? type : std::to_string(static_cast<int>(t.type));
    s += " to ";
    s += t.class_name;
    if (!t.object_name.isEmpty()) s += " \"" + t.object_name.toStdString() + "\"";
    return s;
  }
  bool recording_ = false;
  QElapsedTimer clock_;
  std::vector<Frame*> stack_;
  std::vector<Dispatch> slowest_;
  std::map<std::string, int> counts_;
};

// Runs the event loop until done() or the timeout; never sleeps the GUI thread. The timestamps
// come from signal handlers, so the poll's period only delays leaving the loop, not the numbers;
// a 0 ms poll would spin the GUI thread and take CPU from the workers on a 2-core machine.
bool waitUntil(const std::function<bool()>& done, int timeout_ms) {
  if (done()) return true;
  QEventLoop loop;
  QTimer poll, deadline;
  poll.setInterval(2);
  QObject::connect(&poll, &QTimer::timeout, &loop, [&] {
    if (done()) loop.quit();
  });
  deadline.setSingleShot(true);
  QObject::connect(&deadline, &QTimer::timeout, &loop, &QEventLoop::quit);
  poll.start();
  deadline.start(timeout_ms);
  loop.exec();
  return done();
}

void idle(int ms) {
  QEventLoop loop;
  QTimer::singleShot(ms, &loop, &QEventLoop::quit);
  loop.exec();
}

void typeChar(QWidget* w, QChar c) {
#ifdef HEADSCOPE_HAVE_QTEST
  QTest::keyClicks(w, QString(c));
#else
  static_cast<hs::ui::PromptEdit*>(w)->insertPlainText(QString(c));
#endif
}

struct Stats {
  double median = 0, p90 = 0, max = 0, mean = 0;
};
Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.p90 = v[std::min(n - 1, static_cast<size_t>(0.9 * static_cast<double>(n)))];
  s.max = v.back();
  for (double x : v) s.mean += x / static_cast<double>(n);
  return s;
}
std::string list(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.2f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}
std::string jstats(const Stats& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "{\"median\": %.2f, \"p90\": %.2f, \"max\": %.2f, \"mean\": %.2f}", s.median, s.p90, s.max,
                s.mean);
  return buf;
}
std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

std::string jdispatches(const std::vector<TimedApplication::Dispatch>& v) {
  std::string s = "[";
  char buf[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s{\"ms\": %.2f, \"cpu_ms\": %.2f, \"faults\": %ld, ", i ? ", " : "", v[i].ms,
                  v[i].cpu_ms, v[i].faults);
    s += buf;
    s += "\"what\": " + jstr(v[i].what) + ", \"inner\": " + jstr(v[i].inner);
    std::snprintf(buf, sizeof buf, ", \"inner_ms\": %.2f}", v[i].inner_ms);
    s += buf;
  }
  return s + "]";
}

std::string jcounts(const std::map<std::string, int>& counts) {
  std::string s = "{";
  for (const auto& [what, n] : counts) s += (s.size() > 1 ? ", " : "") + jstr(what) + ": " + std::to_string(n);
  return s + "}";
}

// --load DIR: the window, showing the built-in model, is asked to load DIR as File > Open does.
// Measures the GUI thread's longest stall from the request until the new model's first run is
// on screen, and the times to "model changed" and to that first run. One JSON object.
int loadStall(MainWindow& window, const std::string& dir) {
  AnalysisController* controller = window.controller();
  QElapsedTimer clock;
  double t_changed = -1, t_run = -1;
  QString failure;
  bool changed = false;
  QObject::connect(controller, &AnalysisController::modelChanged, [&](std::shared_ptr<const hs::Model>) {
    t_changed = static_cast<double>(clock.nsecsElapsed()) / 1e6;
    changed = true;
  });
  QObject::connect(controller, &AnalysisController::runReady, [&](std::shared_ptr<const RunResult>) {
    if (changed && t_run < 0) t_run = static_cast<double>(clock.nsecsElapsed()) / 1e6;
  });
  QObject::connect(controller, &AnalysisController::modelLoadFailed,
                   [&](const QString&, const QString& m) { failure = m; });
  waitUntil([&] { return !controller->isRunning(); }, 30000);
  Heartbeat beat;
  beat.start();
  waitUntil([] { return false; }, 200);  // a baseline of ticks before the request
  beat.reset();
  clock.start();
  window.loadModel(QString::fromStdString(dir));
  const bool done = waitUntil([&] { return t_run >= 0 || !failure.isEmpty(); }, 120000);
  waitUntil([] { return false; }, 100);  // the paint after the first run
  if (!failure.isEmpty() || !done) {
    std::cerr << "hs_bench_keys: loading " << dir << " failed: "
              << (failure.isEmpty() ? std::string("no result in 120 s") : failure.toStdString()) << "\n";
    return 1;
  }
  std::printf("{\"load_dir\": %s, \"model_changed_ms\": %.1f, \"first_run_ms\": %.1f, \"stall_max_ms\": %.2f, "
              "\"stall_busy_ms\": %.2f, \"stall_max_busy_ms\": %.2f, \"stalls_over16\": %d, \"ticks\": %d}\n",
              jstr(dir).c_str(), t_changed, t_run, beat.maxStallMs(), beat.busyOfMaxMs(), beat.maxBusyMs(),
              beat.stallsOver16ms(), beat.ticks());
  return 0;
}


// The contributions and concat-vs-sum views' analyses of `run`, timed once each on one OpenMP
// thread, as the controller's workers run them (omp's setting is per calling thread; the run
// itself chooses its own, RunOptions::threads = 0: by size).
void timeViewAnalyses(MainWindow& window, const std::shared_ptr<const RunResult>& run, std::vector<double>& position,
                      std::vector<double>& layer) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  QElapsedTimer t;
  t.start();
  AnalysisController::computeAnalysis(findView(QStringLiteral("contributions"))->analysis, run,
                                      keyFromSelection(*window.selection(), kReadsPosition | kReadsTarget));
  position.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
  t.start();
  AnalysisController::computeAnalysis(findView(QStringLiteral("concat"))->analysis, run,
                                      keyFromSelection(*window.selection(), kReadsLayer));
  layer.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
  omp_set_num_threads(saved_threads);
}

double rssMb() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// Where the resident memory is, after a key: the whole set and its anonymous part
// (/proc/self/smaps_rollup; the rest is mostly the weights' file mapping), what malloc holds
// (in use, and free but kept: glibc's mallinfo2, all arenas), and the position blocks of the
// activation caches (live, and freed ones pooled for the next run). Growth that the live blocks
// do not show is memory nobody uses.
struct MemorySample {
  double rss_mb = 0, anon_mb = 0, malloc_used_mb = 0, malloc_free_mb = 0, blocks_mb = 0, pooled_mb = 0;
};
MemorySample memorySample() {
  constexpr double kMb = 1024.0 * 1024.0;
  MemorySample m;
  m.rss_mb = rssMb();
  if (FILE* f = std::fopen("/proc/self/smaps_rollup", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      long kb = 0;
      if (std::sscanf(line, "Anonymous: %ld kB", &kb) == 1) m.anon_mb = static_cast<double>(kb) / 1024.0;
    }
    std::fclose(f);
  }
#if defined(__GLIBC__)
  const struct mallinfo2 mi = mallinfo2();
  m.malloc_used_mb = static_cast<double>(mi.uordblks + mi.hblkhd) / kMb;
  m.malloc_free_mb = static_cast<double>(mi.fordblks) / kMb;
#endif
  const hs::PositionBlockStats b = hs::position_block_stats();
  m.blocks_mb = static_cast<double>(b.live_bytes) / kMb;
  m.pooled_mb = static_cast<double>(b.pooled_bytes) / kMb;
  return m;
}

// The least-squares slope of v over its last n entries (per entry), 0 with fewer than 2.
double slope(const std::vector<double>& v, size_t n) {
  n = std::min(n, v.size());
  if (n < 2) return 0.0;
  const size_t first = v.size() - n;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += static_cast<double>(i) / static_cast<double>(n);
    my += v[first + i] / static_cast<double>(n);
  }
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < n; ++i) {
    const double dx = static_cast<double>(i) - mx;
    sxy += dx * (v[first + i] - my);
    sxx += dx * dx;
  }
  return sxy / sxx;
}

// What typing at the end of a long document types, one character a key, from its start again
// after its end.
constexpr const char* kLongTyped = " and then the quick brown fox jumped";

// --long N: the window holds a document of about N tokens, and keys are typed one at a time,
// each waited for: first at the end of the document ("end"), then in its middle ("middle"). Per key:
// request -> the data of what is on screen (views_ms: the run, with the head grid's thumbnails,
// and the analysis of the view on the current tab; the debounce before the request is a fixed
// setting and reported apart), which analyses came with the run, the reused prefix, and the
// process's resident memory after the key, so that growth per key shows. A hidden view's
// analysis comes with the run only while it is cheap (AnalysisController::kHiddenAheadMs); after
// the keys at the end, the concat-vs-sum tab is shown and the time until its data is there is
// reported (show_concat_ms). One JSON object.
int longPrompt(MainWindow& window, const QString& document, const std::string& model_dir, int n_tokens, int keys,
               int middle_keys) {
  AnalysisController* controller = window.controller();
  auto* prompt = window.promptEdit();
  QElapsedTimer clock;
  clock.start();
  auto now_ms = [&] { return static_cast<double>(clock.nsecsElapsed()) / 1e6; };
  double t_request = 0, t_run = 0, worker_ms = 0;
  quint64 job = 0;
  bool have_run = false, failed = false;
  int reused = 0, n_pos = 0;
  std::map<QString, double> arrived;  // analysis id -> when its data for `job` arrived
  QString shown_id;
  for (const ViewDescriptor& d : viewRegistry())
    if (window.tabs()->currentWidget() == window.view(d.id) && d.analysis.compute) shown_id = d.id;  // else: the run is its data
  auto have_shown = [&] { return shown_id.isEmpty() || arrived.count(shown_id) > 0; };
  QObject::connect(controller, &AnalysisController::runStarted, [&](quint64 j) {
    job = j;
    t_request = now_ms();
    have_run = false;
    arrived.clear();
  });
  QObject::connect(controller, &AnalysisController::runReady, [&](std::shared_ptr<const RunResult> r) {
    if (r->job != job) return;
    t_run = now_ms();
    have_run = true;
    worker_ms = r->worker_ms;
    reused = r->run.cache->reused_prefix;
    n_pos = r->n_pos();
  });
  QObject::connect(controller, &AnalysisController::analysisReady, [&](const QString& id, std::shared_ptr<const ViewResult> r) {
    if (r->run_job != job || arrived.count(id)) return;
    arrived[id] = now_ms();
  });
  QObject::connect(controller, &AnalysisController::runFailed, [&](const QString& m) {
    std::cerr << "hs_bench_keys: run failed: " << m.toStdString() << "\n";
    failed = true;
  });
  prompt->setPlainText(document);
  if (!waitUntil([&] { return have_run && have_shown() && n_pos > 0 && !controller->isRunning(); }, 120000)) {
    std::cerr << "hs_bench_keys: the document produced no run within 120 s\n";
    return 1;
  }
  idle(500);
  const int document_positions = n_pos;
  const QString typed = QString::fromLatin1(kLongTyped);

  struct Phase {
    std::vector<double> views, run, worker, rss, anon, malloc_used, malloc_free, blocks, pooled;
    std::vector<int> reused, positions;
    std::vector<std::string> with_run;  // the analyses that came with each key's run
  };
  auto type_keys = [&](Phase& ph, int cursor_at, int keys) -> bool {
    QTextCursor cursor = prompt->textCursor();
    cursor.setPosition(cursor_at);
    prompt->setTextCursor(cursor);
    for (int i = 0; i < keys && !failed; ++i) {
      const quint64 job_before = job;
      typeChar(prompt, typed[i % typed.size()]);
      if (!waitUntil([&] { return job != job_before && have_run && have_shown(); }, 60000)) {
        std::cerr << "hs_bench_keys: no result within 60 s\n";
        return false;
      }
      ph.views.push_back(std::max(t_run, shown_id.isEmpty() ? t_run : arrived[shown_id]) - t_request);
      std::string ids;
      for (const auto& [id, at] : arrived) ids += (ids.empty() ? "" : "+") + id.toStdString();
      ph.with_run.push_back(ids);
      ph.run.push_back(t_run - t_request);
      ph.worker.push_back(worker_ms);
      ph.reused.push_back(reused);
      ph.positions.push_back(n_pos);
      idle(50);
      const MemorySample m = memorySample();
      ph.rss.push_back(m.rss_mb);
      ph.anon.push_back(m.anon_mb);
      ph.malloc_used.push_back(m.malloc_used_mb);
      ph.malloc_free.push_back(m.malloc_free_mb);
      ph.blocks.push_back(m.blocks_mb);
      ph.pooled.push_back(m.pooled_mb);
    }
    return !failed;
  };
  Phase end, middle;
  if (!type_keys(end, static_cast<int>(prompt->toPlainText().size()), keys)) return 1;
  // The work of one key at the end, without threads or hops: the incremental run alone, the run's
  // overview (top-k, thumbnails), and the worker's whole computeRun.
  std::vector<double> sync_forward, sync_overview, sync_compute, sync_position, sync_layer;
  waitUntil([&] { return !controller->isRunning(); }, 60000);
  if (auto last = controller->currentRun()) {
    const QString full = QString::fromStdString(last->run.text);
    const auto prev = AnalysisController::computeRun(last->run.model, full.left(full.size() - 1));
    QElapsedTimer t;
    for (int rep = 0; rep < 7; ++rep) {
      hs::TextRunOptions o;
      o.overlong = hs::OverlongPolicy::TruncateWithWarning;
      o.previous = prev->run.cache;
      t.start();
      const hs::TextRun r = hs::run_text(last->run.model, full.toStdString(), o);
      sync_forward.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
      t.start();
      const hs::RunOverview overview = hs::overview_of_run(*r.cache, 10);
      sync_overview.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
      t.start();
      AnalysisController::computeRun(last->run.model, full, prev->run.cache, {}, nullptr, prev);
      sync_compute.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
      timeViewAnalyses(window, last, sync_position, sync_layer);
    }
  }
  // The hidden concat-vs-sum view shown: its data for the current run, computed now if the runs
  // left it out.
  double show_concat_ms = -1;
  QWidget* const shown_tab = window.tabs()->currentWidget();
  if (AnalysisView* concat = window.view(QStringLiteral("concat"))) {
    idle(200);
    const double t_show = now_ms();
    arrived.erase(QStringLiteral("concat"));
    window.tabs()->setCurrentWidget(concat);
    AnalysisView* view = concat;
    const auto current = controller->currentRun();
    if (view && view->result() && current && view->result()->run_job == current->job)
      show_concat_ms = 0.0;  // it came with the run
    else if (waitUntil([&] { return arrived.count(QStringLiteral("concat")) > 0; }, 60000))
      show_concat_ms = arrived[QStringLiteral("concat")] - t_show;
    window.tabs()->setCurrentWidget(shown_tab);
    idle(200);
  }
  if (!type_keys(middle, static_cast<int>(document.size() / 2), middle_keys)) return 1;
  auto ints = [](const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  auto strings = [](const std::vector<std::string>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + jstr(v[i]);
    return s + "]";
  };
  // The resident set at keys 1, 24, 100 and 300 (those there are), and each measure's slope over
  // the last 200 keys (MB per key): the resident set should grow no faster than the live blocks,
  // which grow with the prompt.
  auto memory = [&](const Phase& ph) {
    std::string s = "{\"rss_mb_at_key\": {";
    bool first = true;
    for (size_t k : {size_t{1}, size_t{24}, size_t{100}, size_t{300}})
      if (k <= ph.rss.size()) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%s\"%zu\": %.1f", first ? "" : ", ", k, ph.rss[k - 1]);
        s += buf;
        first = false;
      }
    const size_t n = std::min<size_t>(200, ph.rss.size());
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "}, \"slope_keys\": %zu, \"rss_mb_per_key_slope\": %.4f, \"anon_mb_per_key_slope\": %.4f, "
                  "\"malloc_used_mb_per_key_slope\": %.4f, \"blocks_mb_per_key_slope\": %.4f, "
                  "\"pooled_mb_per_key_slope\": %.4f, \"positions_per_key_slope\": %.4f}",
                  n, slope(ph.rss, n), slope(ph.anon, n), slope(ph.malloc_used, n), slope(ph.blocks, n), slope(ph.pooled, n),
                  slope(std::vector<double>(ph.positions.begin(), ph.positions.end()), n));
    return s + buf;
  };
  auto phase = [&](const Phase& ph) {
    return "{\"views_ms\": " + jstats(stats(ph.views)) + ", \"run_ms\": " + jstats(stats(ph.run)) +
           ", \"worker_ms\": " + jstats(stats(ph.worker)) + ", \"views_ms_per_key\": " + list(ph.views) +
           ", \"reused_prefix\": " + ints(ph.reused) + ", \"positions\": " + ints(ph.positions) +
           ", \"rss_mb_per_key\": " + list(ph.rss) + ", \"anon_mb_per_key\": " + list(ph.anon) +
           ", \"malloc_used_mb_per_key\": " + list(ph.malloc_used) + ", \"malloc_free_mb_per_key\": " +
           list(ph.malloc_free) + ", \"blocks_mb_per_key\": " + list(ph.blocks) + ", \"pooled_mb_per_key\": " +
           list(ph.pooled) + ", \"memory\": " + memory(ph) + ", \"with_run\": " + strings(ph.with_run) + "}";
  };
  std::printf("{\"model\": %s, \"document_tokens\": %d, \"document_positions\": %d, \"keys\": %d, \"middle_keys\": %d, "
              "\"debounce_setting_ms\": %d, \"end\": %s, \"middle\": %s, \"sync_end_run_text_ms\": %s, "
              "\"sync_end_overview_ms\": %s, \"sync_end_compute_run_ms\": %s, \"sync_end_position_ms\": %s, "
              "\"sync_end_layer_ms\": %s, \"shown_view\": %s, \"show_concat_ms\": %.3f}\n",
              jstr(model_dir).c_str(), n_tokens, document_positions, keys, middle_keys, MainWindow::kDebounceMs, phase(end).c_str(),
              phase(middle).c_str(), jstats(stats(sync_forward)).c_str(), jstats(stats(sync_overview)).c_str(),
              jstats(stats(sync_compute)).c_str(), jstats(stats(sync_position)).c_str(), jstats(stats(sync_layer)).c_str(),
              jstr(shown_id.toStdString()).c_str(), show_concat_ms);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (!std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  std::string model_dir, sentence = kSentence, load_dir, view_id;
  std::vector<std::string> sae_dirs;
  int interval_ms = 100, settle_ms = 50, long_tokens = 0, long_keys = 24, middle_keys = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "hs_bench_keys: missing value after " << k << "\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--model") model_dir = value();
    else if (k == "--text") sentence = value();
    else if (k == "--view") view_id = value();
    else if (k == "--sae") sae_dirs.push_back(value());
    else if (k == "--interval-ms") interval_ms = std::atoi(value().c_str());
    else if (k == "--settle-ms") settle_ms = std::atoi(value().c_str());
    else if (k == "--load") load_dir = value();
    else if (k == "--long") long_tokens = std::atoi(value().c_str());
    else if (k == "--long-keys") long_keys = std::atoi(value().c_str());
    else if (k == "--middle-keys") middle_keys = std::atoi(value().c_str());
    else {
      std::cerr << "usage: hs_bench_keys [--model DIR] [--text SENTENCE] [--interval-ms 100] [--settle-ms 50]\n"
                   "       hs_bench_keys --load DIR   (GUI-thread stall while the window loads DIR)\n"
                   "       hs_bench_keys --long N [--long-keys K] [--middle-keys M]   (keys typed at the end, then in the middle, of\n"
                   "                                                 a document of about N tokens)\n";
      return 2;
    }
  }

  // Which model: asked for, built-in, or the test fixture when the built-in one is not there yet.
  std::string model_kind = "given";
  if (model_dir.empty()) {
    try {
      model_dir = hs::builtin_model_dir().string();
      model_kind = "builtin";
    } catch (const std::exception&) {
      model_dir = std::string(HEADSCOPE_SOURCE_DIR) + "/tests/fixtures/models/f32_prefixed";
      model_kind = "fixture (built-in model not found)";
    }
  }
  std::shared_ptr<const hs::Model> probe;
  try {
    probe = hs::Model::load(model_dir);
  } catch (const std::exception& e) {
    std::cerr << "hs_bench_keys: " << e.what() << "\n";
    return 1;
  }
  // Keep the whole sentence inside the model's context (the fixture's is 24 tokens).
  while (sentence.size() > 1 && static_cast<int>(probe->encode(sentence, true).size()) > probe->config().n_ctx)
    sentence.pop_back();
  const int n_tokens = static_cast<int>(probe->encode(sentence, true).size());
  const hs::ModelConfig cfg = probe->config();
  // --long: an original paragraph repeated to about N tokens (with BOS), leaving room for the keys.
  std::string document;
  int document_tokens = 0;
  if (long_tokens > 0) {
    // Room for what the keys type (their tokens, not one per key: 300 keys are about 60 tokens).
    std::string keys_text;
    for (int i = 0; i < long_keys + middle_keys; ++i) keys_text += kLongTyped[i % std::strlen(kLongTyped)];
    const int limit = std::min(long_tokens, cfg.n_ctx - static_cast<int>(probe->encode(keys_text, false).size()) - 4);
    std::string next = hs::kHeadScoreProse;
    while (static_cast<int>(probe->encode(next, true).size()) <= limit) {
      document = next;
      next += " ";
      next += hs::kHeadScoreProse;
    }
    // Then word by word up to the limit.
    std::istringstream words(hs::kHeadScoreProse);
    for (std::string w; words >> w;) {
      const std::string candidate = document.empty() ? w : document + " " + w;
      if (static_cast<int>(probe->encode(candidate, true).size()) > limit) break;
      document = candidate;
    }
    document_tokens = static_cast<int>(probe->encode(document, true).size());
  }
  probe.reset();
  // Loading it here ran an OpenMP team on this thread; release it, as the window's loads do, so
  // the window's runs find the process as the app has it (hs::release_thread_team).
  hs::release_thread_team();

  TimedApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("HeadScopeBench"));
  QApplication::setApplicationName(QStringLiteral("headscope-bench-keys"));
  QTemporaryDir settings_dir;  // never touch the person's own settings
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir.path());
  hs::ui::applyAppStyle(app);

  const QString text = QString::fromStdString(sentence);
  MainWindow window(MainWindowOptions{.model_dir = QString::fromStdString(model_dir), .text = text.left(1),
                                      .restore_settings = false, .view = QString::fromStdString(view_id)});
  const hs::ui::ViewDescriptor* shown_descriptor = view_id.empty() ? nullptr : findView(QString::fromStdString(view_id));
  if (!view_id.empty() && !shown_descriptor) {
    std::cerr << "hs_bench_keys: no view named " << view_id << "\n";
    return 2;
  }
  // Views drawn from the run alone have nothing more to wait for.
  const bool wait_view = shown_descriptor && shown_descriptor->analysis.compute &&
                         shown_descriptor->id != QStringLiteral("contributions") &&
                         shown_descriptor->id != QStringLiteral("concat");
  window.resize(1400, 900);
  window.show();
  AnalysisController* controller = window.controller();
  auto* prompt = window.promptEdit();
  prompt->setFocus();
  if (!waitUntil([&] { return controller->currentRun() != nullptr; }, 60000)) {
    std::cerr << "hs_bench_keys: the window produced no run within 60 s\n";
    return 1;
  }

  for (const std::string& dir : sae_dirs) {
    bool done = false, failed = false;
    const auto ok = QObject::connect(&window, &MainWindow::saeLoaded, [&](const QString&) { done = true; });
    const auto bad = QObject::connect(&window, &MainWindow::saeLoadFailed, [&](const QString&, const QString& message) {
      std::cerr << "hs_bench_keys: " << message.toStdString() << "\n";
      done = failed = true;
    });
    window.loadSaeFolder(QString::fromStdString(dir));
    if (!waitUntil([&] { return done; }, 120000) || failed) return 1;
    QObject::disconnect(ok);
    QObject::disconnect(bad);
  }

  if (!load_dir.empty()) return loadStall(window, load_dir);
  if (long_tokens > 0)
    return longPrompt(window, QString::fromStdString(document), model_dir, document_tokens, long_keys, middle_keys);

  // Timestamps, on one clock, from the signals the views listen to (connected after the
  // window's own slots, so a view has taken the result when we note it).
  QElapsedTimer clock;
  clock.start();
  auto now_ms = [&] { return static_cast<double>(clock.nsecsElapsed()) / 1e6; };
  double t_text = 0, t_request = 0, t_run = 0, t_pos = 0, t_layer = 0, t_view = 0;
  quint64 job = 0;
  bool have_run = false, have_pos = false, have_layer = false, have_view = false;
  double worker_ms = 0, hop_ms = 0;
  int reused = 0, n_pos = 0;
  QObject::connect(prompt, &QPlainTextEdit::textChanged, [&] { t_text = now_ms(); });
  QObject::connect(controller, &AnalysisController::runStarted, [&](quint64 j) {
    job = j;
    t_request = now_ms();
    have_run = have_pos = have_layer = have_view = false;
  });
  QObject::connect(controller, &AnalysisController::runReady, [&](std::shared_ptr<const RunResult> r) {
    if (r->job != job) return;
    t_run = now_ms();
    have_run = true;
    worker_ms = r->worker_ms;
    hop_ms = r->latency_ms;  // request -> the controller's hand-over, before the window's slot ran
    reused = r->run.cache->reused_prefix;
    n_pos = r->n_pos();
  });
  // The contributions view's analysis (one position) and the concat-vs-sum view's (one layer).
  QObject::connect(controller, &AnalysisController::analysisReady, [&](const QString& id, std::shared_ptr<const ViewResult> r) {
    if (r->run_job != job) return;
    if (wait_view && id == shown_descriptor->id && !have_view) {
      t_view = now_ms();
      have_view = true;
    }
    if (wait_view && id == shown_descriptor->id) return;  // timed above, not as the position's analysis
    const bool is_layer = id == QStringLiteral("concat");
    bool& have = is_layer ? have_layer : have_pos;
    if (have) return;
    (is_layer ? t_layer : t_pos) = now_ms();
    have = true;
  });
  bool failed = false;
  QObject::connect(controller, &AnalysisController::runFailed, [&](const QString& m) {
    std::cerr << "hs_bench_keys: run failed: " << m.toStdString() << "\n";
    failed = true;
  });

  // Let the first run's analyses land, then start.
  waitUntil([&] { return false; }, 300);
  auto* timed = static_cast<TimedApplication*>(QCoreApplication::instance());
  Heartbeat beat;
  beat.start();
  timed->startRecording();

  // Phase 1: one key at a time, each waited for.
  std::vector<double> debounce, run_ms, views_ms, worker, window_slot, view_ms;
  std::vector<int> positions, reused_list;
  for (int i = 1; i < text.size() && !failed; ++i) {
    const QString expect = text.left(i + 1);
    const quint64 job_before = job;
    typeChar(prompt, text[i]);
    if (prompt->toPlainText() != expect) {
      std::cerr << "hs_bench_keys: the prompt reads \"" << prompt->toPlainText().toStdString() << "\", expected \""
                << expect.toStdString() << "\"\n";
      return 1;
    }
    const double typed_at = t_text;
    if (!waitUntil([&] { return job != job_before && have_run && have_pos && have_layer && (have_view || !wait_view); },
                   30000)) {
      std::cerr << "hs_bench_keys: no result for \"" << expect.toStdString() << "\" within 30 s\n";
      return 1;
    }
    debounce.push_back(t_request - typed_at);
    run_ms.push_back(t_run - t_request);
    views_ms.push_back(std::max({t_run, t_pos, t_layer}) - t_request);
    if (wait_view) view_ms.push_back(t_view - t_request);
    worker.push_back(worker_ms);
    window_slot.push_back(std::max(0.0, (t_run - t_request) - hop_ms));
    positions.push_back(n_pos);
    reused_list.push_back(reused);
    idle(settle_ms);  // paints land; the next key comes after a pause, as a person's would
  }
  const double stall_step = beat.maxStallMs(), busy_step = beat.maxBusyMs(), busy_of_max_step = beat.busyOfMaxMs();
  const int stall_step_over16 = beat.stallsOver16ms();
  const auto counts_step = timed->takeCounts();
  const auto slowest_step = timed->takeSlowest();

  // Phase 2: delete the sentence back to its first character and retype it at a steady pace.
  waitUntil([&] { return !controller->isRunning(); }, 30000);
  idle(300);
  prompt->setPlainText(text.left(1));
  prompt->moveCursor(QTextCursor::End);
  waitUntil([&] { return have_run && have_pos && have_layer && prompt->toPlainText() == text.left(1); }, 30000);
  idle(300);
  beat.reset();
  timed->startRecording();
  QElapsedTimer typing;
  typing.start();
  for (int i = 1; i < text.size(); ++i) {
    typeChar(prompt, text[i]);
    idle(interval_ms);
  }
  const double typing_ms = static_cast<double>(typing.elapsed());
  const bool settled = waitUntil(
      [&] { return have_run && have_pos && have_layer && controller->currentRun() &&
                   QString::fromStdString(controller->currentRun()->run.text) == text; },
      30000);
  const double stall_typing = beat.maxStallMs(), busy_typing = beat.maxBusyMs(), busy_of_max_typing = beat.busyOfMaxMs();
  const int stall_typing_over16 = beat.stallsOver16ms();
  const auto counts_typing = timed->takeCounts();
  const auto slowest_typing = timed->takeSlowest();

  // The work behind one keystroke, without threads: medians of repeated synchronous calls.
  std::vector<double> c_full, c_incr, c_pos, c_layer;
  if (auto last = controller->currentRun()) {
    const QString full = QString::fromStdString(last->run.text);
    const QString shorter = full.left(full.size() - 1);
    auto prev = AnalysisController::computeRun(last->run.model, shorter);
    QElapsedTimer t;
    for (int rep = 0; rep < 15; ++rep) {
      t.start();
      auto r = AnalysisController::computeRun(last->run.model, full);
      c_full.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
      t.start();
      auto r2 = AnalysisController::computeRun(last->run.model, full, prev->run.cache);
      c_incr.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
      timeViewAnalyses(window, last, c_pos, c_layer);
    }
  }

  const Stats s_debounce = stats(debounce), s_run = stats(run_ms), s_views = stats(views_ms), s_worker = stats(worker),
              s_slot = stats(window_slot);
  std::printf(
      "{\"shown_view\": %s, \"shown_view_ms\": %s, \"model\": %s, \"model_kind\": %s, \"n_layer\": %d, \"n_head\": %d, \"d_model\": %d, \"n_ctx\": %d, "
      "\"sentence\": %s, \"tokens_at_end\": %d, \"keys\": %zu, \"debounce_setting_ms\": %d, "
      "\"debounce_ms\": %s, \"run_ms\": %s, \"views_ms\": %s, \"worker_ms\": %s, \"window_slot_ms\": %s, "
      "\"views_ms_per_key\": %s, \"reused_prefix_last\": %d, "
      "\"stall_step_max_ms\": %.2f, \"stall_step_busy_ms\": %.2f, \"stall_step_max_busy_ms\": %.2f, "
      "\"stall_step_over16\": %d, "
      "\"typing_interval_ms\": %d, \"typing_ms\": %.0f, \"typing_settled\": %s, "
      "\"stall_typing_max_ms\": %.2f, \"stall_typing_busy_ms\": %.2f, \"stall_typing_max_busy_ms\": %.2f, "
      "\"stall_typing_over16\": %d, \"stall_max_ms\": %.2f, \"stall_max_busy_ms\": %.2f, "
      "\"sync_run_full_ms\": %s, \"sync_run_incremental_ms\": %s, \"sync_position_ms\": %s, \"sync_layer_ms\": %s, "
      "\"slowest_dispatches_step\": %s, \"slowest_dispatches_typing\": %s, "
      "\"dispatches_over_1ms_step\": %s, \"dispatches_over_1ms_typing\": %s, \"qtest\": %s}\n",
      jstr(view_id.empty() ? std::string("(first tab)") : view_id).c_str(),
      view_ms.empty() ? "null" : jstats(stats(view_ms)).c_str(), jstr(model_dir).c_str(), jstr(model_kind).c_str(),
      cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.n_ctx,
      jstr(sentence).c_str(), n_tokens, views_ms.size(), MainWindow::kDebounceMs, jstats(s_debounce).c_str(),
      jstats(s_run).c_str(), jstats(s_views).c_str(), jstats(s_worker).c_str(), jstats(s_slot).c_str(),
      list(views_ms).c_str(),
      reused_list.empty() ? 0 : reused_list.back(), stall_step, busy_of_max_step, busy_step, stall_step_over16,
      interval_ms, typing_ms, settled ? "true" : "false", stall_typing, busy_of_max_typing, busy_typing,
      stall_typing_over16, std::max(stall_step, stall_typing), std::max(busy_step, busy_typing),
      jstats(stats(c_full)).c_str(), jstats(stats(c_incr)).c_str(), jstats(stats(c_pos)).c_str(),
      jstats(stats(c_layer)).c_str(), jdispatches(slowest_step).c_str(), jdispatches(slowest_typing).c_str(),
      jcounts(counts_step).c_str(), jcounts(counts_typing).c_str(),
#ifdef HEADSCOPE_HAVE_QTEST
      "true"
#else
      "false"
#endif
  );
  return failed ? 1 : 0;
}
