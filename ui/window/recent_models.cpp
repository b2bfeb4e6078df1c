#include "ui/window/recent_models.h"

#include <QDir>
#include <QSettings>

namespace hs::ui {
namespace {

const QString kKey = QStringLiteral("models/recent");

}  // namespace

QStringList recentModels() { return QSettings().value(kKey).toStringList(); }

void rememberRecentModel(const QString& dir) {
  QSettings settings;
  QStringList recent = settings.value(kKey).toStringList();
  const QString path = QDir(dir).absolutePath();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kMaxRecentModels) recent.removeLast();
  settings.setValue(kKey, recent);
}

void clearRecentModels() { QSettings().remove(kKey); }

}  // namespace hs::ui
