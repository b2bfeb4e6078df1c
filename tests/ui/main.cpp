// The GUI tests' main: Qt's offscreen platform unless another was chosen (so the binary also
// runs, and lists its tests for catch_discover_tests, without a display), one QApplication, and
// settings and data kept in temporary folders so tests never touch the person's own.
#include <QApplication>
#include <QSettings>
#include <QTemporaryDir>

#include <cstdlib>

#include "tests/test_common.h"
#include "ui/style/app_style.h"

int main(int argc, char** argv) {
  if (!std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  // The app's data folder (its dashboards/, which every window reads at start) in a temporary
  // folder too: tests start with none and never see or leave the person's own.
  QTemporaryDir data_dir;
  setenv("XDG_DATA_HOME", data_dir.path().toLocal8Bit().constData(), 1);
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("HeadScopeTests"));
  QApplication::setApplicationName(QStringLiteral("headscope-ui-tests"));
  QTemporaryDir settings_dir;
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir.path());
  hs::ui::applyAppStyle(app);
  return hs::test::run_catch(argc, argv);
}
