// What the window says about its state: the status bar (model, tokens, timings, the next token,
// ablations, loading and export progress) and the banner above the views (no model, warnings,
// errors).
#include "ui/window/main_window.h"

#include <QComboBox>
#include <QLabel>
#include <QProgressBar>
#include <QStatusBar>
#include <QStyle>
#include <QToolButton>

#include "core/model/architecture.h"
#include "core/model/architecture_text.h"
#include "core/model/model.h"
#include "ui/controller/analysis_controller.h"
#include "ui/views/view_text.h"
#include "ui/widgets/labels.h"

namespace hs::ui {

void MainWindow::buildStatusBar() {
  QStatusBar* bar = statusBar();
  bar->setObjectName(QStringLiteral("statusBar"));
  auto label = [&](const QString& name) {
    auto* l = new QLabel(bar);
    l->setObjectName(name);
    bar->addWidget(l);
    return l;
  };
  status_model_ = label(QStringLiteral("statusModel"));
  status_tokens_ = label(QStringLiteral("statusTokens"));
  status_time_ = label(QStringLiteral("statusTime"));
  status_next_ = label(QStringLiteral("statusNext"));
  status_ablations_ = label(QStringLiteral("statusAblations"));
  // What a text longer than the context keeps. A fixed size: it never relays the bar out.
  keep_choice_ = new QComboBox(bar);
  keep_choice_->setObjectName(QStringLiteral("keepChoice"));
  keep_choice_->addItem(QStringLiteral("Keep: first n_ctx tokens"), false);
  keep_choice_->addItem(QStringLiteral("Keep: last n_ctx tokens"), true);
  keep_choice_->setToolTip(QStringLiteral("A text longer than the model's context runs its first n_ctx tokens, or BOS "
                                          "and its last ones (where you type); the banner says how many were left "
                                          "out. Typing at the end of a long text with \"last\" runs the whole "
                                          "window again at every key."));
  keep_choice_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  keep_choice_->setFixedSize(keep_choice_->sizeHint());
  bar->addPermanentWidget(keep_choice_);
  status_busy_ = new QLabel(bar);
  status_busy_->setObjectName(QStringLiteral("statusBusy"));
  bar->addPermanentWidget(status_busy_);
  // Shown and cleared around every keystroke's run: a fixed size, so that it never lays out the
  // status bar again (a label whose size may change does, on every new text).
  status_running_ = new QLabel(bar);
  status_running_->setObjectName(QStringLiteral("statusRunning"));
  status_running_->setFixedSize(status_running_->fontMetrics().horizontalAdvance(QStringLiteral("running…")) + 8,
                                status_running_->fontMetrics().height());
  bar->addPermanentWidget(status_running_);
  progress_ = new QProgressBar(bar);
  progress_->setObjectName(QStringLiteral("loadProgress"));
  progress_->setRange(0, 1000);
  progress_->setFixedWidth(200);
  progress_->setTextVisible(true);
  progress_->hide();
  bar->addPermanentWidget(progress_);
  scan_cancel_ = new QToolButton(bar);
  scan_cancel_->setObjectName(QStringLiteral("scanCancel"));
  scan_cancel_->setText(QStringLiteral("Cancel Scan"));
  scan_cancel_->hide();
  bar->addPermanentWidget(scan_cancel_);
}

void MainWindow::updateStatus() {
  const auto& model = controller_->model();
  status_model_->setText(model ? QStringLiteral("%1 · %2").arg(QString::fromStdString(model->name()),
                                                               model->config().architecture.family
                                                                   ? QString::fromStdString(std::string(model->config().architecture.family->name()))
                                                                   : QString())
                               : QStringLiteral("no model"));
  if (model) {
    const hs::ModelConfig& c = model->config();
    status_model_->setToolTip(QStringLiteral("%1\n%2\n%3 layers × %4 heads, d_model %5, d_head %6, vocabulary %7, context %8")
                                  .arg(QString::fromStdString(model->dir().string()))
                                  .arg(QString::fromStdString(hs::describe_architecture(c, model->weights()->tied_unembedding())))
                                  .arg(c.n_layers)
                                  .arg(c.n_heads)
                                  .arg(c.d_model)
                                  .arg(c.d_head)
                                  .arg(c.d_vocab)
                                  .arg(c.n_ctx));
  }
  if (!run_) {
    status_tokens_->clear();
    status_time_->clear();
    status_next_->clear();
    return;
  }
  status_tokens_->setText(QStringLiteral("· %1 tokens").arg(run_->n_pos()));
  status_time_->setText(QStringLiteral("· forward %1").arg(formatDuration(run_->run.forward_ms)));
  status_time_->setToolTip(QStringLiteral("tokenize %1 · forward %2 · whole run on the worker %3 · keystroke to "
                                          "views %4 (after the %5 ms typing pause)")
                               .arg(formatDuration(run_->run.tokenize_ms), formatDuration(run_->run.forward_ms),
                                    formatDuration(run_->worker_ms), formatDuration(run_->latency_ms))
                               .arg(kDebounceMs));
  status_next_->setText(run_->next.empty() ? QString()
                                           : QStringLiteral("· next token %1").arg(predictionText(*run_, run_->next.front())));
  // Head ablations are on hook_z; the rest are SAE splices with latent edits (SaeEdits).
  const auto ablated = std::count_if(run_->ablations().begin(), run_->ablations().end(),
                                     [](const hs::Intervention& i) { return i.hook == hs::HookPoint::Z && i.head >= 0; });
  const bool sae_edited = static_cast<size_t>(ablated) != run_->ablations().size();
  QStringList edited;
  if (ablated > 0) edited << QStringLiteral("· %1 head%2 ablated").arg(ablated).arg(ablated == 1 ? "" : "s");
  if (sae_edited) edited << QStringLiteral("· SAE latents edited");
  status_ablations_->setText(edited.join(QLatin1Char(' ')));
}

void MainWindow::showBanner(const QString& html, bool error) {
  banner_->setText(html);
  banner_->setProperty("kind", error ? QStringLiteral("error") : QStringLiteral("warning"));
  banner_->setProperty("source", QString());
  banner_->style()->unpolish(banner_);
  banner_->style()->polish(banner_);
  banner_->show();
}

void MainWindow::hideBanner() {
  banner_->hide();
  banner_->setProperty("kind", QString());
  banner_->setProperty("source", QString());
}

}  // namespace hs::ui
