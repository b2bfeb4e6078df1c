// `headscope`: the desktop app. With --export it writes every view's PNG and exits, no window.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "core/features/features.h"
#include "core/model/architecture.h"
#include "core/model/intervention.h"
#include "ui/base/stall_monitor.h"
#include "ui/window/headless.h"
#include "ui/views/registry.h"
#include "ui/window/main_window.h"
#include "ui/style/app_style.h"

namespace {

// An option's lines of --help: the option, then its help from column 19, word-wrapped to lines
// of at most 93 characters like the written ones (on a line of its own when the option is long).
std::string optionLines(const QString& option, const QString& help) {
  constexpr int kColumn = 19, kWidth = 93;
  const QString indent(kColumn, QLatin1Char(' '));
  QString text, line = QStringLiteral("  ") + option;
  if (line.size() > kColumn - 2) {  // too long for the column: the help starts below it
    text = line + QLatin1Char('\n');
    line = indent;
  } else {
    line = line.leftJustified(kColumn);
  }
  bool line_empty = true;
  for (const QString& word : help.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
    if (!line_empty && line.size() + 1 + word.size() > kWidth) {
      text += line + QLatin1Char('\n');
      line = indent;
      line_empty = true;
    }
    line += (line_empty ? QString() : QStringLiteral(" ")) + word;
    line_empty = false;
  }
  return (text + line + QLatin1Char('\n')).toStdString();
}

// --help's text; the views, their options and what --export writes come from the registry.
std::string usage() {
  QStringList ids, view_usage;
  std::string view_options;
  for (const hs::ui::ViewDescriptor& v : hs::ui::viewRegistry()) {
    ids << v.id;
    QStringList group;
    for (const hs::ui::ViewOption& o : v.options) {
      group << QStringLiteral("--%1 %2").arg(o.name, o.value_name);
      view_options += optionLines(group.back(), o.help);
    }
    if (!group.isEmpty()) view_usage << QStringLiteral("[%1]").arg(group.join(QLatin1Char(' ')));
  }
  view_usage << QStringLiteral("[--export OUTDIR [--scale 1|2]]");
  std::string text =
      "Usage: headscope [--model DIR] [--text TEXT] [--view NAME] [--head L.H] [--ablate HEADS] [--keep first|last]\n"
      "                 [--scan-results FILE] [--sae DIR]... [--sae-edit EDITS] [--dashboards DIR]...\n"
      "                 " +
      view_usage.join(QLatin1Char(' ')).toStdString() +
      "\n"
      "\n"
      "HeadScope: type a sentence, see how each attention head of a transformer builds the answer.\n"
      "\n"
      "Options:\n" +
      optionLines(QStringLiteral("--model DIR"),
                  QStringLiteral("a Hugging Face model folder (config.json, model.safetensors or its shards, "
                                 "tokenizer.json or vocab.json + merges.txt) of %1; default: the built-in model")
                      .arg(QString::fromStdString(hs::supported_families_text()))) +
      "  --text TEXT      the prompt to start with\n"
      "  --view NAME      the view shown first: " +
      ids.join(QStringLiteral(", ")).toStdString() + ", " + hs::ui::MainWindow::kAblationViewId +
      "\n"
      "  --head L.H       the head selected first, e.g. 3.2 (layers and heads count from 0)\n"
      "  --ablate HEADS   run with these heads ablated, as headscope-cli run --ablate: LAYER.HEAD\n"
      "                   items separated by commas, each :zero (default) or :mean, e.g. 3.2,1.0:mean\n"
      "  --keep first|last  a text longer than the model's context runs its first n_ctx tokens, or\n"
      "                   BOS and its last ones (default: the window's last choice; first for --export)\n"
      "  --scan-results FILE  open this output of headscope-cli scan (or File > Scan Data Set) in the\n"
      "                   window, as File > Open Scan Results does (not with --export)\n"
      "  --sae DIR        load a sparse autoencoder or transcoder folder (SAELens cfg.json +\n"
      "                   sae_weights.safetensors, or a circuit-tracer config.yaml) for the features\n"
      "                   view, as File > Open Sparse Autoencoder does; repeat it for several\n"
      "  --sae-edit EDITS  edit latents of those SAEs in every run, as the Features view's Apply does\n"
      "                   (each edited SAE spliced in with its error term): headscope-cli run's\n"
      "                   [N/]LATENT:zero|xS|+S[@POS],... (N: the N-th SAE loaded, from 0), e.g.\n"
      "                   12:zero,40:x2.5,7:+3@4\n"
      "  --dashboards DIR  open the unit dashboards headscope-cli scan --units wrote (its OUT.units\n"
      "                   folder), as File > Open Unit Dashboards does; the Neurons and Features\n"
      "                   views show the chosen unit's; repeat it for several (not with --export)\n" +
      view_options +
      "  --export OUTDIR  write a PNG of every figure of every view into OUTDIR and exit, without\n"
      "                   opening a window; needs --text\n"
      "  --scale S        resolution factor of exported PNGs (1 or 2; default 1)\n"
      "  -h, --help       show this help and exit\n"
      "  --version        show the version and exit\n"
      "\n"
      "Views:\n";
  for (const hs::ui::ViewDescriptor& v : hs::ui::viewRegistry())
    text += "  " + v.id.leftJustified(15).toStdString() + "  " + v.help.toStdString() + "\n";
  text += "  " + QString::fromLatin1(hs::ui::MainWindow::kAblationViewId).leftJustified(15).toStdString() +
          "  the Ablation panel beside the first view: the ablated heads, and the run before and after\n";
  text += "\nWithout --export a window opens; it needs a display (set DISPLAY, or run under Xvfb).\n";
  return text;
}

bool hasArg(int argc, char** argv, const char* a, const char* b = nullptr) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], a) == 0 || (b && std::strcmp(argv[i], b) == 0)) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // --help and --version must work without a display, so they are answered before Qt starts.
  if (hasArg(argc, argv, "--help", "-h")) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (hasArg(argc, argv, "--version")) {
    std::printf("headscope %s\n", HEADSCOPE_VERSION);
    return 0;
  }
  const bool headless = hasArg(argc, argv, "--export");
  if (headless && !std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  if (!headless && !std::getenv("QT_QPA_PLATFORM") && !std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY")) {
    std::fputs("headscope: no display (DISPLAY is not set). Run it on a desktop or under Xvfb, or use "
               "--export OUTDIR to write the views as PNG files.\n",
               stderr);
    return 1;
  }

  if (headless) {
    // The contract is one line on failure: Qt's own chatter (missing XDG_RUNTIME_DIR, fonts)
    // would bury it, so only critical messages get through.
    qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& message) {
      if (type == QtCriticalMsg || type == QtFatalMsg) std::fprintf(stderr, "headscope: %s\n", qPrintable(message));
    });
  }
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("HeadScope"));
  QApplication::setApplicationName(QStringLiteral("headscope"));
  QApplication::setApplicationVersion(QStringLiteral(HEADSCOPE_VERSION));
  QApplication::setDesktopFileName(QStringLiteral("headscope"));
  hs::ui::applyAppStyle(app);

  QCommandLineParser parser;
  const QCommandLineOption model(QStringLiteral("model"), "model folder", "DIR");
  const QCommandLineOption text(QStringLiteral("text"), "prompt", "TEXT");
  const QCommandLineOption out(QStringLiteral("export"), "output folder", "OUTDIR");
  const QCommandLineOption scale(QStringLiteral("scale"), "PNG scale", "S", "1");
  const QCommandLineOption view(QStringLiteral("view"), "first view", "NAME", hs::ui::viewRegistry().front().id);
  const QCommandLineOption head(QStringLiteral("head"), "selected head", "L.H");
  const QCommandLineOption ablate(QStringLiteral("ablate"), "ablated heads", "HEADS");
  const QCommandLineOption keep(QStringLiteral("keep"), "what an over-long text keeps", "first|last");
  const QCommandLineOption scan_results(QStringLiteral("scan-results"), "a scan output to open", "FILE");
  const QCommandLineOption sae(QStringLiteral("sae"), "a sparse autoencoder folder (repeatable)", "DIR");
  const QCommandLineOption sae_edit(QStringLiteral("sae-edit"), "latent edits of the loaded SAEs", "EDITS");
  const QCommandLineOption dashboards(QStringLiteral("dashboards"), "a unit dashboard folder (repeatable)", "DIR");
  parser.addOptions({model, text, out, scale, view, head, ablate, keep, scan_results, sae, sae_edit, dashboards});
  // Each view's own options (ui/views/registry.cpp), whose values go to that view.
  for (const hs::ui::ViewDescriptor& v : hs::ui::viewRegistry())
    for (const hs::ui::ViewOption& o : v.options)
      if (!parser.addOption(QCommandLineOption(o.name, o.help, o.value_name))) {
        std::fprintf(stderr, "headscope: the %s view's option --%s is taken by another option\n", qPrintable(v.id),
                     qPrintable(o.name));
        return 70;
      }
  if (!parser.parse(QApplication::arguments())) {
    std::fprintf(stderr, "headscope: %s (see headscope --help)\n", qPrintable(parser.errorText()));
    return 2;
  }
  if (!parser.positionalArguments().isEmpty()) {
    std::fprintf(stderr, "headscope: unexpected argument '%s' (see headscope --help)\n",
                 qPrintable(parser.positionalArguments().front()));
    return 2;
  }
  bool scale_ok = false;
  const double scale_value = parser.value(scale).toDouble(&scale_ok);
  if (!scale_ok || scale_value < 0.5 || scale_value > 4.0) {
    std::fprintf(stderr, "headscope: --scale must be a number between 0.5 and 4 (got '%s')\n",
                 qPrintable(parser.value(scale)));
    return 2;
  }

  int layer = 0, head_index = 0;
  if (parser.isSet(head)) {
    const QStringList parts = parser.value(head).split(QLatin1Char('.'));
    bool ok_layer = false, ok_head = false;
    if (parts.size() == 2) {
      layer = parts[0].toInt(&ok_layer);
      head_index = parts[1].toInt(&ok_head);
    }
    if (!ok_layer || !ok_head || layer < 0 || head_index < 0) {
      std::fprintf(stderr, "headscope: --head must be LAYER.HEAD, e.g. 3.2 (got '%s')\n", qPrintable(parser.value(head)));
      return 2;
    }
  }
  hs::Interventions ablations;
  if (parser.isSet(ablate)) {
    try {
      ablations = hs::parse_head_ablations(parser.value(ablate).toStdString());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "headscope: --ablate: %s\n", e.what());
      return 2;
    }
  }
  std::optional<bool> keep_last;
  if (parser.isSet(keep)) {
    const QString k = parser.value(keep).toLower();
    if (k != QStringLiteral("first") && k != QStringLiteral("last")) {
      std::fprintf(stderr, "headscope: --keep must be first or last (got '%s')\n", qPrintable(parser.value(keep)));
      return 2;
    }
    keep_last = k == QStringLiteral("last");
  }
  hs::ui::ViewInputsById view_inputs;
  for (const hs::ui::ViewDescriptor& v : hs::ui::viewRegistry())
    for (const hs::ui::ViewOption& o : v.options) {
      if (!parser.isSet(o.name)) continue;
      QString error;
      const std::optional<QVariant> value = hs::ui::parseViewOption(o, parser.value(o.name), &error);
      if (!value) {
        std::fprintf(stderr, "headscope: %s\n", qPrintable(error));
        return 2;
      }
      view_inputs[v.id][o.name] = *value;
    }

  if (parser.isSet(sae_edit) && !parser.isSet(sae)) {
    std::fprintf(stderr, "headscope: --sae-edit edits the latents of an SAE loaded with --sae DIR\n");
    return 2;
  }
  if (parser.isSet(sae_edit)) {  // the syntax now; the latents against their SAEs once loaded
    try {
      for (const QString& item : parser.value(sae_edit).split(QLatin1Char(',')))
        hs::parse_latent_edits(item.mid(item.indexOf(QLatin1Char('/')) + 1).toStdString());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "headscope: --sae-edit: %s\n", e.what());
      return 2;
    }
  }
  if (headless && parser.isSet(scan_results)) {
    std::fprintf(stderr, "headscope: --scan-results opens a scan in the window; --export does not take one\n");
    return 2;
  }
  if (headless && parser.isSet(dashboards)) {
    std::fprintf(stderr, "headscope: --dashboards opens unit dashboards in the window; --export does not take them\n");
    return 2;
  }
  if (headless) {
    hs::ui::HeadlessExportOptions options;
    options.layer = layer;
    options.head = head_index;
    options.ablations = ablations;
    options.view_inputs = view_inputs;
    options.sae_dirs = parser.values(sae);
    options.sae_edits = parser.value(sae_edit);
    options.keep_last = keep_last.value_or(false);
    options.model_dir = parser.value(model);
    options.text = parser.value(text);
    options.out_dir = parser.value(out);
    options.scale = scale_value;
    return hs::ui::runHeadlessExport(options);
  }

  const QString view_id = parser.value(view).toLower();
  if (!hs::ui::findView(view_id) && view_id != QLatin1String(hs::ui::MainWindow::kAblationViewId)) {
    QStringList ids;
    for (const hs::ui::ViewDescriptor& v : hs::ui::viewRegistry()) ids << v.id;
    ids << QString::fromLatin1(hs::ui::MainWindow::kAblationViewId);
    std::fprintf(stderr, "headscope: --view must be one of %s (got '%s')\n", qPrintable(ids.join(QStringLiteral(", "))),
                 qPrintable(parser.value(view)));
    return 2;
  }
  hs::ui::MainWindowOptions options;
  options.model_dir = parser.value(model);
  options.text = parser.value(text);
  options.view = view_id;
  options.layer = layer;
  options.head = head_index;
  options.ablations = ablations;
  options.view_inputs = view_inputs;
  options.keep_last = keep_last;
  options.scan_results = parser.value(scan_results);
  options.sae_dirs = parser.values(sae);
  options.sae_edits = parser.value(sae_edit);
  options.dashboard_dirs = parser.values(dashboards);
  // The window runs the model on its own thread; the GUI thread must never start an OpenMP team
  // (an Eigen product in a view would), which would slow every run (hs::release_thread_team).
  omp_set_num_threads(1);
  hs::ui::MainWindow window(options);
  window.show();

  // HEADSCOPE_STALL_MONITOR=1: report the longest GUI-thread stall at exit.
  std::unique_ptr<hs::ui::StallMonitor> monitor;
  if (qEnvironmentVariableIntValue("HEADSCOPE_STALL_MONITOR") == 1) {
    monitor = std::make_unique<hs::ui::StallMonitor>();
    monitor->start();
  }
  const int code = app.exec();
  if (monitor)
    std::fprintf(stderr, "headscope: longest GUI-thread stall %.1f ms; %d stalls over 50 ms in %d ticks\n",
                 monitor->maxStallMs(), monitor->stallsOver50ms(), monitor->ticks());
  return code;
}
