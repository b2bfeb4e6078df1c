#include "ui_test_support.h"

#include <QDir>
#include <QFile>
#include <QTest>
#include <QThread>

#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/controller/loaded_saes.h"
#include "ui/views/patching_view.h"
#include "ui/views/registry.h"
#include "ui/widgets/heatmap_view.h"

namespace hs::ui::test {

void addViewAnalyses(AnalysisController& controller) {
  for (const ViewDescriptor& v : viewRegistry())
    if (v.analysis.compute) controller.addAnalysis(v.analysis);
}

AnalysisKey positionKey(int pos, std::optional<int32_t> target) {
  AnalysisKey key;
  key.pos = pos;
  key.target = target;
  return key;
}

AnalysisKey layerKey(int layer) {
  AnalysisKey key;
  key.layer = layer;
  return key;
}

AnalysisSpy::AnalysisSpy(AnalysisController* controller, const QString& id) {
  QObject::connect(controller, &AnalysisController::analysisReady, &receiver_,
                   [results = results_, id](const QString& from, std::shared_ptr<const ViewResult> result) {
                     if (from == id) results->push_back(std::move(result));
                   });
}

QString fixtureModelDir() { return QStringLiteral(HEADSCOPE_SOURCE_DIR "/tests/fixtures/models/f32_prefixed"); }

std::shared_ptr<const hs::Model> fixtureModel() {
  static std::shared_ptr<const hs::Model> model = hs::Model::load(fixtureModelDir().toStdString());
  return model;
}

QVariantMap fixturePatchingInputs() {
  return {{PatchingView::kCorrupt, QStringLiteral("The cat sat on the hat!")},
          {PatchingView::kAnswer, QStringLiteral("Z")},
          {PatchingView::kWrong, QStringLiteral("\"")}};
}

bool waitFor(const std::function<bool()>& done, int timeout_ms) {
  QElapsedTimer clock;
  clock.start();
  while (!done()) {
    if (clock.elapsed() > timeout_ms) return done();
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(1);
  }
  return true;
}

ExportOutcome runExport(ExportAllJob& job) {
  ExportOutcome out;
  QObject::connect(&job, &ExportAllJob::finished, [&](bool ok, const QString& message) {
    out.finished = true;
    out.ok = ok;
    out.message = message;
  });
  job.start();
  waitFor([&] { return out.finished; }, 60000);
  return out;
}

QString builtinModelDir() { return QString::fromStdString(hs::builtin_model_dir().string()); }

ClearSaes::ClearSaes() { LoadedSaes::instance().clear(); }
ClearSaes::~ClearSaes() { LoadedSaes::instance().clear(); }

void clickCell(HeatmapView* heatmap, int row, int col) {
  heatmap->replotNow();
  QTest::mouseClick(heatmap->findChild<QWidget*>(QStringLiteral("heatmapPlot")), Qt::LeftButton, Qt::NoModifier,
                    heatmap->cellCenter(row, col));
}

QString makeBrokenModelDir(const QString& parent) {
  const QString dir = QDir(parent).filePath(QStringLiteral("broken-model"));
  QDir().mkpath(dir);
  for (const char* name : {"config.json", "vocab.json", "merges.txt", "model.safetensors"}) {
    QFile f(QDir(dir).filePath(QString::fromLatin1(name)));
    f.open(QIODevice::WriteOnly);
    f.write(QByteArray(name) == "config.json" ? "{ this is not json" : "garbage");
  }
  return dir;
}

}  // namespace hs::ui::test
