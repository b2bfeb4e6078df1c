// File > Scan Data Set: the dialog, the scan on a worker with progress and Cancel in the status
// bar, and its per-head means handed to the heads panel; File > Open Scan Results: the same from
// a file of headscope-cli scan. A scan that describes heads also goes to every view (Heads over
// Data shows it).
#include "ui/window/main_window.h"

#include <QDateTime>
#include <QDialog>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QSettings>
#include <QStandardPaths>
#include <QtConcurrent/QtConcurrentRun>
#include <QLabel>
#include <QMessageBox>
#include <QProgressBar>
#include <QStatusBar>
#include <QToolButton>

#include <utility>

#include "core/error.h"
#include "core/io/scan_io.h"
#include "core/model/model.h"
#include "ui/base/deliver.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/loaded_dashboards.h"
#include "ui/controller/loaded_saes.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/window/scan_dialog.h"
#include "ui/window/scan_job.h"

namespace hs::ui {

namespace {

// What a scan read, for titles: its input file's name, or the repeated random tokens.
QString scanSource(const hs::ScanState& state) {
  const nlohmann::json input = state.settings.value("input", nlohmann::json::object());
  if (input.contains("repeat_random"))
    return QStringLiteral("repeated random tokens (|R| = %1)").arg(input.value("repeat_random", 0));
  const nlohmann::json paths = state.settings.value("paths", nlohmann::json::object());
  if (paths.contains("input") && paths["input"].is_string())
    return QFileInfo(QString::fromStdString(paths["input"].get<std::string>())).fileName();
  return QStringLiteral("the data set");
}

}  // namespace

void MainWindow::scanDataSet() {
  if (!controller_->model()) {
    statusBar()->showMessage(QStringLiteral("No model yet: wait for it to load, or open one."), 4000);
    return;
  }
  if (scan_job_) {
    statusBar()->showMessage(QStringLiteral("A scan is already running (Cancel Scan in the status bar stops it)."), 4000);
    return;
  }
  ScanDialog dialog(controller_->model()->config().n_ctx, this);
  QStringList sae_folders;
  for (const LoadedSae& s : LoadedSaes::instance().list())
    if (!sae_folders.contains(s.folder)) sae_folders << s.folder;
  dialog.setUnitSources(controller_->model()->config().n_layers, sae_folders);
  if (dialog.exec() != QDialog::Accepted) return;
  startScan(dialog.options());
}

QString MainWindow::dashboardsFolderFor(const hs::ScanOptions& options) {
  // The app's own data folder (not beside the input, which may not be writable), one folder per
  // scan: the input's name, the units, the time.
  const QString base = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation);
  QString units = QString::fromStdString(options.units);
  if (units.startsWith(QStringLiteral("sae:"))) units = QStringLiteral("sae-") + QFileInfo(units.mid(4)).fileName();
  units.replace(QLatin1Char(':'), QLatin1Char('-'));
  const QString input = options.repeat_random > 0 ? QStringLiteral("random")
                                                   : QFileInfo(QString::fromStdString(options.input.string())).completeBaseName();
  return QDir(base).filePath(QStringLiteral("dashboards/%1_%2_%3.units")
                                 .arg(input, units, QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-hhmmss"))));
}

void MainWindow::buildUnitDashboards(const QString& units) {
  const std::shared_ptr<const hs::Model>& model = controller_->model();
  if (!model) return;
  if (scan_job_) {
    statusBar()->showMessage(QStringLiteral("A scan is running: the dashboards can be built when it ends (Cancel Scan "
                                            "in the status bar stops it)."),
                             8000);
    return;
  }
  hs::ScanOptions options;
  options.input = model->dir() / LoadedDashboards::kHeldOutPassages;
  options.units = units.toStdString();
  // A passage longer than the context is cut to it rather than skipped.
  options.max_tokens = model->config().n_ctx;
  startScan(options, true);
}

void MainWindow::loadOwnDashboards() {
  // Every dashboard folder the app wrote (File > Scan Data Set, Build dashboards), oldest first,
  // so that the newest of the same units is the one shown; read on a worker.
  const QDir base(QDir(QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation))
                      .filePath(QStringLiteral("dashboards")));
  if (!base.exists()) return;
  QStringList dirs;
  for (const QFileInfo& f : base.entryInfoList({QStringLiteral("*.units")}, QDir::Dirs | QDir::NoDotAndDotDot,
                                               QDir::Time | QDir::Reversed))
    dirs << f.absoluteFilePath();
  if (dirs.isEmpty()) return;
  using Indexes = std::vector<std::shared_ptr<const hs::UnitDashboardIndex>>;
  QFuture<Indexes> read = QtConcurrent::run([dirs] {
    Indexes out;
    for (const QString& dir : dirs) {
      try {
        out.push_back(std::make_shared<const hs::UnitDashboardIndex>(hs::read_unit_dashboard_index(dir.toStdString())));
      } catch (const std::exception& e) {
        // One the app wrote and something damaged since: left out, said on stderr.
        qWarning("HeadScope: the unit dashboards %s are not opened: %s", qUtf8Printable(dir), e.what());
      }
    }
    return out;
  });
  deliverLater(read, this, [](Indexes indexes) { LoadedDashboards::instance().addOlder(std::move(indexes)); });
}

void MainWindow::startScan(const hs::ScanOptions& options, bool dashboards_only) {
  scan_job_ = std::make_unique<ScanJob>(controller_->model(), options);
  const QString units = QString::fromStdString(options.units);
  if (!options.units.empty()) {
    const QString folder = dashboardsFolderFor(options);
    QDir().mkpath(QFileInfo(folder).absolutePath());
    scan_job_->setDashboardsFolder(folder);
  }
  connect(scan_job_.get(), &ScanJob::writingDashboards, this, [this] {
    scan_cancel_->setEnabled(false);
    status_busy_->setText(QStringLiteral("Writing the unit dashboards…"));
  });
  progress_->setValue(0);
  progress_->setFormat(QStringLiteral("%p%"));
  progress_->show();
  scan_cancel_->show();
  scan_cancel_->setEnabled(true);
  const QString what = dashboards_only ? QStringLiteral("Building the unit dashboards") : QStringLiteral("Scanning the data set");
  status_busy_->setText(what + QStringLiteral("…"));
  if (dashboards_only) LoadedDashboards::instance().setBuild(units, 0, 0);
  connect(scan_cancel_, &QToolButton::clicked, scan_job_.get(), [this] {
    scan_cancel_->setEnabled(false);
    status_busy_->setText(QStringLiteral("Stopping the scan after this prompt…"));
    scan_job_->cancel();
  });
  connect(scan_job_.get(), &ScanJob::progress, this, [this, what, units, dashboards_only](qint64 done, qint64 total) {
    progress_->setValue(total > 0 ? static_cast<int>(done * 1000 / total) : 0);
    if (scan_cancel_->isEnabled())
      status_busy_->setText(QStringLiteral("%1: %2 of %3 lines").arg(what).arg(done).arg(total));
    if (dashboards_only) LoadedDashboards::instance().setBuild(units, done, total);
  });
  connect(scan_job_.get(), &ScanJob::finished, this,
          [this, dashboards_only](bool ok, bool cancelled, const QString& message, std::shared_ptr<const hs::ScanState> state) {
            progress_->hide();
            scan_cancel_->hide();
            status_busy_->clear();
            const QString dashboards = scan_job_->dashboardsWritten(), dashboards_error = scan_job_->dashboardsError();
            scan_job_.release()->deleteLater();
            // A build's units stay "being built" until their folder is open, so the views never
            // offer to build what is about to be there.
            auto endBuild = [dashboards_only] {
              if (dashboards_only) LoadedDashboards::instance().setBuild(QString(), 0, 0);
            };
            if (!dashboards_error.isEmpty())
              QMessageBox::warning(this, QStringLiteral("Unit dashboards not written"),
                                   QStringLiteral("The scan finished, but its unit dashboards could not be written: %1")
                                       .arg(dashboards_error));
            if (!dashboards.isEmpty())
              loadDashboardFolder(dashboards, endBuild);
            else
              endBuild();
            if (!ok) {
              QMessageBox::warning(this, dashboards_only ? QStringLiteral("Dashboards not built") : QStringLiteral("Scan failed"),
                                   message);
              return;
            }
            if (cancelled) {
              statusBar()->showMessage(dashboards_only ? QStringLiteral("Dashboard build cancelled; nothing was written.")
                                                       : QStringLiteral("Scan cancelled; the head grid keeps what it showed."),
                                       8000);
              return;
            }
            if (dashboards_only) return;  // loadDashboardFolder says what was opened
            showScanResults(state, scanSource(*state));
            int64_t bad = 0;
            for (const auto& [reason, b] : state->bad) bad += b.count;
            statusBar()->showMessage(QStringLiteral("Scanned %1 prompts (%2 bad lines skipped): the head grid shows "
                                                    "the data set's mean induction score; Scores: chooses another.%3")
                                         .arg(state->prompts)
                                         .arg(bad)
                                         .arg(state->heads.empty() ? QString()
                                                                   : QStringLiteral(" Heads over Data describes each head.")),
                                     15000);
          });
  scan_job_->start();
}

}  // namespace hs::ui

namespace hs::ui {

void MainWindow::openScanResults() {
  QSettings settings;
  const QString start = settings.value(QStringLiteral("scan/lastResults"), QDir::homePath()).toString();
  const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open Scan Results"), start,
                                                    QStringLiteral("Scan results (*.json *.npz);;All files (*)"));
  if (path.isEmpty()) return;
  settings.setValue(QStringLiteral("scan/lastResults"), path);
  openScanResultsFile(path);
}

void MainWindow::openScanResultsFile(const QString& path) {
  if (opening_scan_) {
    statusBar()->showMessage(QStringLiteral("Scan results are already being opened."), 4000);
    return;
  }
  opening_scan_ = true;
  status_busy_->setText(QStringLiteral("Reading %1…").arg(QFileInfo(path).fileName()));
  struct Read {
    std::shared_ptr<const hs::ScanState> state;
    QString message;
  };
  // A scan with heads keeps every sampled pattern row: megabytes of JSON, read on a worker.
  auto reading = QtConcurrent::run([path]() -> Read {
    Read r;
    try {
      const std::filesystem::path json = hs::scan_json_path(path.toStdString());
      auto state = std::make_shared<hs::ScanState>(hs::read_scan_output(json));
      const nlohmann::json model = state->settings.value("model", nlohmann::json::object());
      if (!model.contains("fingerprint") || !model["fingerprint"].is_string())
        throw hs::Error(json.string() + " does not say which model made it (settings.model.fingerprint): it was "
                        "written by an older headscope-cli. Scan the data set again.");
      r.state = std::move(state);
    } catch (const std::exception& e) {
      r.message = QString::fromStdString(e.what());
    }
    return r;
  });
  deliverLater(reading, this, [this, path](const Read& r) {
    opening_scan_ = false;
    status_busy_->clear();
    if (!r.state) {
      const QString message = QStringLiteral("Could not open the scan results %1:\n\n%2")
                                  .arg(QDir::toNativeSeparators(path), r.message);
      Q_EMIT scanResultsFailed(message);
      QMessageBox::warning(this, QStringLiteral("Open Scan Results"), message);
      return;
    }
    showScanResults(r.state, QFileInfo(path).fileName());
    const QString scanned_with = QString::fromStdString(r.state->settings["model"].value("name", std::string()));
    QString note;
    const auto model = controller_->model();
    if (model && r.state->settings["model"]["fingerprint"].get<std::string>() != model->fingerprint())
      note = QStringLiteral(" They were made with the model %1, not the loaded %2: they are shown only while %1 is "
                            "loaded.")
                 .arg(scanned_with, QString::fromStdString(model->name()));
    else if (!r.state->complete)
      note = QStringLiteral(" The scan is partial (%1 of %2 lines).").arg(r.state->next_index).arg(r.state->total_indices);
    statusBar()->showMessage(QStringLiteral("Opened the scan results %1 (%2 prompts).%3")
                                 .arg(QFileInfo(path).fileName())
                                 .arg(r.state->prompts)
                                 .arg(note),
                             15000);
  });
}

void MainWindow::showScanResults(std::shared_ptr<const hs::ScanState> state, const QString& source) {
  for (HeadMetricValues& v : ScanJob::headMetricValues(*state)) head_metrics_->setExternalValues(std::move(v));
  head_metrics_->setMetricId(QStringLiteral("induction_dataset"));
  // The views keep the last scan that describes heads: one without leaves them as they were.
  if (!state->heads.empty()) {
    auto scan = std::make_shared<DataSetScan>();
    scan->state = std::move(state);
    scan->source = source;
    scan_ = std::move(scan);
    for (AnalysisView* v : views_) v->setScan(scan_);
  }
  Q_EMIT scanResultsShown();
}

}  // namespace hs::ui
