#include "ui/window/export_all.h"

#include <QDir>
#include <QFileInfo>
#include <QTemporaryFile>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>

#include <exception>

#include "core/model/thread_scope.h"
#include "ui/base/deliver.h"
#include "ui/base/figure.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/views/registry.h"

namespace hs::ui {

// A view of the job with its own selection (a view that outlines the head it draws moves it).
struct ExportAllJob::ViewState {
  const ViewDescriptor* descriptor = nullptr;
  std::unique_ptr<Selection> selection;
  std::unique_ptr<AnalysisView> view;
  std::optional<AnalysisKey> shown;  // the analysis the view holds
};

struct ExportAllJob::Step {
  ViewState* view = nullptr;
  ExportFigure figure;
};

ExportAllJob::ExportAllJob(std::shared_ptr<const RunResult> run, Options options, QObject* parent)
    : QObject(parent), run_(std::move(run)), options_(std::move(options)) {}

ExportAllJob::~ExportAllJob() = default;

void ExportAllJob::start() {
  // Fail before painting anything when the folder cannot take files.
  QDir dir(options_.out_dir);
  if (options_.out_dir.isEmpty()) return fail(QStringLiteral("No output folder was given."));
  if (!dir.exists() && !QDir().mkpath(options_.out_dir))
    return fail(QStringLiteral("Cannot create the output folder %1. Check the path and your permissions.")
                    .arg(QDir::toNativeSeparators(options_.out_dir)));
  {
    QTemporaryFile probe(dir.filePath(QStringLiteral(".headscope-probe-XXXXXX")));
    if (!probe.open())
      return fail(QStringLiteral("Cannot write to %1: %2. Choose a folder you can write to.")
                      .arg(QDir::toNativeSeparators(dir.absolutePath()), probe.errorString()));
  }

  for (const ViewDescriptor& descriptor : viewRegistry()) {
    auto state = std::make_unique<ViewState>();
    state->descriptor = &descriptor;
    state->selection = std::make_unique<Selection>();
    Selection& s = *state->selection;
    s.setBounds(run_->n_layer(), run_->n_head(), run_->n_pos());
    s.setPosition(options_.position < 0 ? run_->n_pos() - 1 : options_.position);
    s.setHead(options_.layer, options_.head);
    s.setTarget(options_.target);
    s.setVersus(options_.versus);
    state->view.reset(descriptor.create(&s, nullptr));
    // Laid out at its export size and never shown, so painting it gives what a window would.
    state->view->setAttribute(Qt::WA_DontShowOnScreen);
    state->view->resize(descriptor.export_size);
    state->view->show();
    if (const auto inputs = options_.view_inputs.find(descriptor.id); inputs != options_.view_inputs.end())
      state->view->setViewInputs(inputs->second);
    state->view->setScan(options_.scan);
    state->view->setRun(run_);
    std::vector<ExportFigure> figures = state->view->exportFigures(*run_);
    if (figures.empty())
      if (const QString why = state->view->exportSkipReason(*run_); !why.isEmpty()) skipped_ << why;
    for (ExportFigure& figure : figures) steps_.push_back({state.get(), std::move(figure)});
    views_.push_back(std::move(state));
  }
  total_ = static_cast<int>(steps_.size());
  QTimer::singleShot(0, this, &ExportAllJob::step);
}

void ExportAllJob::step() {
  if (failed_ || done_ || waiting_) return;
  if (next_step_ >= steps_.size()) return maybeFinish();
  Step& s = steps_[next_step_];
  ViewState& view = *s.view;
  if (s.figure.analysis && view.shown != s.figure.analysis) {
    // The view's analysis for this figure first, on a worker; this step runs again when it lands.
    waiting_ = true;
    auto computed = QtConcurrent::run([spec = view.descriptor->analysis, run = run_, key = *s.figure.analysis] {
      std::shared_ptr<const ViewResult> result;
      try {
        result = AnalysisController::computeAnalysis(spec, run, key);
      } catch (const std::exception&) {
        // QFuture carries no exceptions; reported below
      }
      hs::release_thread_team();  // only the window's run thread keeps an OpenMP team
      return result;
    });
    deliverLater(computed, this, [this, &view, key = *s.figure.analysis](std::shared_ptr<const ViewResult> result) {
      waiting_ = false;
      if (!result)
        return fail(QStringLiteral("Could not compute the %1 view for export.").arg(view.descriptor->title));
      view.view->setResult(std::move(result));
      view.shown = key;
      QTimer::singleShot(0, this, &ExportAllJob::step);
    });
    return;
  }
  ++next_step_;
  paint(view, s.figure);
  if (!failed_) QTimer::singleShot(0, this, &ExportAllJob::step);
}

void ExportAllJob::paint(ViewState&, const ExportFigure& figure) {
  const ExportFigure::Target target = figure.prepare();
  if (!target.source) return fail(QStringLiteral("Nothing to export: the run has no data for this view."));
  const QString path = QDir(options_.out_dir).filePath(target.source->figureFileStem() + QStringLiteral(".png"));
  const QImage image = renderFigureImage(*target.source, target.size, options_.scale);
  Q_EMIT figurePainted(target.source, QFileInfo(path).fileName());
  const FigureText text = target.source->figureText();
  ++rendered_;
  ++pending_writes_;
  Q_EMIT progress(rendered_, total_, QFileInfo(path).fileName());
  auto written = QtConcurrent::run([image, text, path] { return writeFileAtomically(path, encodePng(image, text)); });
  deliverLater(written, this, [this, path](const QString& error) { writeDone(path, error); });
}

void ExportAllJob::writeDone(const QString& path, const QString& error) {
  --pending_writes_;
  if (!error.isEmpty()) return fail(error);
  written_ << path;
  maybeFinish();
}

void ExportAllJob::maybeFinish() {
  if (done_ || failed_ || next_step_ < steps_.size() || waiting_ || pending_writes_ > 0) return;
  done_ = true;
  Q_EMIT finished(true, QStringLiteral("Wrote %1 PNG files to %2%3")
                            .arg(written_.size())
                            .arg(QDir::toNativeSeparators(QDir(options_.out_dir).absolutePath()),
                                 skipped_.isEmpty() ? QString()
                                                    : QStringLiteral("; nothing to export from %1")
                                                          .arg(skipped_.join(QStringLiteral("; ")))));
}

void ExportAllJob::fail(const QString& message) {
  if (failed_ || done_) return;
  failed_ = true;
  Q_EMIT finished(false, message);
}

}  // namespace hs::ui
