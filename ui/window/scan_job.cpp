#include "ui/window/scan_job.h"

#include <QtConcurrent/QtConcurrentRun>

#include <chrono>

#include "core/analysis/unit_dataset.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/model/thread_scope.h"
#include "ui/base/deliver.h"

namespace hs::ui {

ScanJob::ScanJob(std::shared_ptr<const hs::Model> model, hs::ScanOptions options, QObject* parent)
    : QObject(parent), model_(std::move(model)), options_(std::move(options)) {}

ScanJob::~ScanJob() {
  cancel_ = true;
  if (future_.isStarted()) future_.waitForFinished();
}

void ScanJob::cancel() { cancel_ = true; }

void ScanJob::start() {
  future_ = QtConcurrent::run([this, model = model_, options = options_, folder = dashboards_folder_]() -> Outcome {
    Outcome out;
    try {
      auto state = std::make_shared<hs::ScanState>(
          hs::new_scan_state(*model, options, hs::scan_settings(*model, options)));
      hs::ScanControl control;
      control.stop = [this] { return cancel_.load(); };
      // At most a few progress events a second reach the GUI thread, however fast the prompts.
      auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
      // Posted to the job, which outlives this worker (its destructor waits).
      control.progress = [&last, this](const hs::ScanProgress& p) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last < std::chrono::milliseconds(100) && p.done != p.total) return;
        last = now;
        QMetaObject::invokeMethod(this, [this, p] { Q_EMIT progress(p.done, p.total); }, Qt::QueuedConnection);
      };
      hs::run_scan(*model, options, *state, control);
      out.ok = true;
      if (state->complete && !options.units.empty() && !folder.isEmpty()) {
        QMetaObject::invokeMethod(this, [this] { Q_EMIT writingDashboards(); }, Qt::QueuedConnection);
        try {
          hs::write_unit_dashboards(*model, hs::resolve_unit_source(*model, options.units), state->units,
                                    state->settings, folder.toStdString());
          out.dashboards = folder;
        } catch (const std::exception& e) {
          out.dashboards_error = QString::fromUtf8(e.what());  // the scan's results are still shown
        }
      }
      out.state = std::move(state);
    } catch (const std::exception& e) {
      out.message = QString::fromStdString(e.what());
    }
    hs::release_thread_team();  // the scan used both cores; the window's runs keep the only team
    return out;
  });
  deliverLater(future_, this, [this](const Outcome& o) {
    dashboards_written_ = o.dashboards;
    dashboards_error_ = o.dashboards_error;
    const bool cancelled = o.ok && o.state && !o.state->complete;
    Q_EMIT finished(o.ok, cancelled, o.message, o.state);
  });
}

std::vector<HeadMetricValues> ScanJob::headMetricValues(const hs::ScanState& state) {
  std::vector<HeadMetricValues> out;
  for (const char* key : {"previous_token", "duplicate_token", "induction"}) {
    const hs::MomentGrid& g = state.grids.at(key);
    HeadMetricValues v;
    v.id = QString::fromLatin1(key) + QStringLiteral("_dataset");
    const nlohmann::json& model = state.settings.at("model");
    v.model = model.at("fingerprint").get<std::string>();
    v.model_name = QString::fromStdString(model.at("name").get<std::string>());
    v.values = hs::RowMatrixXf(g.rows(), g.cols());
    int64_t most = 0;
    for (int l = 0; l < g.rows(); ++l)
      for (int h = 0; h < g.cols(); ++h) {
        v.values(l, h) = static_cast<float>(g.mean(l, h));
        most = std::max(most, g.count(l, h));
      }
    v.note = most > 0 ? QStringLiteral("mean over %1 prompt%2 of the data set").arg(most).arg(most == 1 ? "" : "s")
                      : QStringLiteral("no score: no prompt of the data set had a query position for it");
    // An interrupted scan's file (resumable with headscope-cli scan --resume) can be opened too.
    if (!state.complete)
      v.note += QStringLiteral(" (a partial scan: %1 of %2 lines)").arg(state.next_index).arg(state.total_indices);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace hs::ui
