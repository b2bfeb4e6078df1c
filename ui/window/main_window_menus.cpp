// The menu bar: File, Edit (the ablations' undo), View (a tab per view, the selection's keys,
// the Ablation dock) and Help.
#include "ui/window/main_window.h"

#include <QAction>
#include <QDockWidget>
#include <QKeySequence>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QTabWidget>
#include <QUndoStack>

#include <functional>
#include <utility>

#include "ui/controller/ablations.h"
#include "ui/controller/selection.h"
#include "ui/views/registry.h"
#include "ui/window/shortcuts.h"

namespace hs::ui {

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
  QAction* open = file->addAction(QStringLiteral("&Open Model Folder…"), this, &MainWindow::openModelFolder);
  open->setShortcut(QKeySequence::Open);
  open->setObjectName(QStringLiteral("actionOpen"));
  file->addAction(QStringLiteral("Open llama2.c &Checkpoint…"), this, &MainWindow::openCheckpointFile)
      ->setObjectName(QStringLiteral("actionOpenCheckpoint"));
  recent_menu_ = file->addMenu(QStringLiteral("Open &Recent"));
  file->addAction(QStringLiteral("Load &Built-in Model"), this, [this] {
    if (!builtin_dir_.isEmpty())
      loadModel(builtin_dir_);
    else
      showBanner(QStringLiteral("<b>The built-in model was not found.</b> %1").arg(builtin_error_.toHtmlEscaped()), true);
  });
  file->addSeparator();
  QAction* export_view = file->addAction(QStringLiteral("&Export Current View…"), this, &MainWindow::exportCurrentView);
  export_view->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  export_view->setObjectName(QStringLiteral("actionExport"));
  QAction* export_all = file->addAction(QStringLiteral("Export &All Views…"), this, &MainWindow::exportAll);
  export_all->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E));
  export_all->setObjectName(QStringLiteral("actionExportAll"));
  file->addSeparator();
  file->addAction(QStringLiteral("&Scan Data Set…"), this, &MainWindow::scanDataSet)
      ->setObjectName(QStringLiteral("actionScanDataSet"));
  file->addAction(QStringLiteral("Open Scan &Results…"), this, &MainWindow::openScanResults)
      ->setObjectName(QStringLiteral("actionOpenScanResults"));
  file->addSeparator();
  buildSaeMenu(file);
  file->addSeparator();
  QAction* quit = file->addAction(QStringLiteral("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Q));
  quit->setObjectName(QStringLiteral("actionQuit"));

  QMenu* edit = menuBar()->addMenu(QStringLiteral("&Edit"));
  // Undo and redo the ablations. In the prompt, Ctrl+Z stays the text's own undo (the field takes
  // the shortcut first); everywhere else it is this one.
  QAction* undo = ablations_->undoStack()->createUndoAction(this, QStringLiteral("&Undo"));
  undo->setShortcut(QKeySequence::Undo);
  undo->setObjectName(QStringLiteral("actionUndo"));
  QAction* redo = ablations_->undoStack()->createRedoAction(this, QStringLiteral("&Redo"));
  redo->setShortcut(QKeySequence::Redo);
  redo->setObjectName(QStringLiteral("actionRedo"));
  edit->addAction(undo);
  edit->addAction(redo);
  edit->addSeparator();
  QAction* clear_ablations = edit->addAction(QStringLiteral("Remove All Ablations"), ablations_, &Ablations::clear);
  clear_ablations->setObjectName(QStringLiteral("actionClearAblations"));

  QMenu* view = menuBar()->addMenu(QStringLiteral("&View"));
  for (int i = 0; i < static_cast<int>(viewRegistry().size()); ++i) {
    QAction* a = view->addAction(viewRegistry()[static_cast<size_t>(i)].menu_text, this,
                                 [this, i] { tabs_->setCurrentIndex(i); });
    if (i < 9) a->setShortcut(QKeySequence(Qt::CTRL | (Qt::Key_1 + i)));
  }
  view->addSeparator();
  auto add_nav = [&](const QString& text, QKeySequence key, std::function<void()> fn) {
    QAction* a = view->addAction(text, this, std::move(fn));
    a->setShortcut(key);
    // Plain arrow keys belong to the text fields while they have focus; elsewhere they move the
    // selection. WindowShortcut + the fields' ShortcutOverride gives exactly that.
    a->setShortcutContext(Qt::WindowShortcut);
  };
  add_nav(QStringLiteral("Previous Head"), QKeySequence(Qt::Key_Left), [this] { selection_->stepHead(-1); });
  add_nav(QStringLiteral("Next Head"), QKeySequence(Qt::Key_Right), [this] { selection_->stepHead(1); });
  add_nav(QStringLiteral("Previous Layer"), QKeySequence(Qt::Key_Up), [this] { selection_->stepLayer(-1); });
  add_nav(QStringLiteral("Next Layer"), QKeySequence(Qt::Key_Down), [this] { selection_->stepLayer(1); });
  add_nav(QStringLiteral("Previous Layer (Page Up)"), QKeySequence(Qt::Key_PageUp), [this] { selection_->stepLayer(-1); });
  add_nav(QStringLiteral("Next Layer (Page Down)"), QKeySequence(Qt::Key_PageDown), [this] { selection_->stepLayer(1); });
  add_nav(QStringLiteral("Previous Position"), QKeySequence(Qt::SHIFT | Qt::Key_Left),
          [this] { selection_->setPosition(selection_->position() - 1); });
  add_nav(QStringLiteral("Next Position"), QKeySequence(Qt::SHIFT | Qt::Key_Right),
          [this] { selection_->setPosition(selection_->position() + 1); });
  view->addSeparator();
  QAction* dock = ablation_dock_->toggleViewAction();
  dock->setText(QStringLiteral("Ablation &Panel"));
  view->addAction(dock);

  QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
  help->addAction(QStringLiteral("&Keyboard Shortcuts"), this, &MainWindow::showShortcuts);
  help->addAction(QStringLiteral("&About HeadScope"), this, &MainWindow::showAbout);
}

void MainWindow::showShortcuts() {
  QStringList titles;
  for (const ViewDescriptor& v : viewRegistry()) titles << v.title;
  showShortcutsDialog(this, titles);
}

void MainWindow::showAbout() {
  QMessageBox::about(this, QStringLiteral("About HeadScope"),
                     QStringLiteral("<h3>HeadScope %1</h3><p>A lab for looking inside transformer language models: "
                                    "attention patterns, what each head adds to the residual stream, and why "
                                    "concatenating heads then projecting equals projecting each head then summing.</p>")
                         .arg(QStringLiteral(HEADSCOPE_VERSION)));
}

}  // namespace hs::ui
