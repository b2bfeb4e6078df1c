// File > Scan Data Set: core/analysis/scan.h's run_scan on a worker thread, the way Export All
// keeps long work off the GUI thread. Progress comes back through the event loop; cancel() stops
// the scan after the prompt in flight; finished() hands over the aggregates (per-head means as
// External head metrics: ui/controller/head_metrics.h, "(data set)").
#pragma once

#include <QFuture>
#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <vector>

#include "core/analysis/scan.h"
#include "ui/controller/results.h"

namespace hs { class Model; }

namespace hs::ui {

class ScanJob : public QObject {
  Q_OBJECT

 public:
  ScanJob(std::shared_ptr<const hs::Model> model, hs::ScanOptions options, QObject* parent = nullptr);
  ~ScanJob() override;

  // With ScanOptions::units: where a complete scan writes its unit dashboards (written as
  // FOLDER.tmp and renamed, as headscope-cli scan does), before finished(). Set before start().
  void setDashboardsFolder(const QString& folder) { dashboards_folder_ = folder; }
  // After finished(): the folder written (empty: none), or why it could not be.
  const QString& dashboardsWritten() const { return dashboards_written_; }
  const QString& dashboardsError() const { return dashboards_error_; }

  void start();
  // Stops after the prompt being scanned; finished() follows with cancelled = true.
  void cancel();

  // The External head metrics of a finished scan: the per-head mean of each head detector, with
  // a note saying over how many prompts.
  static std::vector<HeadMetricValues> headMetricValues(const hs::ScanState& state);

 Q_SIGNALS:
  void progress(qint64 done, qint64 total);
  void writingDashboards();  // the prompts are done; the unit dashboards are being written
  // ok: the scan ran to the end (or was cancelled: cancelled = true, state partial); otherwise
  // message says what went wrong (an unreadable file).
  void finished(bool ok, bool cancelled, const QString& message, std::shared_ptr<const hs::ScanState> state);

 private:
  struct Outcome {
    bool ok = false;
    QString message;
    QString dashboards, dashboards_error;
    std::shared_ptr<const hs::ScanState> state;
  };
  std::shared_ptr<const hs::Model> model_;
  hs::ScanOptions options_;
  std::atomic<bool> cancel_{false};
  // The worker; the destructor cancels and waits for it, so it never outlives the job.
  QFuture<Outcome> future_;
  QString dashboards_folder_, dashboards_written_, dashboards_error_;
};

}  // namespace hs::ui
