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

void LoadedDashboards::addOlder(std::vector<std::shared_ptr<const hs::UnitDashboardIndex>> indexes) {
  {
    std::lock_guard lock(mutex_);
    std::erase_if(indexes, [&](const auto& x) {
      return std::any_of(indexes_.begin(), indexes_.end(), [&](const auto& y) { return y->folder == x->folder; });
    });
    if (indexes.empty()) return;
    indexes_.insert(indexes_.begin(), indexes.begin(), indexes.end());
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

void LoadedDashboards::setBuild(const QString& units, qint64 done, qint64 total) {
  building_ = units;
  build_done_ = done;
  build_total_ = total;
  Q_EMIT buildChanged();
}

}  // namespace hs::ui
