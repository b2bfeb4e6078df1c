// The unit dashboard folders the window has opened (File > Open Unit Dashboards…, `headscope
// --dashboards DIR`, or a scan with units finishing): their checked indexes. The Neurons and
// Features views look up the shown unit here (hs::dashboard_unit) and read its file on a worker;
// a folder of another model, layer or SAE never matches, so a dashboard is only ever shown for the
// units it was made of.
#pragma once

#include <QObject>

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
  void clear();

 Q_SIGNALS:
  void changed();

 private:
  LoadedDashboards() = default;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const hs::UnitDashboardIndex>> indexes_;
};

}  // namespace hs::ui
