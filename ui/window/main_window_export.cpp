// File > Export Current View and Export All Views (ExportAllJob, with progress in the status bar).
#include "ui/window/main_window.h"

#include <QDir>
#include <QFileDialog>
#include <QLabel>
#include <QMessageBox>
#include <QProgressBar>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>

#include "ui/base/figure.h"
#include "ui/controller/selection.h"
#include "ui/views/registry.h"
#include "ui/window/export_all.h"

namespace hs::ui {

void MainWindow::exportCurrentView() {
  auto* source = qobject_cast<AnalysisView*>(tabs_->currentWidget());
  if (!run_ || !source) {
    statusBar()->showMessage(QStringLiteral("Nothing to export yet: type a prompt first."), 4000);
    return;
  }
  saveFigureInteractively(this, *source, FigureFormat::Png, 2.0);
}

void MainWindow::exportAll() {
  if (!run_) {
    statusBar()->showMessage(QStringLiteral("Nothing to export yet: type a prompt first."), 4000);
    return;
  }
  if (export_job_) {
    statusBar()->showMessage(QStringLiteral("An export is already running."), 4000);
    return;
  }
  QSettings settings;
  const QString start = settings.value(QStringLiteral("export/lastFolder"), QDir::homePath()).toString();
  const QString dir = QFileDialog::getExistingDirectory(this, QStringLiteral("Export All Views To"), start);
  if (dir.isEmpty()) return;
  settings.setValue(QStringLiteral("export/lastFolder"), dir);
  export_job_ = std::make_unique<ExportAllJob>(run_, exportAllOptions(dir));
  progress_->setValue(0);
  progress_->setFormat(QStringLiteral("%p%"));
  progress_->show();
  connect(export_job_.get(), &ExportAllJob::progress, this, [this](int done, int total, const QString& name) {
    progress_->setValue(total > 0 ? done * 1000 / total : 0);
    status_busy_->setText(QStringLiteral("Exporting %1 (%2 of %3)").arg(name).arg(done).arg(total));
  });
  connect(export_job_.get(), &ExportAllJob::finished, this, [this](bool ok, const QString& message) {
    progress_->hide();
    status_busy_->clear();
    if (ok) statusBar()->showMessage(message, 8000);
    else QMessageBox::warning(this, QStringLiteral("Export failed"), message);
    export_job_.release()->deleteLater();
  });
  export_job_->start();
}

}  // namespace hs::ui

namespace hs::ui {

ExportAllJob::Options MainWindow::exportAllOptions(const QString& dir) const {
  ExportAllJob::Options options;
  options.out_dir = dir;
  options.scale = 2.0;
  options.position = selection_->position();
  // The selected head: a view of one head or layer exports the one on screen, not L0H0.
  options.layer = selection_->layer();
  options.head = selection_->head();
  options.target = selection_->target();
  options.versus = selection_->versus();
  options.scan = scan_;
  for (size_t i = 0; i < views_.size(); ++i)
    if (const ViewInputs inputs = views_[i]->viewInputs(); !inputs.isEmpty())
      options.view_inputs[viewRegistry()[i].id] = inputs;
  return options;
}

}  // namespace hs::ui
