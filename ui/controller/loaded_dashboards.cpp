#include "ui/controller/loaded_dashboards.h"

#include <algorithm>

namespace hs::ui {

LoadedDashboards& LoadedDashboards::instance() {
  static LoadedDashboards* list = new LoadedDashboards;  // lives as long as the process, like LoadedSaes
  return *list;
}

std::vector<std::shared_ptr<const hs::UnitDashboardIndex>> LoadedDashboards::list() const {
  std::lock_guard lock(mutex_);
  return indexes_;
}

void LoadedDashboards::add(std::shared_ptr<const hs::UnitDashboardIndex> index) {
  {
    std::lock_guard lock(mutex_);
    std::erase_if(indexes_, [&](const auto& x) { return x->folder == index->folder; });
    indexes_.push_back(std::move(index));
  }
  Q_EMIT changed();
}

void LoadedDashboards::clear() {
  {
    std::lock_guard lock(mutex_);
    indexes_.clear();
  }
  Q_EMIT changed();
}

}  // namespace hs::ui
