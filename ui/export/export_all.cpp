#include "ui/export/export_all.h"

#include <QDir>
#include <QFileInfo>
#include <QTemporaryFile>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <exception>

#include "ui/controller/analysis_controller.h"
#include "ui/controller/deliver.h"
#include "ui/controller/selection.h"
#include "ui/export/figure.h"
#include "ui/views/attention_view.h"
#include "ui/views/concat_sum_view.h"
#include "ui/views/contributions_view.h"
#include "ui/views/view_text.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/image_grid_view.h"

namespace hs::ui {
namespace {

// Lays a never-shown widget out at `size`, so painting it gives what a window would show.
void prepareOffscreen(QWidget* widget, QSize size) {
  widget->setAttribute(Qt::WA_DontShowOnScreen);
  widget->resize(size);
  widget->show();
}

// A worker's analysis, or null when it threw: QFuture only carries QException subclasses across
// threads, and the job reports any failure the same way.
template <typename F>
auto orNull(F&& compute) -> decltype(compute()) {
  try {
    return compute();
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace

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

  selection_ = std::make_unique<Selection>();
  const int n_layer = run_->n_layer(), n_head = run_->n_head();
  selection_->setBounds(n_layer, n_head, run_->n_pos());
  selection_->setPosition(options_.position < 0 ? run_->n_pos() - 1 : options_.position);
  selection_->setTarget(options_.target);

  attention_ = std::make_unique<AttentionView>(selection_.get());
  attention_->setRun(run_);
  prepareOffscreen(attention_.get(), options_.attention_size);

  // The overview of every head.
  steps_.push_back([this, n_layer, n_head] {
    overview_ = std::make_unique<ImageGridView>();
    std::vector<ImageGridView::Item> items;
    for (int l = 0; l < n_layer; ++l)
      for (int h = 0; h < n_head; ++h)
        items.push_back({run_->thumbnails[static_cast<size_t>(l * n_head + h)], headLabel(l, h), {}});
    overview_->setItems(std::move(items), n_head);
    QStringList rows, cols;
    for (int l = 0; l < n_layer; ++l) rows << QStringLiteral("L%1").arg(l);
    for (int h = 0; h < n_head; ++h) cols << QStringLiteral("H%1").arg(h);
    overview_->setRowHeaders(rows);
    overview_->setColumnHeaders(cols);
    overview_->setMaxCellWidth(96);
    overview_->setFigureText({QStringLiteral("Attention patterns of all %1 heads").arg(n_layer * n_head),
                              runSubtitle(*run_)},
                             QStringLiteral("heads_overview"));
    // As tall as the grid needs at this width, no blank band below it.
    const QSize size(options_.overview_size.width(),
                     std::min(options_.overview_size.height(), overview_->heightForWidth(options_.overview_size.width()) + 8));
    prepareOffscreen(overview_.get(), size);
    renderAndWrite(*overview_, size, QStringLiteral("heads_overview"));
  });
  for (int l = 0; l < n_layer; ++l) {
    for (int h = 0; h < n_head; ++h) {
      steps_.push_back([this, l, h] {
        attention_->showHead(l, h);
        HeatmapView* plot = attention_->heatmap();
        plot->replotNow();
        renderAndWrite(*plot, options_.pattern_size, QStringLiteral("attention_%1").arg(headLabel(l, h)));
      });
    }
  }
  // Contributions: computed on a worker, then painted in both modes.
  steps_.push_back([this] {
    waiting_ = true;
    auto computed = QtConcurrent::run([run = run_, pos = selection_->position(), target = options_.target] {
      return orNull([&] { return AnalysisController::computePosition(run, pos, target); });
    });
    deliverLater(computed, this, [this](std::shared_ptr<PositionResult> result) {
      if (!result) return fail(QStringLiteral("Could not compute the contributions."));
      contributions_ = std::make_unique<ContributionsView>(selection_.get());
      contributions_->setPositionResult(result);
      prepareOffscreen(contributions_.get(), options_.contributions_size);
      waiting_ = false;
      QTimer::singleShot(0, this, &ExportAllJob::step);
    });
  });
  for (auto mode : {ContributionsView::Mode::WriteNorm, ContributionsView::Mode::LogitAttribution}) {
    steps_.push_back([this, mode] {
      contributions_->setMode(mode);
      renderAndWrite(*contributions_, options_.contributions_size, contributions_->figureFileStem());
    });
  }
  // Concat vs sum, one layer at a time (each layer's analysis holds [head, pos, d_model]).
  for (int l = 0; l < n_layer; ++l) {
    steps_.push_back([this, l] {
      waiting_ = true;
      auto computed = QtConcurrent::run([run = run_, l] {
        return orNull([&] { return AnalysisController::computeLayer(run, l); });
      });
      deliverLater(computed, this, [this, l](std::shared_ptr<LayerResult> result) {
        if (!result) return fail(QStringLiteral("Could not compute the concat-vs-sum view of layer %1.").arg(l));
        if (!concat_) {
          concat_ = std::make_unique<ConcatSumView>(selection_.get());
          prepareOffscreen(concat_.get(), options_.concat_size);
        }
        selection_->setHead(l, selection_->head());
        concat_->setLayerResult(result);
        waiting_ = false;
        QTimer::singleShot(0, this, &ExportAllJob::step);
      });
    });
    steps_.push_back([this] { renderAndWrite(*concat_, options_.concat_size, concat_->figureFileStem()); });
  }
  total_ = n_layer * n_head + 1 + 2 + n_layer;
  QTimer::singleShot(0, this, &ExportAllJob::step);
}

void ExportAllJob::step() {
  if (failed_ || done_ || waiting_) return;
  if (next_step_ >= steps_.size()) return maybeFinish();
  const size_t index = next_step_++;
  steps_[index]();
  if (!waiting_ && !failed_) QTimer::singleShot(0, this, &ExportAllJob::step);
}

void ExportAllJob::renderAndWrite(FigureSource& source, QSize body, const QString& stem) {
  const QString path = QDir(options_.out_dir).filePath(stem + QStringLiteral(".png"));
  const QImage image = renderFigureImage(source, body, options_.scale);
  const FigureText text = source.figureText();
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
  Q_EMIT finished(true, QStringLiteral("Wrote %1 PNG files to %2")
                            .arg(written_.size())
                            .arg(QDir::toNativeSeparators(QDir(options_.out_dir).absolutePath())));
}

void ExportAllJob::fail(const QString& message) {
  if (failed_ || done_) return;
  failed_ = true;
  Q_EMIT finished(false, message);
}

}  // namespace hs::ui
