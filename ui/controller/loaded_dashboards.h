// The unit dashboard folders the window has opened (File > Open Unit Dashboards…, `headscope
// --dashboards DIR`, or a scan with units finishing): their checked indexes. The Neurons and
// Features views look up the shown unit here (hs::dashboard_unit) and read its file on a worker;
// a folder of another model, layer or SAE never matches, so a dashboard is only ever shown for the
// units it was made of.
#pragma once

#include <QObject>
#include <QString>

#include <memory>
#include <mutex>
#include <vector>

#include "core/io/unit_dashboards.h"

namespace hs::ui {

class LoadedDashboards : public QObject {
  Q_OBJECT

 public:
  static LoadedDashboards& instance();

  // Any thread.
  std::vector<std::shared_ptr<const hs::UnitDashboardIndex>> list() const;

  // GUI thread: each emits changed(). A folder opened again replaces its earlier index.
  void add(std::shared_ptr<const hs::UnitDashboardIndex> index);
  // Adds these behind every folder already open (found after them), in their order; a folder
  // already open is left where it is.
  void addOlder(std::vector<std::shared_ptr<const hs::UnitDashboardIndex>> indexes);
  void clear();

  // Building a unit source's dashboards from the model folder's held-out passages
  // (kHeldOutPassages, which the built-in model carries): a view asks with the source as
  // `headscope-cli scan --units` names it ("mlp", "sae:DIR"), the window runs the scan and says how
  // far it is with setBuild. GUI thread.
  static constexpr const char* kHeldOutPassages = "heldout.jsonl";
  void requestBuild(const QString& units) { Q_EMIT buildRequested(units); }
  // The window: the source being built (empty: none) and how many of the passages are done.
  void setBuild(const QString& units, qint64 done, qint64 total);
  QString building() const { return building_; }
  qint64 buildDone() const { return build_done_; }
  qint64 buildTotal() const { return build_total_; }

 Q_SIGNALS:
  void changed();
  void buildRequested(const QString& units);
  void buildChanged();  // a build started, progressed or ended

 private:
  LoadedDashboards() = default;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const hs::UnitDashboardIndex>> indexes_;
  QString building_;
  qint64 build_done_ = 0, build_total_ = 0;
};

}  // namespace hs::ui
