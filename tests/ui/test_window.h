// The main window as the window tests open it: 1400 x 900, shown and active, its first run in.
#pragma once

#include <catch2/catch.hpp>

#include <QTest>

#include "ui/controller/head_metrics.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

namespace hs::ui::test {

// Each window starts as the application's does: no Model metric asked for by an earlier window.
struct ForgetModelMetrics {
  ForgetModelMetrics() { forgetModelMetrics(); }
};

struct Window {
  ForgetModelMetrics fresh;  // before the window's first run
  MainWindow window;
  explicit Window(const QString& text, const QString& model = fixtureModelDir())
      : window(MainWindowOptions{model, text, false}) {
    window.resize(1400, 900);
    window.show();
    window.activateWindow();
    REQUIRE(QTest::qWaitForWindowActive(&window));
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }, 30000));
  }
  std::shared_ptr<const RunResult> run() const { return window.controller()->currentRun(); }
};

}  // namespace hs::ui::test
