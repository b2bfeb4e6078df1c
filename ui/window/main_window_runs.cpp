// How a run reaches the views: the prompt's debounce, the controller's signals, the selection
// linking every view, and each view's analysis asked for when what it reads changes.
#include "ui/window/main_window.h"

#include <QComboBox>
#include <QFileInfo>
#include <QLabel>
#include <QMenu>
#include <QProgressBar>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>

#include <algorithm>
#include <cstdlib>

#include "core/model/model.h"
#include "ui/controller/ablations.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/views/registry.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/widgets/token_strip.h"
#include "ui/window/ablation_panel.h"

namespace hs::ui {
namespace {

QString tokenTooltip(const RunResult& run, int pos) {
  const int32_t id = run.run.tokens[static_cast<size_t>(pos)];
  QString bytes;
  try {
    const std::string raw = run.model().tokenizer().token_bytes(id);
    QStringList hex;
    for (unsigned char c : raw) hex << QStringLiteral("%1").arg(c, 2, 16, QChar('0'));
    bytes = hex.join(' ');
  } catch (const std::exception&) {
  }
  QString text = QStringLiteral("position %1 · id %2\n%3").arg(pos).arg(id).arg(run.labels.value(pos));
  if (!bytes.isEmpty()) text += QStringLiteral("\nbytes: %1").arg(bytes);
  if (run.labels.value(pos).contains(QChar(0x2039)))
    text += QStringLiteral("\n‹hex›: bytes that are not a whole character; a character before them is the one\n"
                           "they belong to, split across neighbouring tokens");
  if (pos == 0 && run.run.bos_prepended) text += QStringLiteral("\n(BOS, added before the prompt)");
  return text;
}

}  // namespace

void MainWindow::connectEverything() {
  connect(prompt_, &QPlainTextEdit::textChanged, &debounce_, qOverload<>(&QTimer::start));
  connect(&debounce_, &QTimer::timeout, this, [this] { controller_->requestRun(prompt_->toPlainText()); });
  connect(prompt_, &PromptEdit::escapePressed, this, [this] { head_grid_->setFocus(Qt::ShortcutFocusReason); });
  connect(prompt_, &PromptEdit::submitted, this, [this] {
    debounce_.stop();
    controller_->requestRun(prompt_->toPlainText());
  });

  connect(controller_, &AnalysisController::loadStarted, this, [this](const QString& dir) {
    loading_dir_ = dir;
    progress_->setValue(0);
    progress_->setFormat(QStringLiteral("%p%"));
    progress_->show();
    status_busy_->setText(QStringLiteral("Loading %1…").arg(QFileInfo(dir).fileName()));
  });
  connect(controller_, &AnalysisController::loadProgress, this, [this](double fraction, const QString& stage) {
    progress_->setValue(static_cast<int>(fraction * 1000));
    status_busy_->setText(QStringLiteral("Loading %1: %2").arg(QFileInfo(loading_dir_).fileName(), stage));
  });
  connect(controller_, &AnalysisController::modelChanged, this, &MainWindow::onModelChanged);
  connect(controller_, &AnalysisController::modelLoadFailed, this, &MainWindow::onModelLoadFailed);
  connect(controller_, &AnalysisController::runReady, this, &MainWindow::onRunReady);
  connect(controller_, &AnalysisController::runFailed, this, &MainWindow::onRunFailed);
  connect(controller_, &AnalysisController::busyChanged, this, [this](bool busy) {
    status_running_->setText(busy && !controller_->isLoading() ? QStringLiteral("running…") : QString());
  });
  connect(controller_, &AnalysisController::analysisReady, this,
          [this](const QString& id, std::shared_ptr<const ViewResult> r) {
            if (AnalysisView* v = view(id)) v->setResult(std::move(r));
          });
  connect(controller_, &AnalysisController::analysisFailed, this,
          [this](const QString& message) { showBanner(message.toHtmlEscaped(), true); });
  // Views that ask for their analysis themselves (a Run button): their requests, progress and
  // failures, by id.
  for (size_t i = 0; i < views_.size(); ++i) {
    const QString id = viewRegistry()[i].id;
    connect(views_[i], &AnalysisView::analysisRequested, this,
            [this, id](const AnalysisKey& key) { controller_->request(id, key); });
    connect(views_[i], &AnalysisView::cancelRequested, this, [this, id] { controller_->cancel(id); });
    connect(views_[i], &AnalysisView::analysisKeyChanged, this, [this] { requestAnalyses(); });
    connect(views_[i], &AnalysisView::runWanted, this, [this] {
      debounce_.stop();
      controller_->requestRun(prompt_->toPlainText());
    });
    connect(views_[i], &AnalysisView::unitRequested, this, [this](const UnitRef& unit) {
      for (AnalysisView* v : views_)
        if (v->showUnit(unit)) {
          tabs_->setCurrentWidget(v);
          return;
        }
    });
    connect(views_[i], &AnalysisView::headContextMenu, this, [this](int layer, int head, QMenu* menu) {
      if (layer >= 0 && layer < selection_->layerCount() && head >= 0 && head < selection_->headCount())
        addHeadActions(layer * selection_->headCount() + head, menu);
    });
  }
  connect(controller_, &AnalysisController::analysisProgress, this,
          [this](const QString& id, double fraction, const QString& what) {
            if (AnalysisView* v = view(id)) v->showProgress(fraction, what);
          });
  connect(controller_, &AnalysisController::analysisFailedFor, this, [this](const QString& id, const QString& message) {
    if (AnalysisView* v = view(id)) v->showFailure(message);
  });
  connect(ablations_, &Ablations::changed, this, &MainWindow::onAblationsChanged);
  connect(head_grid_, &ImageGridView::itemContextMenu, this, &MainWindow::addHeadActions);
  connect(head_grid_, &ImageGridView::itemCtrlClicked, this, [this](int index) {
    QList<int> picked = head_grid_->pickedIndices();
    if (!picked.removeOne(index)) picked.append(index);
    head_grid_->setPickedIndices(picked);
  });

  connect(model_combo_, qOverload<int>(&QComboBox::activated), this, [this](int index) {
    const QString dir = model_combo_->itemData(index).toString();
    if (dir == QStringLiteral("::open")) {
      refreshModelCombo();
      openModelFolder();
    } else if (!dir.isEmpty()) {
      loadModel(dir);
    }
  });

  connect(head_grid_, &ImageGridView::itemClicked, this, [this](int index) {
    const int n_head = std::max(1, selection_->headCount());
    selection_->setHead(index / n_head, index % n_head);
  });
  connect(tokens_, &TokenStrip::tokenClicked, selection_, &Selection::setPosition);
  connect(tokens_, &TokenStrip::tokenHovered, selection_, &Selection::setHoverPosition);

  connect(selection_, &Selection::headChanged, this, [this](int layer, int head) {
    head_grid_->setSelectedIndex(layer * selection_->headCount() + head);
    requestAnalyses();
  });
  connect(selection_, &Selection::positionChanged, this, [this](int pos) {
    tokens_->setSelectedPosition(pos);
    requestAnalyses();
  });
  connect(selection_, &Selection::targetChanged, this, [this] { requestAnalyses(); });
  connect(head_metrics_, &HeadMetricsBar::runWanted, this, [this] {
    debounce_.stop();
    controller_->requestRun(prompt_->toPlainText());
  });
  // A view whose analysis runs as its own job is asked for when its tab is shown (requestAnalyses).
  connect(tabs_, &QTabWidget::currentChanged, this, [this] { requestAnalyses(); });
  connect(selection_, &Selection::hoverChanged, tokens_, &TokenStrip::setHoverPosition);
}

void MainWindow::onRunReady(std::shared_ptr<const RunResult> run) {
  run_ = run;
  if (banner_->property("kind").toString() == QStringLiteral("error")) hideBanner();
  if (!run->run.warnings.empty()) {
    QStringList lines;
    for (const std::string& w : run->run.warnings) lines << QString::fromStdString(w).toHtmlEscaped();
    showBanner(QStringLiteral("<b>Warning:</b> ") + lines.join(QStringLiteral("<br>")), false);
  } else if (banner_->property("kind").toString() == QStringLiteral("warning") &&
             banner_->property("source").toString() == QStringLiteral("run")) {
    hideBanner();
  }
  if (!run->run.warnings.empty()) banner_->setProperty("source", QStringLiteral("run"));

  const int n_layer = run->n_layer(), n_head = run->n_head(), n_pos = run->n_pos();
  {
    // Bounds first, quietly: the views below take the new run before anyone redraws.
    QSignalBlocker block(selection_);
    selection_->setBounds(n_layer, n_head, n_pos);
  }
  if (first_head_) {
    const auto [layer, head] = *first_head_;
    first_head_.reset();
    if (layer < n_layer && head < n_head) {
      QSignalBlocker block(selection_);
      selection_->setHead(layer, head);
    }
  }
  tokens_->setTooltipProvider([run](int pos) { return pos < run->n_pos() ? tokenTooltip(*run, pos) : QString(); });
  tokens_->setTokens(run->labels, run->run.bos_prepended);
  tokens_->setSelectedPosition(selection_->position());
  tokens_->setHoverPosition(selection_->hoverPosition());

  head_metrics_->setRun(run);  // the thumbnails, with the chosen score's badges, order and filter
  if (heads_width_ <= 0) {
    // Not chosen yet (no drag, nothing saved): room for the first model's thumbnails at their
    // smallest readable size, up to a share of the window; past it the grid scrolls. Chosen once:
    // another model or tab leaves the panel's width where it is.
    const int wanted = head_grid_->minimumSizeHint().width() + 40;  // the panel's margins, a scroll bar
    heads_width_ = std::clamp(wanted, 260, std::max(260, width() * 3 / 10));
    applyHeadsWidth();
  }
  head_grid_->setSelectedIndex(selection_->layer() * n_head + selection_->head());

  for (AnalysisView* v : views_) v->setRun(run);
  ablation_panel_->setRun(run);
  requestAnalyses();
  updateStatus();
}

void MainWindow::onRunFailed(const QString& message) {
  showBanner(QStringLiteral("<b>Could not run the model:</b> %1").arg(message.toHtmlEscaped()), true);
  banner_->setProperty("source", QStringLiteral("run"));
}

void MainWindow::requestAnalyses() {
  for (size_t i = 0; i < views_.size(); ++i)
    controller_->setShown(viewRegistry()[i].id, tabs_->currentWidget() == views_[i]);
  const auto& run = controller_->currentRun();
  if (!run) return;
  asked_.resize(views_.size());
  for (size_t i = 0; i < views_.size(); ++i) {
    const ViewDescriptor& d = viewRegistry()[i];
    if (!d.analysis.compute || d.analysis.on_demand) continue;  // on-demand: the view asks itself
    // A hidden view asks while its analysis is cheap (it draws once shown, at once), or takes
    // what the run computed for it. Anything more would be a job on the worker pool, taking a
    // core from the next keystroke's run, for a view nobody sees: it asks when its tab is shown.
    const bool shown = tabs_->currentWidget() == views_[i];
    if (!shown && !d.analysis.with_every_run) continue;
    // Only when what it reads changed: moving to another head of the same layer does not
    // recompute a layer's analysis. Compared with the last request, not with what is shown, so
    // that going back to a key while another is being computed asks for it again.
    const AnalysisKey key = views_[i]->analysisKey(keyFromSelection(*selection_, d.analysis.reads));
    if (asked_[i].run_job == run->job && asked_[i].key == key) continue;
    if (!shown && !controller_->isCheap(d.id) && !controller_->hasReady(d.id, key)) continue;
    asked_[i] = {run->job, key};
    controller_->request(d.id, key);
  }
}

}  // namespace hs::ui
