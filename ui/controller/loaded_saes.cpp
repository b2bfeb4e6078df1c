#include "ui/controller/loaded_saes.h"

#include <QDir>
#include <QFileInfo>

#include <algorithm>

#include "core/features/sae.h"

namespace hs::ui {

QStringList shippedSaeFolders(const QString& model_dir) {
  QStringList out;
  const QDir saes(QDir(model_dir).filePath(QStringLiteral("saes")));
  if (model_dir.isEmpty() || !saes.exists()) return out;
  for (const QString& name : saes.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
    const QDir d(saes.filePath(name));
    if (d.exists(QStringLiteral("cfg.json")) || d.exists(QStringLiteral("config.yaml")) ||
        d.exists(QStringLiteral("params.npz")))
      out << d.absolutePath();
  }
  return out;
}

LoadedSaes& LoadedSaes::instance() {
  static LoadedSaes* saes = new LoadedSaes;  // lives as long as the process: workers may read it late
  return *saes;
}

std::vector<LoadedSae> LoadedSaes::list() const {
  std::lock_guard lock(mutex_);
  return saes_;
}

std::shared_ptr<const hs::Sae> LoadedSaes::find(const QString& id) const {
  std::lock_guard lock(mutex_);
  for (const LoadedSae& s : saes_)
    if (s.id == id) return s.sae;
  return nullptr;
}

std::optional<LoadedSae> LoadedSaes::entry(const QString& id) const {
  std::lock_guard lock(mutex_);
  for (const LoadedSae& s : saes_)
    if (s.id == id) return s;
  return std::nullopt;
}

bool LoadedSaes::empty() const {
  std::lock_guard lock(mutex_);
  return saes_.empty();
}

QString LoadedSaes::add(const QString& folder, std::shared_ptr<const hs::Sae> sae) {
  LoadedSae entry;
  {
    std::lock_guard lock(mutex_);
    entry.id = QStringLiteral("sae%1").arg(next_id_++);
  }
  entry.folder = QDir(folder).absolutePath();
  const QString name = QString::fromStdString(sae->name);
  entry.label = (name.isEmpty() ? QFileInfo(folder).fileName() : name) +
                QStringLiteral(" · %1").arg(QString::fromStdString(sae->hook_out == sae->hook_in
                                                                       ? sae->hook_in
                                                                       : sae->hook_in + " → " + sae->hook_out));
  entry.sae = std::move(sae);
  {
    std::lock_guard lock(mutex_);
    saes_.push_back(entry);
  }
  Q_EMIT changed();
  return entry.id;
}

void LoadedSaes::remove(const QString& id) {
  {
    std::lock_guard lock(mutex_);
    const auto before = saes_.size();
    std::erase_if(saes_, [&](const LoadedSae& s) { return s.id == id; });
    if (saes_.size() == before) return;
  }
  Q_EMIT changed();
}

void LoadedSaes::clear() {
  {
    std::lock_guard lock(mutex_);
    if (saes_.empty()) return;
    saes_.clear();
  }
  Q_EMIT changed();
}

}  // namespace hs::ui
