// Opening models: File > Open, the model list above the prompt, recent folders, and what the
// window does when a model is in or could not be opened.
#include "ui/window/main_window.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QProgressBar>
#include <QSettings>

#include <utility>

#include "core/model/architecture.h"
#include "core/model/model.h"
#include "ui/controller/ablations.h"
#include "ui/controller/analysis_controller.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/window/recent_models.h"

namespace hs::ui {

void MainWindow::loadModel(const QString& dir) { controller_->loadModel(dir); }

void MainWindow::openModelFolder() {
  QSettings settings;
  const QString start = settings.value(QStringLiteral("models/lastFolder"), QDir::homePath()).toString();
  const QString dir = QFileDialog::getExistingDirectory(
      this,
      QStringLiteral("Open Model Folder: a Hugging Face %1 folder").arg(QString::fromStdString(hs::supported_families_text())),
      start);
  if (dir.isEmpty()) return;
  settings.setValue(QStringLiteral("models/lastFolder"), QFileInfo(dir).absolutePath());
  loadModel(dir);
}

void MainWindow::openCheckpointFile() {
  QSettings settings;
  const QString start = settings.value(QStringLiteral("models/lastFolder"), QDir::homePath()).toString();
  const QString file = QFileDialog::getOpenFileName(
      this, QStringLiteral("Open llama2.c Checkpoint (its tokenizer .bin beside it)"), start,
      QStringLiteral("llama2.c checkpoints (*.bin);;All files (*)"));
  if (file.isEmpty()) return;
  settings.setValue(QStringLiteral("models/lastFolder"), QFileInfo(file).absolutePath());
  loadModel(file);
}

void MainWindow::onModelChanged(std::shared_ptr<const hs::Model> model) {
  progress_->hide();
  status_busy_->clear();
  run_.reset();
  if (!model) return;
  const QString dir = QString::fromStdString(model->dir().string());
  if (QDir(dir) != QDir(builtin_dir_)) {
    rememberRecentModel(dir);
    updateRecentMenu();
  }
  refreshModelCombo();
  setWindowTitle(QStringLiteral("HeadScope — %1").arg(QString::fromStdString(model->name())));
  hideBanner();
  if (!model->warnings().empty()) {
    QStringList lines;
    for (const std::string& w : model->warnings()) lines << QString::fromStdString(w).toHtmlEscaped();
    showBanner(QStringLiteral("<b>The model loaded with warnings:</b> ") + lines.join(QStringLiteral("<br>")), false);
  }
  // Ablated heads belong to the model they were chosen on.
  {
    QSignalBlocker block(ablations_);
    ablations_->reset();
  }
  controller_->setAblations({});
  head_grid_->setPickedIndices({});
  // The command line's ablations (MainWindowOptions) are for the first model, once it is in;
  // heads the model does not have make that run fail with the core's message.
  // Undoable like any other ablation.
  for (const hs::Intervention& a : std::exchange(first_ablations_, {})) ablations_->add({{a.layer, a.head}}, a.kind);
  // The controller re-runs its last text on a new model; make sure it knows the current one.
  debounce_.stop();
  controller_->requestRun(prompt_->toPlainText());
  onModelChangedForSaes();
  updateStatus();
}

void MainWindow::onModelLoadFailed(const QString& dir, const QString& message) {
  progress_->hide();
  status_busy_->clear();
  refreshModelCombo();
  const bool have_model = controller_->model() != nullptr;
  if (load_error_box_) load_error_box_->close();
  auto* box = new QMessageBox(QMessageBox::Warning, QStringLiteral("Could not open the model"),
                              QStringLiteral("HeadScope could not load the model folder\n%1").arg(QDir::toNativeSeparators(dir)),
                              QMessageBox::Ok, this);
  box->setObjectName(QStringLiteral("modelLoadError"));
  // A tensor name or a path wraps between its parts, not mid-name; Show Details has the message
  // as the core wrote it, to copy.
  box->setInformativeText(breakableText(message) + (have_model ? QStringLiteral("\n\nThe previous model (%1) is still loaded.")
                                                      .arg(QString::fromStdString(controller_->model()->name()))
                                                : QString()));
  box->setDetailedText(message);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setWindowModality(Qt::WindowModal);
  load_error_box_ = box;
  box->open();
  if (!have_model)
    showBanner(QStringLiteral("<b>No model loaded.</b> %1").arg(breakableText(message).toHtmlEscaped()), true);
}

void MainWindow::refreshModelCombo() {
  QSignalBlocker block(model_combo_);
  model_combo_->clear();
  const auto& model = controller_->model();
  const QString current = model ? QDir(QString::fromStdString(model->dir().string())).absolutePath() : QString();
  if (!builtin_dir_.isEmpty())
    model_combo_->addItem(QStringLiteral("%1 (built-in)").arg(QFileInfo(builtin_dir_).fileName()),
                          QDir(builtin_dir_).absolutePath());
  for (const QString& dir : recentModels())
    if (QDir(dir).absolutePath() != QDir(builtin_dir_).absolutePath())
      model_combo_->addItem(QFileInfo(dir).fileName(), QDir(dir).absolutePath());
  if (!current.isEmpty() && model_combo_->findData(current) < 0)
    model_combo_->addItem(QFileInfo(current).fileName(), current);
  model_combo_->insertSeparator(model_combo_->count());
  model_combo_->addItem(QStringLiteral("Open model folder…"), QStringLiteral("::open"));
  const int index = model_combo_->findData(current);
  model_combo_->setCurrentIndex(index >= 0 ? index : -1);
  for (int i = 0; i < model_combo_->count(); ++i)
    model_combo_->setItemData(i, model_combo_->itemData(i), Qt::ToolTipRole);
}

void MainWindow::updateRecentMenu() {
  recent_menu_->clear();
  const QStringList recent = recentModels();
  for (const QString& dir : recent)
    recent_menu_->addAction(QDir::toNativeSeparators(dir), this, [this, dir] { loadModel(dir); });
  recent_menu_->setEnabled(!recent.isEmpty());
  if (!recent.isEmpty()) {
    recent_menu_->addSeparator();
    recent_menu_->addAction(QStringLiteral("Clear Recent Models"), this, [this] {
      clearRecentModels();
      updateRecentMenu();
      refreshModelCombo();
    });
  }
}

}  // namespace hs::ui
