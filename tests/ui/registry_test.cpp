// The seams of the view registry: the window, Export All, --help and the controller's keyed queue
// take their views from ui/views/registry.cpp and know none of them by name.
#include <catch2/catch.hpp>

#include <QAction>
#include <QDir>
#include <QMenuBar>
#include <QProcess>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QThread>

#include <atomic>
#include <set>

#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/views/registry.h"
#include "ui/window/export_all.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::AnalysisSpy;
using hs::ui::test::waitFor;

TEST_CASE("Every registered view has a unique id, a tab and a View menu entry, in registry order", "[registry]") {
  std::set<QString> ids;
  for (const ViewDescriptor& v : viewRegistry()) {
    CHECK(ids.insert(v.id).second);
    CHECK(!v.title.isEmpty());
    CHECK(!v.help.isEmpty());
    CHECK(v.export_size.isValid());
    CHECK((!v.analysis.compute || v.analysis.id == v.id));
    CHECK(findView(v.id) == &v);
  }
  CHECK(findView(QStringLiteral("no-such-view")) == nullptr);

  MainWindow window(MainWindowOptions{test::fixtureModelDir(), QStringLiteral("The cat"), false, QStringLiteral("concat")});
  REQUIRE(window.tabs()->count() == static_cast<int>(viewRegistry().size()));
  QStringList menu;
  for (QAction* top : window.menuBar()->actions())
    if (top->menu())
      for (QAction* a : top->menu()->actions()) menu << a->text();
  for (int i = 0; i < window.tabs()->count(); ++i) {
    const ViewDescriptor& v = viewRegistry()[static_cast<size_t>(i)];
    CHECK(window.tabs()->tabText(i) == v.title);
    CHECK(window.tabs()->widget(i) == window.view(v.id));
    CHECK(menu.contains(v.menu_text));
  }
  // --view NAME chose the first tab by id.
  CHECK(window.tabs()->currentWidget() == window.view(QStringLiteral("concat")));
}

TEST_CASE("Export All writes exactly the figures the registered views list", "[registry][export]") {
  auto run = AnalysisController::computeRun(test::fixtureModel(), QStringLiteral("The cat sat"));
  run->job = 1;
  size_t expected = 0;
  Selection selection;
  selection.setBounds(run->n_layer(), run->n_head(), run->n_pos());
  for (const ViewDescriptor& v : viewRegistry()) {
    std::unique_ptr<AnalysisView> view(v.create(&selection, nullptr));
    const size_t figures = view->exportFigures(*run).size();
    // A view exports figures, or says why it has none (the patching view without its inputs).
    INFO(v.id.toStdString());
    CHECK((figures > 0) != !view->exportSkipReason(*run).isEmpty());
    expected += figures;
  }
  QTemporaryDir tmp;
  ExportAllJob::Options options;
  options.out_dir = tmp.path();
  ExportAllJob job(run, options);
  bool done = false, ok = false;
  QObject::connect(&job, &ExportAllJob::finished, [&](bool success, const QString&) {
    done = true;
    ok = success;
  });
  job.start();
  REQUIRE(waitFor([&] { return done; }, 60000));
  CHECK(ok);
  CHECK(job.total() == static_cast<int>(expected));
  CHECK(QDir(tmp.path()).entryList({QStringLiteral("*.png")}, QDir::Files).size() == static_cast<int>(expected));
}

TEST_CASE("headscope --help lists every registered view", "[registry][cli]") {
  QProcess p;
  p.start(QStringLiteral(HEADSCOPE_GUI_PATH), {QStringLiteral("--help")});
  REQUIRE(p.waitForFinished(30000));
  const QString help = QString::fromUtf8(p.readAllStandardOutput());
  for (const ViewDescriptor& v : viewRegistry()) {
    INFO(v.id.toStdString());
    CHECK(help.contains(v.id));
    CHECK(help.contains(v.help.left(40)));
  }
  p.start(QStringLiteral(HEADSCOPE_GUI_PATH), {QStringLiteral("--view"), QStringLiteral("no-such-view")});
  REQUIRE(p.waitForFinished(30000));
  CHECK(p.exitCode() == 2);
  CHECK(QString::fromUtf8(p.readAllStandardError()).contains(viewRegistry().front().id));
}

TEST_CASE("The controller schedules any registered analysis by id, newest request first", "[registry][controller]") {
  // An analysis the app does not have: what a new view brings is only its AnalysisSpec.
  struct Echo : ViewResult {
    int layer = -1;
  };
  auto computed = std::make_shared<std::atomic<int>>(0);
  AnalysisSpec spec;
  spec.id = QStringLiteral("echo");
  spec.reads = kReadsLayer;
  spec.with_every_run = false;
  spec.compute = [computed](const RunResult&, const AnalysisKey& key) {
    ++*computed;
    auto r = std::make_shared<Echo>();
    r->layer = key.layer;
    return std::shared_ptr<ViewResult>(std::move(r));
  };
  AnalysisController c;
  c.addAnalysis(spec);
  CHECK(c.hasAnalysis(QStringLiteral("echo")));
  c.setModel(test::fixtureModel());
  QSignalSpy ready(&c, &AnalysisController::runReady);
  AnalysisSpy echo(&c, QStringLiteral("echo"));
  c.requestRun(QStringLiteral("The cat"));
  REQUIRE(waitFor([&] { return ready.count() == 1; }));
  CHECK(*computed == 0);  // not computed with the run: it asked not to be
  AnalysisKey key;
  key.layer = 1;
  c.request(QStringLiteral("echo"), key);
  CHECK(echo.count() == 0);  // never inside the request
  REQUIRE(waitFor([&] { return echo.count() == 1; }));
  const auto r = echo.at<Echo>(0);
  REQUIRE(r);
  CHECK(r->layer == 1);
  CHECK(r->key == key);
  CHECK(r->run_job == c.currentRun()->job);
  CHECK(r->run == c.currentRun());

  QSignalSpy failed(&c, &AnalysisController::analysisFailed);
  c.request(QStringLiteral("unknown"), key);
  CHECK(failed.count() == 1);
}

TEST_CASE("A hidden view's analysis comes with each run only while it is cheap", "[registry][controller]") {
  // Two analyses computed with every run, both hidden: one quick, one that takes longer than the
  // controller's budget for a view nobody sees. After two measured computations each, runs keep
  // computing the quick one and leave the slow one until it is asked for.
  auto quick_runs = std::make_shared<std::atomic<int>>(0), slow_runs = std::make_shared<std::atomic<int>>(0);
  auto spec = [](const char* id, std::shared_ptr<std::atomic<int>> count, int sleep_ms) {
    AnalysisSpec s;
    s.id = QString::fromLatin1(id);
    s.reads = kReadsLayer;
    s.compute = [count, sleep_ms](const RunResult&, const AnalysisKey&) {
      ++*count;
      if (sleep_ms > 0) QThread::msleep(static_cast<unsigned long>(sleep_ms));
      return std::make_shared<ViewResult>();
    };
    return s;
  };
  const int slow_ms = static_cast<int>(3 * AnalysisController::kHiddenAheadMs);
  AnalysisController c;
  c.addAnalysis(spec("quick", quick_runs, 0));
  c.addAnalysis(spec("slow", slow_runs, slow_ms));
  c.setModel(test::fixtureModel());
  QSignalSpy ready(&c, &AnalysisController::runReady);
  c.requestRun(QStringLiteral("The"));  // both computed with it: neither has been measured
  REQUIRE(waitFor([&] { return ready.count() == 1; }));
  c.setShown(QStringLiteral("quick"), false);
  c.setShown(QStringLiteral("slow"), false);
  CHECK(c.isCheap(QStringLiteral("slow")));  // one measurement is not enough to judge
  c.requestRun(QStringLiteral("The cat"));
  REQUIRE(waitFor([&] { return ready.count() == 2; }));
  CHECK(*quick_runs == 2);
  CHECK(*slow_runs == 2);
  CHECK(c.isCheap(QStringLiteral("quick")));
  CHECK_FALSE(c.isCheap(QStringLiteral("slow")));

  c.requestRun(QStringLiteral("The cat sat"));
  REQUIRE(waitFor([&] { return ready.count() == 3; }));
  CHECK(*quick_runs == 3);
  CHECK(*slow_runs == 2);  // hidden and slow: left out of the run
  AnalysisKey key;
  key.layer = 0;  // what the runs computed for: nothing asked yet, so the first layer
  CHECK(c.hasReady(QStringLiteral("quick"), key));
  CHECK_FALSE(c.hasReady(QStringLiteral("slow"), key));

  // Shown again: computed when asked for, and with the runs after that.
  c.setShown(QStringLiteral("slow"), true);
  AnalysisSpy slow(&c, QStringLiteral("slow"));
  c.request(QStringLiteral("slow"), key);
  REQUIRE(waitFor([&] { return slow.count() == 1; }));
  CHECK(*slow_runs == 3);
  CHECK(slow.at<ViewResult>(0)->compute_ms >= slow_ms);
  c.requestRun(QStringLiteral("The cat sat on"));
  REQUIRE(waitFor([&] { return ready.count() == 4; }));
  CHECK(*slow_runs == 4);
  CHECK(c.hasReady(QStringLiteral("slow"), key));
}

TEST_CASE("One slow computation does not take a cheap hidden analysis out of the runs", "[registry][controller]") {
  // The other core busy for a moment makes one computation slow; a view that is hidden but cheap
  // must keep coming with each run (a benchmark waited forever on it when one slow sample did).
  auto calls = std::make_shared<std::atomic<int>>(0);
  AnalysisSpec s;
  s.id = QStringLiteral("hiccup");
  s.reads = kReadsLayer;
  constexpr int slow_ms = static_cast<int>(3 * AnalysisController::kHiddenAheadMs);
  s.compute = [calls](const RunResult&, const AnalysisKey&) {
    if (++*calls == 2) QThread::msleep(static_cast<unsigned long>(slow_ms));
    return std::make_shared<ViewResult>();
  };
  AnalysisController c;
  c.addAnalysis(s);
  c.setModel(test::fixtureModel());
  c.setShown(QStringLiteral("hiccup"), false);
  QSignalSpy ready(&c, &AnalysisController::runReady);
  const QString texts[] = {QStringLiteral("The"), QStringLiteral("The cat"), QStringLiteral("The cat sat"),
                           QStringLiteral("The cat sat on")};
  for (int i = 0; i < 4; ++i) {
    c.requestRun(texts[i]);
    REQUIRE(waitFor([&] { return ready.count() == i + 1; }));
    CHECK(*calls == i + 1);  // computed with every run, the slow one included
  }
  CHECK(c.isCheap(QStringLiteral("hiccup")));
}

TEST_CASE("A view's command-line options are its own: unique, typed, and listed by --help", "[registry][cli]") {
  std::set<QString> names;
  for (const ViewDescriptor& v : viewRegistry())
    for (const ViewOption& o : v.options) {
      INFO(v.id.toStdString() << " --" << o.name.toStdString());
      CHECK(names.insert(o.name).second);  // one command line for every view
      CHECK(!o.value_name.isEmpty());
      CHECK(!o.help.isEmpty());
    }

  QString error;
  const ViewOption text{QStringLiteral("prompt"), QStringLiteral("TEXT"), QStringLiteral("a prompt")};
  CHECK(parseViewOption(text, QStringLiteral(" a b"), &error) == QVariant(QStringLiteral(" a b")));
  const ViewOption count{QStringLiteral("count"), QStringLiteral("N"), QStringLiteral("a count"), ViewOption::Type::Integer};
  CHECK(parseViewOption(count, QStringLiteral("12"), &error) == QVariant(12));
  CHECK_FALSE(parseViewOption(count, QStringLiteral("1.5"), &error));
  CHECK(error == QStringLiteral("--count must be an integer (got '1.5')"));
  const ViewOption scale{QStringLiteral("scale"), QStringLiteral("X"), QStringLiteral("a scale"), ViewOption::Type::Number};
  CHECK(parseViewOption(scale, QStringLiteral("0.25"), &error) == QVariant(0.25));
  CHECK_FALSE(parseViewOption(scale, QStringLiteral("a"), &error));
  CHECK(error == QStringLiteral("--scale must be a number (got 'a')"));
  const ViewOption method{QStringLiteral("method"), QStringLiteral("M"), QStringLiteral("a method"),
                          ViewOption::Type::Text, {QStringLiteral("atp"), QStringLiteral("exact")}};
  CHECK(parseViewOption(method, QStringLiteral("exact"), &error) == QVariant(QStringLiteral("exact")));
  CHECK_FALSE(parseViewOption(method, QStringLiteral("fast"), &error));
  CHECK(error == QStringLiteral("--method must be one of atp, exact (got 'fast')"));

  QProcess p;
  p.start(QStringLiteral(HEADSCOPE_GUI_PATH), {QStringLiteral("--help")});
  REQUIRE(p.waitForFinished(30000));
  const QString help = QString::fromUtf8(p.readAllStandardOutput());
  for (const ViewDescriptor& v : viewRegistry())
    for (const ViewOption& o : v.options) {
      CHECK(help.contains(QStringLiteral("--%1 %2").arg(o.name, o.value_name)));
      CHECK(help.contains(o.help.section(QLatin1Char(' '), 0, 3)));
    }
}
