// Export: PNGs that load, at the expected size, written atomically; the headless command line.
#include <catch2/catch.hpp>

#include <QDir>
#include <QFile>
#include <QImage>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>

#include "ui/controller/analysis_controller.h"
#include "ui/window/export_all.h"
#include "ui/base/figure.h"
#include "ui/views/attention_view.h"
#include "ui/views/patching_view.h"
#include "ui/views/registry.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/window/main_window.h"
#include "ui/controller/selection.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

namespace {

std::shared_ptr<const RunResult> fixtureRun(const QString& text = QStringLiteral("The cat sat on the mat")) {
  auto run = AnalysisController::computeRun(test::fixtureModel(), text);
  run->job = 1;
  return run;
}

using test::ExportOutcome;
using test::runExport;

}  // namespace

TEST_CASE("A saved figure is a valid PNG of the expected size", "[export]") {
  QTemporaryDir tmp;
  HeatmapView view;
  view.resize(640, 480);
  view.setMatrix(2, 2, {1.0f, NAN, 0.4f, 0.6f});
  view.setRowLabels({QStringLiteral("<bos>"), QStringLiteral("␣cat")});
  view.setColumnLabels({QStringLiteral("<bos>"), QStringLiteral("␣cat")});
  view.setFigureText({QStringLiteral("L0H0 attention pattern"), QStringLiteral("fixture · “x” · 2 tokens")},
                     QStringLiteral("attention_L0H0"));
  view.show();
  view.replotNow();
  const QSize body = view.figureSize();
  for (double scale : {1.0, 2.0}) {
    const QString path = tmp.filePath(QStringLiteral("figure_%1.png").arg(scale));
    const QImage image = renderFigureImage(view, body, scale);
    REQUIRE(writeFileAtomically(path, encodePng(image, view.figureText())).isEmpty());
    QImage loaded(path);
    REQUIRE(!loaded.isNull());
    CHECK(loaded.width() == static_cast<int>(body.width() * scale));
    CHECK(loaded.height() == static_cast<int>((body.height() + figureTitleHeight()) * scale));
    CHECK(loaded.text(QStringLiteral("Title")) == QStringLiteral("L0H0 attention pattern"));
  }
  // Nothing but the two files: no temporaries left behind.
  CHECK(QDir(tmp.path()).entryList(QDir::Files).size() == 2);
}

TEST_CASE("Writing into a folder that does not exist fails with a message and leaves nothing", "[export]") {
  QTemporaryDir tmp;
  const QString path = tmp.filePath(QStringLiteral("missing/figure.png"));
  const QString error = writeFileAtomically(path, QByteArray("png bytes"));
  CHECK(!error.isEmpty());
  CHECK(error.contains(path));
  CHECK(!QFile::exists(path));
}

TEST_CASE("Export All writes a PNG of every view", "[export]") {
  QTemporaryDir tmp;
  const auto run = fixtureRun();
  ExportAllJob::Options options;
  options.out_dir = tmp.filePath(QStringLiteral("out"));
  ExportAllJob job(run, options);
  QSignalSpy progress(&job, &ExportAllJob::progress);
  const ExportOutcome out = runExport(job);
  REQUIRE(out.finished);
  INFO(out.message.toStdString());
  REQUIRE(out.ok);
  const int L = run->n_layer(), H = run->n_head();
  const QStringList files = QDir(options.out_dir).entryList({QStringLiteral("*.png")}, QDir::Files, QDir::Name);
  // Attention: overview + every head; Contributions: 2; Concat vs Sum: one per layer; Logit Lens: 1;
  // QK / OV: the selected head; Patching: nothing, since no corrupted prompt was given (the
  // message says so; ablate_patch_test.cpp exports its maps); the selected head's edge
  // attributions (attention) and the Attribution view's 4 figures; Heads over Data: nothing, since
  // no data-set scan was given (head_dataset_view_test.cpp exports one); Neurons: the view and its
  // token strip; Features: nothing, since no sparse autoencoder is loaded; Graph: nothing, since no
  // transcoder is loaded (graph_view_test.cpp draws one).
  CHECK(files.size() == L * H + 1 + 2 + L + 1 + 1 + 1 + 4 + 2);
  CHECK_FALSE(files.contains(QStringLiteral("patching.png")));
  CHECK(out.message.contains(QStringLiteral("nothing to export from Patching: no corrupted prompt")));
  CHECK(out.message.contains(QStringLiteral("Heads over Data: no data-set scan")));
  CHECK(out.message.contains(QStringLiteral("Features: no sparse autoencoder loaded")));
  CHECK(out.message.contains(QStringLiteral("Graph: no transcoder is loaded for every layer")));
  REQUIRE(job.skipped().size() == 4);
  CHECK(files.contains(QStringLiteral("attention_L1H3.png")));
  CHECK(files.contains(QStringLiteral("concat_vs_sum_L0.png")));
  CHECK(files.contains(QStringLiteral("heads_overview.png")));
  const int last = run->n_pos() - 1;
  CHECK(files.contains(QStringLiteral("contributions_norm_pos%1.png").arg(last)));
  CHECK(files.contains(QStringLiteral("contributions_dla_pos%1.png").arg(last)));
  CHECK(files.contains(QStringLiteral("logit_lens.png")));
  CHECK(files.contains(QStringLiteral("circuits_L0H0.png")));
  for (const QString& f : files) {
    QImage image(QDir(options.out_dir).filePath(f));
    INFO(f.toStdString());
    CHECK(!image.isNull());
  }
  QImage concat(QDir(options.out_dir).filePath(QStringLiteral("concat_vs_sum_L0.png")));
  const QSize concat_size = findView(QStringLiteral("concat"))->export_size;
  CHECK(concat.size() == QSize(concat_size.width(), concat_size.height() + figureTitleHeight()));
  QImage pattern(QDir(options.out_dir).filePath(QStringLiteral("attention_L1H3.png")));
  const QSize pattern_size = AttentionView::kPatternFigureSize;
  CHECK(pattern.size() == QSize(pattern_size.width(), pattern_size.height() + figureTitleHeight()));
  CHECK(!pattern.hasAlphaChannel());
  CHECK(progress.count() == L * H + 1 + 2 + L + 1 + 1 + 1 + 4 + 2);
  CHECK(QDir(options.out_dir).entryList(QDir::Files | QDir::Hidden).size() == files.size());
}

TEST_CASE("Every heatmap in the figures Export All writes has a colour scale with a title", "[export]") {
  // Issue 21: a figure's colours must say what they are. Every view's figures (the Patching view's
  // too, given inputs), checked as they are painted: each heatmap with cells in the figure shows its
  // colour scale, and the scale has a title.
  auto run = AnalysisController::computeRun(test::fixtureModel(), QStringLiteral("The cat sat on the mat!"));
  run->job = 1;
  QTemporaryDir tmp;
  ExportAllJob::Options options;
  options.out_dir = tmp.path();
  options.view_inputs[QStringLiteral("patching")] = test::fixturePatchingInputs();
  ExportAllJob job(run, options);
  int figures = 0, heatmaps = 0;
  QStringList untitled;
  QObject::connect(&job, &ExportAllJob::figurePainted, [&](const FigureSource* source, const QString& file) {
    ++figures;
    const auto* widget = dynamic_cast<const QWidget*>(source);
    REQUIRE(widget);
    QList<const HeatmapView*> maps;
    if (const auto* self = dynamic_cast<const HeatmapView*>(source)) maps << self;
    for (const HeatmapView* m : widget->findChildren<const HeatmapView*>()) maps << m;
    for (const HeatmapView* m : maps) {
      if (!m->isVisibleTo(widget) && m != widget) continue;
      if (m->rowCount() == 0) continue;
      ++heatmaps;
      if (!m->colorScaleShown() || m->colorScaleTitle().trimmed().isEmpty())
        untitled << QStringLiteral("%1: %2 (scale %3, title '%4')")
                        .arg(file, m->objectName(), m->colorScaleShown() ? QStringLiteral("shown") : QStringLiteral("hidden"),
                             m->colorScaleTitle());
    }
  });
  const ExportOutcome out = runExport(job);
  REQUIRE(out.finished);
  INFO(out.message.toStdString());
  REQUIRE(out.ok);
  INFO(untitled.join(QStringLiteral("\n")).toStdString());
  CHECK(untitled.isEmpty());
  CHECK(figures == static_cast<int>(job.written().size()));
  // Attention (every head), Contributions, Concat vs Sum (five maps a layer), Logit Lens, QK / OV
  // and the four patching maps.
  CHECK(heatmaps >= run->n_layer() * run->n_head() + 2 + 5 * run->n_layer() + 1 + 1 + 4);
}

TEST_CASE("Export All into an unwritable folder fails at once with a message", "[export]") {
  const auto run = fixtureRun();
  ExportAllJob::Options options;
  options.out_dir = QStringLiteral("/proc/headscope-cannot-write-here");
  ExportAllJob job(run, options);
  const ExportOutcome out = runExport(job);
  CHECK(out.finished);
  CHECK(!out.ok);
  CHECK(out.message.contains(QStringLiteral("/proc/headscope-cannot-write-here")));
}

TEST_CASE("headscope --export writes every view without a window and failures exit non-zero", "[export][cli]") {
  QTemporaryDir tmp;
  const QString exe = QStringLiteral(HEADSCOPE_GUI_PATH);
  REQUIRE(QFile::exists(exe));
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.remove(QStringLiteral("DISPLAY"));
  env.remove(QStringLiteral("QT_QPA_PLATFORM"));
  p.setProcessEnvironment(env);

  const QString out = tmp.filePath(QStringLiteral("pngs"));
  p.start(exe, {QStringLiteral("--model"), test::fixtureModelDir(), QStringLiteral("--text"), QStringLiteral("The cat sat"),
                QStringLiteral("--export"), out});
  REQUIRE(p.waitForFinished(120000));
  INFO(p.readAllStandardError().toStdString());
  CHECK(p.exitCode() == 0);
  // Every view's figures but the patching view's, which has no inputs here (the attention view's
  // include the selected head's edge attributions; the Attribution view writes 4, Neurons 2).
  CHECK(QDir(out).entryList({QStringLiteral("*.png")}, QDir::Files).size() == 2 * 4 + 1 + 2 + 2 + 1 + 1 + 1 + 4 + 2);

  p.start(exe, {QStringLiteral("--model"), test::fixtureModelDir(), QStringLiteral("--text"), QStringLiteral("x"),
                QStringLiteral("--export"), QStringLiteral("/proc/no-such-place")});
  REQUIRE(p.waitForFinished(60000));
  CHECK(p.exitCode() != 0);
  const QString err = QString::fromUtf8(p.readAllStandardError()).trimmed();
  CHECK(err.startsWith(QStringLiteral("headscope: ")));
  CHECK(!err.contains('\n'));

  p.start(exe, {QStringLiteral("--model"), test::makeBrokenModelDir(tmp.path()), QStringLiteral("--text"),
                QStringLiteral("x"), QStringLiteral("--export"), tmp.filePath(QStringLiteral("never"))});
  REQUIRE(p.waitForFinished(60000));
  CHECK(p.exitCode() != 0);
  CHECK(QString::fromUtf8(p.readAllStandardError()).contains(QStringLiteral("config.json")));
  CHECK(!QDir(tmp.filePath(QStringLiteral("never"))).exists());

  p.start(exe, {QStringLiteral("--version")});
  REQUIRE(p.waitForFinished(30000));
  CHECK(p.exitCode() == 0);
  CHECK(QString::fromUtf8(p.readAllStandardOutput()).trimmed() == QStringLiteral("headscope " HEADSCOPE_VERSION));

  p.start(exe, {QStringLiteral("--help")});
  REQUIRE(p.waitForFinished(30000));
  CHECK(p.exitCode() == 0);
  CHECK(QString::fromUtf8(p.readAllStandardOutput()).contains(QStringLiteral("--export OUTDIR")));
}

TEST_CASE("headscope --export takes the selected head, ablations and the patching inputs", "[export][cli]") {
  QTemporaryDir tmp;
  const QString exe = QStringLiteral(HEADSCOPE_GUI_PATH);
  QProcess p;
  auto exportWith = [&](const QString& dir, QStringList extra) {
    QStringList args{QStringLiteral("--model"), test::fixtureModelDir(), QStringLiteral("--text"),
                     QStringLiteral("The cat sat on the mat!"), QStringLiteral("--export"), dir};
    p.start(exe, args + extra);
    REQUIRE(p.waitForFinished(120000));
  };
  auto bytes = [](const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
  };

  const QString plain = tmp.filePath(QStringLiteral("plain"));
  exportWith(plain, {});
  REQUIRE(p.exitCode() == 0);
  CHECK(QFile::exists(plain + QStringLiteral("/circuits_L0H0.png")));
  // No patching inputs: no empty patching figure, and the one line on stdout says so.
  CHECK_FALSE(QFile::exists(plain + QStringLiteral("/patching.png")));
  CHECK(QString::fromUtf8(p.readAllStandardOutput()).contains(QStringLiteral("nothing to export from Patching")));

  const QString chosen = tmp.filePath(QStringLiteral("chosen"));
  exportWith(chosen, {QStringLiteral("--head"), QStringLiteral("1.2"), QStringLiteral("--ablate"), QStringLiteral("0.1"),
                      QStringLiteral("--corrupt"), QStringLiteral("The cat sat on the hat!"), QStringLiteral("--answer"),
                      QStringLiteral("Z"), QStringLiteral("--wrong"), QStringLiteral("\"")});
  INFO(p.readAllStandardError().toStdString());
  REQUIRE(p.exitCode() == 0);
  const QStringList files = QDir(chosen).entryList({QStringLiteral("*.png")}, QDir::Files);
  CHECK(files.contains(QStringLiteral("circuits_L1H2.png")));  // the selected head's circuits
  CHECK(!files.contains(QStringLiteral("circuits_L0H0.png")));
  for (const char* site : {"resid_pre", "attn_out", "mlp_out", "z"})  // the sweep ran: one figure per site
    CHECK(files.contains(QStringLiteral("patching_%1.png").arg(QLatin1String(site))));
  // Ablating L0H1 changes what layer 1 attends to, not layer 0's own patterns.
  CHECK(bytes(chosen + QStringLiteral("/attention_L1H0.png")) != bytes(plain + QStringLiteral("/attention_L1H0.png")));
  CHECK(bytes(chosen + QStringLiteral("/attention_L0H0.png")) == bytes(plain + QStringLiteral("/attention_L0H0.png")));

  exportWith(tmp.filePath(QStringLiteral("bad1")), {QStringLiteral("--head"), QStringLiteral("one.two")});
  CHECK(p.exitCode() == 2);
  CHECK(QString::fromUtf8(p.readAllStandardError()).contains(QStringLiteral("--head must be LAYER.HEAD")));
  exportWith(tmp.filePath(QStringLiteral("bad2")), {QStringLiteral("--head"), QStringLiteral("7.0")});
  CHECK(p.exitCode() == 1);
  CHECK(QString::fromUtf8(p.readAllStandardError()).contains(QStringLiteral("the model has 2 layers of 4 heads")));
  exportWith(tmp.filePath(QStringLiteral("bad3")), {QStringLiteral("--ablate"), QStringLiteral("3.x")});
  CHECK(p.exitCode() == 2);
  CHECK(QString::fromUtf8(p.readAllStandardError()).startsWith(QStringLiteral("headscope: --ablate: ")));
  for (const char* dir : {"bad1", "bad2", "bad3"}) CHECK(!QDir(tmp.filePath(QLatin1String(dir))).exists());
}

TEST_CASE("File > Export All exports the views of the head selected in the window", "[export][window]") {
  MainWindow window(MainWindowOptions{test::fixtureModelDir(), QStringLiteral("The cat sat. The cat"), false});
  window.show();
  REQUIRE(test::waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  window.selection()->setHead(1, 3);
  QTemporaryDir tmp;
  const ExportAllJob::Options options = window.exportAllOptions(tmp.filePath(QStringLiteral("out")));
  CHECK(options.layer == 1);
  CHECK(options.head == 3);
  ExportAllJob job(window.controller()->currentRun(), options);
  const ExportOutcome out = runExport(job);
  REQUIRE(out.finished);
  REQUIRE(out.ok);
  const QStringList files = QDir(options.out_dir).entryList({QStringLiteral("*.png")}, QDir::Files, QDir::Name);
  CHECK(files.contains(QStringLiteral("circuits_L1H3.png")));
  CHECK_FALSE(files.contains(QStringLiteral("circuits_L0H0.png")));
  CHECK(files.contains(QStringLiteral("concat_vs_sum_L1.png")));
}
