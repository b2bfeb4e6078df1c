// File > Scan Data Set: the dialog, the scan on a worker with progress and Cancel in the status
// bar, and its per-head means handed to the heads panel.
#include "ui/window/main_window.h"

#include <QDialog>
#include <QLabel>
#include <QMessageBox>
#include <QProgressBar>
#include <QStatusBar>
#include <QToolButton>

#include <utility>

#include "core/model/model.h"
#include "ui/controller/analysis_controller.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/window/scan_dialog.h"
#include "ui/window/scan_job.h"

namespace hs::ui {

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
  if (dialog.exec() != QDialog::Accepted) return;
  startScan(dialog.options());
}

void MainWindow::startScan(const hs::ScanOptions& options) {
  scan_job_ = std::make_unique<ScanJob>(controller_->model(), options);
  progress_->setValue(0);
  progress_->setFormat(QStringLiteral("%p%"));
  progress_->show();
  scan_cancel_->show();
  scan_cancel_->setEnabled(true);
  status_busy_->setText(QStringLiteral("Scanning the data set…"));
  connect(scan_cancel_, &QToolButton::clicked, scan_job_.get(), [this] {
    scan_cancel_->setEnabled(false);
    status_busy_->setText(QStringLiteral("Stopping the scan after this prompt…"));
    scan_job_->cancel();
  });
  connect(scan_job_.get(), &ScanJob::progress, this, [this](qint64 done, qint64 total) {
    progress_->setValue(total > 0 ? static_cast<int>(done * 1000 / total) : 0);
    if (scan_cancel_->isEnabled())
      status_busy_->setText(QStringLiteral("Scanning the data set: %1 of %2 lines").arg(done).arg(total));
  });
  connect(scan_job_.get(), &ScanJob::finished, this,
          [this](bool ok, bool cancelled, const QString& message, std::shared_ptr<const hs::ScanState> state) {
            progress_->hide();
            scan_cancel_->hide();
            status_busy_->clear();
            scan_job_.release()->deleteLater();
            if (!ok) {
              QMessageBox::warning(this, QStringLiteral("Scan failed"), message);
              return;
            }
            if (cancelled) {
              statusBar()->showMessage(QStringLiteral("Scan cancelled; the head grid keeps what it showed."), 8000);
              return;
            }
            for (HeadMetricValues& v : ScanJob::headMetricValues(*state)) head_metrics_->setExternalValues(std::move(v));
            head_metrics_->setMetricId(QStringLiteral("induction_dataset"));
            int64_t bad = 0;
            for (const auto& [reason, b] : state->bad) bad += b.count;
            statusBar()->showMessage(QStringLiteral("Scanned %1 prompts (%2 bad lines skipped): the head grid shows "
                                                    "the data set's mean induction score; Scores: chooses another.")
                                         .arg(state->prompts)
                                         .arg(bad),
                                     15000);
          });
  scan_job_->start();
}

}  // namespace hs::ui
