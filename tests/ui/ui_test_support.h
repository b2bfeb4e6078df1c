// Helpers shared by the GUI tests: models to test with, and waiting for the event loop.
#pragma once

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QString>
#include <QVariantMap>

#include <functional>
#include <memory>
#include <vector>

#include "tests/test_common.h"
#include "ui/controller/analysis_controller.h"
#include "ui/window/export_all.h"

namespace hs { class Model; }
namespace hs::ui { class HeatmapView; }

namespace hs::ui::test {

// Registers every view's analysis (ui/views/registry.cpp) with the controller, as the window does.
void addViewAnalyses(AnalysisController& controller);

// Convenience keys: an analysis of one position (and target), or of one layer.
AnalysisKey positionKey(int pos, std::optional<int32_t> target = std::nullopt);
AnalysisKey layerKey(int layer);

// The controller's answers for one analysis id, in the order they arrived.
class AnalysisSpy {
 public:
  AnalysisSpy(AnalysisController* controller, const QString& id);
  int count() const { return static_cast<int>(results_->size()); }
  template <class Result>
  std::shared_ptr<const Result> at(int i) const {
    return std::dynamic_pointer_cast<const Result>((*results_)[static_cast<size_t>(i)]);
  }

 private:
  std::shared_ptr<std::vector<std::shared_ptr<const ViewResult>>> results_ =
      std::make_shared<std::vector<std::shared_ptr<const ViewResult>>>();
  QObject receiver_;
};

// A small committed GPT-2 fixture (2 layers x 4 heads, context 24).
QString fixtureModelDir();
// The built-in model's folder, as the programs find it.
QString builtinModelDir();
// The fixture, loaded once per test binary.
std::shared_ptr<const hs::Model> fixtureModel();

// The Patching view's inputs for the fixture and the prompt "The cat sat on the mat!": a corrupted
// prompt of the same length and two one-token answers the fixture tells apart.
QVariantMap fixturePatchingInputs();

// Leaves no SAE loaded behind a test, whatever it ends with.
struct ClearSaes {
  ClearSaes();
  ~ClearSaes();
};

// A left click at the centre of one cell, on the heatmap as last drawn.
void clickCell(HeatmapView* heatmap, int row, int col);

// Runs the event loop until `done()` holds or `timeout_ms` passes; returns done().
bool waitFor(const std::function<bool()>& done, int timeout_ms = 10000);

// Runs an Export All job to its end (or a minute): what it finished with.
struct ExportOutcome {
  bool finished = false, ok = false;
  QString message;
};
ExportOutcome runExport(ExportAllJob& job);

// A folder that looks like a model but is broken (config.json is not JSON).
QString makeBrokenModelDir(const QString& parent);

}  // namespace hs::ui::test
