// Helpers shared by the GUI tests: models to test with, and waiting for the event loop.
#pragma once

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QString>

#include <functional>
#include <memory>

namespace hs { class Model; }

namespace hs::ui::test {

// A small committed GPT-2 fixture (2 layers x 4 heads, context 24).
QString fixtureModelDir();
// The fixture, loaded once per test binary.
std::shared_ptr<const hs::Model> fixtureModel();

// Runs the event loop until `done()` holds or `timeout_ms` passes; returns done().
bool waitFor(const std::function<bool()>& done, int timeout_ms = 10000);

// A folder that looks like a model but is broken (config.json is not JSON).
QString makeBrokenModelDir(const QString& parent);

}  // namespace hs::ui::test
