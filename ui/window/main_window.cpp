#include "ui/window/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFrame>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QShortcut>
#include <QSplitter>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QToolButton>
#include <QUndoStack>
#include <QVBoxLayout>

#include <algorithm>
#include <utility>

#include "core/model/architecture.h"
#include "core/model/architecture_text.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/base/warm_heap.h"
#include "ui/controller/ablations.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/window/ablation_panel.h"
#include "ui/window/export_all.h"
#include "ui/window/scan_dialog.h"
#include "ui/window/scan_job.h"
#include "ui/base/figure.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/views/registry.h"
#include "ui/views/view_text.h"
#include "ui/widgets/color_legend.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/widgets/token_strip.h"

namespace hs::ui {
namespace {

constexpr int kMaxRecent = 8;
const char* kExamplePrompt = "The cat sat on the mat. The cat sat on the";

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
  if (pos == 0 && run.run.bos_prepended) text += QStringLiteral("\n(BOS, added before the prompt)");
  return text;
}

}  // namespace

MainWindow::MainWindow(const MainWindowOptions& options, QWidget* parent)
    : QMainWindow(parent), restore_settings_(options.restore_settings) {
  warmGuiHeap(this);
  setObjectName(QStringLiteral("mainWindow"));
  setWindowTitle(QStringLiteral("HeadScope"));
  setAcceptDrops(true);
  controller_ = new AnalysisController(this);
  for (const ViewDescriptor& v : viewRegistry())
    if (v.analysis.compute) controller_->addAnalysis(v.analysis);
  selection_ = new Selection(this);
  ablations_ = new Ablations(this);
  debounce_.setSingleShot(true);
  debounce_.setInterval(kDebounceMs);

  buildCentral();
  buildAblationDock();
  buildMenus();
  buildStatusBar();
  connectEverything();

  QSettings settings;
  if (restore_settings_) {
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    splitter_->restoreState(settings.value(QStringLiteral("window/splitter")).toByteArray());
    head_metrics_->restoreSettings();
  }
  if (!restore_settings_ || settings.value(QStringLiteral("window/geometry")).isNull()) {
    // The size the views are laid out for where the screen allows, else most of the screen.
    QSize size(1600, 1000);
    if (const QScreen* screen = QGuiApplication::primaryScreen()) {
      const QSize avail = screen->availableGeometry().size();
      size = size.boundedTo(QSize(avail.width() * 97 / 100, avail.height() * 95 / 100));
    }
    resize(size);
  }
  if (!restore_settings_ || settings.value(QStringLiteral("window/splitter")).isNull()) {
    const int heads = std::clamp(width() / 5, 240, 340);
    splitter_->setSizes({heads, width() - heads});
  }

  try {
    builtin_dir_ = QString::fromStdString(hs::builtin_model_dir().string());
  } catch (const std::exception& e) {
    builtin_error_ = QString::fromStdString(e.what());
  }
  refreshModelCombo();
  updateRecentMenu();
  for (int i = 0; i < static_cast<int>(viewRegistry().size()); ++i)
    if (viewRegistry()[static_cast<size_t>(i)].id == options.view) tabs_->setCurrentIndex(i);

  for (size_t i = 0; i < views_.size(); ++i)
    if (const auto inputs = options.view_inputs.find(viewRegistry()[i].id); inputs != options.view_inputs.end())
      views_[i]->setViewInputs(inputs->second);
  if (options.layer != 0 || options.head != 0) first_head_ = std::make_pair(options.layer, options.head);
  first_ablations_ = options.ablations;

  prompt_->setPlainText(options.text.isEmpty() ? QString::fromUtf8(kExamplePrompt) : options.text);
  prompt_->moveCursor(QTextCursor::End);
  debounce_.stop();  // the text above is run once the model is in
  const QString start_dir = options.model_dir.isEmpty() ? builtin_dir_ : options.model_dir;
  if (!start_dir.isEmpty()) {
    loadModel(start_dir);
  } else {
    showBanner(QStringLiteral("<b>No model loaded.</b> %1<br>Open a model folder with File › Open Model Folder "
                              "(Ctrl+O), or drop one on this window.")
                   .arg(builtin_error_.toHtmlEscaped()),
               true);
  }
  updateStatus();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildCentral() {
  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);
  layout->setContentsMargins(10, 8, 10, 4);
  layout->setSpacing(6);

  auto* top = new QHBoxLayout;
  top->setSpacing(8);
  auto* model_label = new QLabel(QStringLiteral("&Model:"), central);
  model_combo_ = new QComboBox(central);
  model_combo_->setObjectName(QStringLiteral("modelCombo"));
  model_combo_->setMinimumContentsLength(18);
  model_combo_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  model_label->setBuddy(model_combo_);
  auto* prompt_label = new QLabel(QStringLiteral("&Prompt:"), central);
  prompt_ = new PromptEdit(central);
  prompt_->setObjectName(QStringLiteral("promptEdit"));
  prompt_->setAcceptDrops(false);  // a dropped folder opens a model instead
  prompt_label->setBuddy(prompt_);
  top->addWidget(model_label);
  top->addWidget(model_combo_);
  top->addSpacing(8);
  top->addWidget(prompt_label);
  top->addWidget(prompt_, 1);
  layout->addLayout(top);

  auto* token_row = new QHBoxLayout;
  auto* tokens_label = new QLabel(QStringLiteral("Tokens:"), central);
  tokens_label->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  tokens_label->setContentsMargins(0, 6, 0, 0);
  tokens_ = new TokenStrip;
  tokens_->setObjectName(QStringLiteral("tokenStrip"));
  auto* token_scroll = new QScrollArea(central);
  token_scroll->setObjectName(QStringLiteral("tokenScroll"));
  token_scroll->setWidget(tokens_);
  token_scroll->setWidgetResizable(true);
  token_scroll->setFrameShape(QFrame::NoFrame);
  token_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // As tall as the chips need, up to three rows; longer prompts scroll.
  const int max_strip = 3 * (fontMetrics().height() + 12) + 8;
  token_scroll->setFixedHeight(fontMetrics().height() + 16);
  connect(tokens_, &TokenStrip::contentHeightChanged, token_scroll,
          [token_scroll, max_strip](int h) { token_scroll->setFixedHeight(std::min(h, max_strip)); });
  token_row->addWidget(tokens_label);
  token_row->addWidget(token_scroll, 1);
  layout->addLayout(token_row);

  banner_ = new QLabel(central);
  banner_->setObjectName(QStringLiteral("banner"));
  banner_->setWordWrap(true);
  banner_->setTextFormat(Qt::RichText);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  banner_->hide();
  layout->addWidget(banner_);

  splitter_ = new QSplitter(Qt::Horizontal, central);
  splitter_->setObjectName(QStringLiteral("mainSplitter"));
  splitter_->setChildrenCollapsible(false);
  auto* heads_panel = new QFrame(splitter_);
  heads_panel->setObjectName(QStringLiteral("headsPanel"));
  auto* heads_layout = new QVBoxLayout(heads_panel);
  heads_layout->setContentsMargins(8, 8, 8, 8);
  auto* heads_title = new QLabel(QStringLiteral("Heads"), heads_panel);
  heads_title->setObjectName(QStringLiteral("headsTitle"));
  heads_caption_ = new QLabel(heads_panel);
  heads_caption_->setObjectName(QStringLiteral("sectionCaption"));
  heads_caption_->setWordWrap(true);
  heads_caption_->setText(QStringLiteral("Every head's attention pattern. Click one, or use ←/→ for heads and "
                                         "↑/↓ or Page Up/Down for layers (Esc leaves the prompt)."));
  head_grid_ = new ImageGridView(heads_panel);
  head_grid_->setObjectName(QStringLiteral("headGrid"));
  head_grid_->setMaxCellWidth(110);
  head_metrics_ = new HeadMetricsBar(head_grid_, heads_panel);
  heads_layout->addWidget(heads_title);
  heads_layout->addWidget(heads_caption_);
  heads_layout->addWidget(head_metrics_);
  heads_layout->addWidget(head_grid_);
  auto* legend = new ColorLegend(heads_panel);
  legend->setObjectName(QStringLiteral("headsLegend"));
  heads_layout->addWidget(legend);
  heads_layout->addStretch(1);
  heads_panel->setMinimumWidth(220);

  tabs_ = new QTabWidget(splitter_);
  tabs_->setObjectName(QStringLiteral("viewTabs"));
  tabs_->setDocumentMode(false);
  for (const ViewDescriptor& v : viewRegistry()) {
    AnalysisView* view = v.create(selection_, tabs_);
    views_.push_back(view);
    tabs_->addTab(view, v.title);
  }
  splitter_->addWidget(heads_panel);
  splitter_->addWidget(tabs_);
  splitter_->setStretchFactor(0, 0);
  splitter_->setStretchFactor(1, 1);
  splitter_->setSizes({340, 1260});
  layout->addWidget(splitter_, 1);
  setCentralWidget(central);
}

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

void MainWindow::buildAblationDock() {
  ablation_dock_ = new QDockWidget(QStringLiteral("Ablation"), this);
  ablation_dock_->setObjectName(QStringLiteral("ablationDock"));
  ablation_dock_->setAllowedAreas(Qt::RightDockWidgetArea | Qt::LeftDockWidgetArea | Qt::BottomDockWidgetArea);
  ablation_panel_ = new AblationPanel(ablations_, selection_, ablation_dock_);
  auto* scroll = new QScrollArea(ablation_dock_);
  scroll->setWidget(ablation_panel_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);  // the panel wraps to the dock's width
  scroll->setMinimumWidth(260);
  ablation_dock_->setWidget(scroll);
  addDockWidget(Qt::RightDockWidgetArea, ablation_dock_);
  ablation_dock_->hide();  // shown with the first ablation
}

// The head grid's right-click menu: ablate the head (or the picked heads), or undo its ablation.
void MainWindow::addHeadActions(int index, QMenu* menu) {
  const int n_head = std::max(1, selection_->headCount());
  const int layer = index / n_head, head = index % n_head;
  std::vector<std::pair<int, int>> heads = {{layer, head}};
  // Ctrl+clicked heads: the menu acts on all of them when the clicked one is among them.
  const QList<int> picked = head_grid_->pickedIndices();
  if (picked.size() > 1 && picked.contains(index)) {
    heads.clear();
    for (int i : picked) heads.push_back({i / n_head, i % n_head});
  }
  for (hs::InterventionKind kind : {hs::InterventionKind::Zero, hs::InterventionKind::Mean}) {
    QAction* a = menu->addAction(Ablations::actionText(heads, kind), this, [this, heads, kind] {
      ablations_->add(heads, kind);
      head_grid_->setPickedIndices({});
    });
    a->setObjectName(kind == hs::InterventionKind::Zero ? QStringLiteral("actionZeroAblate")
                                                        : QStringLiteral("actionMeanAblate"));
    a->setToolTip(kind == hs::InterventionKind::Zero
                      ? QStringLiteral("Run the model with these heads' z (hook_z) set to 0")
                      : QStringLiteral("Run the model with these heads' z (hook_z) set to its mean over the prompt's positions"));
  }
  if (ablations_->kindOf(layer, head)) {
    QAction* a = menu->addAction(QStringLiteral("Remove the Ablation of %1").arg(headLabel(layer, head)), this,
                                 [this, layer, head] { ablations_->remove(layer, head); });
    a->setObjectName(QStringLiteral("actionRemoveAblation"));
  }
}

void MainWindow::onAblationsChanged() {
  controller_->setAblations(ablations_->list());
  if (!ablations_->isEmpty() && !ablation_dock_->isVisible() && !ablation_dock_->property("shownOnce").toBool()) {
    ablation_dock_->setProperty("shownOnce", true);
    ablation_dock_->show();
    // Wide enough for the before/after table, about a fifth of the window; the room comes
    // from the views, not from the heads.
    const int heads = splitter_->sizes().value(0);
    resizeDocks({ablation_dock_}, {std::clamp(width() / 5, 280, 340)}, Qt::Horizontal);
    QTimer::singleShot(0, this, [this, heads] {
      const QList<int> sizes = splitter_->sizes();
      if (sizes.size() == 2 && heads > 0) splitter_->setSizes({heads, sizes[0] + sizes[1] - heads});
    });
  }
  debounce_.stop();
  controller_->requestRun(prompt_->toPlainText());
  updateStatus();
}

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

void MainWindow::loadModel(const QString& dir) { controller_->loadModel(dir); }

void MainWindow::openModelFolder() {
  QSettings settings;
  const QString start = settings.value(QStringLiteral("models/lastFolder"), QDir::homePath()).toString();
  const QString dir = QFileDialog::getExistingDirectory(
      this, QStringLiteral("Open Model Folder: a Hugging Face GPT-2, Llama, Qwen2 or Pythia folder"), start);
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
  if (QDir(dir) != QDir(builtin_dir_)) rememberRecent(dir);
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
  box->setInformativeText(message + (have_model ? QStringLiteral("\n\nThe previous model (%1) is still loaded.")
                                                      .arg(QString::fromStdString(controller_->model()->name()))
                                                : QString()));
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setWindowModality(Qt::WindowModal);
  load_error_box_ = box;
  box->open();
  if (!have_model)
    showBanner(QStringLiteral("<b>No model loaded.</b> %1").arg(message.toHtmlEscaped()), true);
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
  const bool shape_changed = selection_->layerCount() != n_layer || selection_->headCount() != n_head;
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
  if (shape_changed) {
    // Room for thumbnails big enough to read, with their labels, up to a share of the window; a
    // model with many heads gets smaller ones.
    const int wanted = n_head * 48 + 60;
    const int heads_width = std::clamp(wanted, 240, std::max(240, width() * 3 / 10));
    const QList<int> sizes = splitter_->sizes();
    if (sizes.size() == 2 && std::abs(sizes[0] - heads_width) > 8)
      splitter_->setSizes({heads_width, sizes[0] + sizes[1] - heads_width});
  }
  head_grid_->setSelectedIndex(selection_->layer() * n_head + selection_->head());

  for (AnalysisView* v : views_) v->setRun(run);
  ablation_panel_->setRun(run);
  requestAnalyses();
  updateStatus();
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
    const AnalysisKey key = keyFromSelection(*selection_, d.analysis.reads);
    if (asked_[i].run_job == run->job && asked_[i].key == key) continue;
    if (!shown && !controller_->isCheap(d.id) && !controller_->hasReady(d.id, key)) continue;
    asked_[i] = {run->job, key};
    controller_->request(d.id, key);
  }
}

AnalysisView* MainWindow::view(const QString& id) const {
  for (size_t i = 0; i < views_.size(); ++i)
    if (viewRegistry()[i].id == id) return views_[i];
  return nullptr;
}

QObject* MainWindow::viewObject(const QString& id) const { return view(id); }

void MainWindow::onRunFailed(const QString& message) {
  showBanner(QStringLiteral("<b>Could not run the model:</b> %1").arg(message.toHtmlEscaped()), true);
  banner_->setProperty("source", QStringLiteral("run"));
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
  const size_t ablated = run_->ablations().size();
  status_ablations_->setText(ablated == 0 ? QString()
                                          : QStringLiteral("· %1 head%2 ablated").arg(ablated).arg(ablated == 1 ? "" : "s"));
}

void MainWindow::refreshModelCombo() {
  QSignalBlocker block(model_combo_);
  model_combo_->clear();
  const auto& model = controller_->model();
  const QString current = model ? QDir(QString::fromStdString(model->dir().string())).absolutePath() : QString();
  if (!builtin_dir_.isEmpty())
    model_combo_->addItem(QStringLiteral("%1 (built-in)").arg(QFileInfo(builtin_dir_).fileName()),
                          QDir(builtin_dir_).absolutePath());
  const QStringList recent = QSettings().value(QStringLiteral("models/recent")).toStringList();
  for (const QString& dir : recent)
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

void MainWindow::rememberRecent(const QString& dir) {
  QSettings settings;
  QStringList recent = settings.value(QStringLiteral("models/recent")).toStringList();
  const QString path = QDir(dir).absolutePath();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue(QStringLiteral("models/recent"), recent);
  updateRecentMenu();
}

void MainWindow::updateRecentMenu() {
  recent_menu_->clear();
  const QStringList recent = QSettings().value(QStringLiteral("models/recent")).toStringList();
  for (const QString& dir : recent)
    recent_menu_->addAction(QDir::toNativeSeparators(dir), this, [this, dir] { loadModel(dir); });
  recent_menu_->setEnabled(!recent.isEmpty());
  if (!recent.isEmpty()) {
    recent_menu_->addSeparator();
    recent_menu_->addAction(QStringLiteral("Clear Recent Models"), this, [this] {
      QSettings().remove(QStringLiteral("models/recent"));
      updateRecentMenu();
      refreshModelCombo();
    });
  }
}

void MainWindow::exportCurrentView() {
  auto* source = qobject_cast<AnalysisView*>(tabs_->currentWidget());
  if (!run_ || !source) {
    statusBar()->showMessage(QStringLiteral("Nothing to export yet: type a prompt first."), 4000);
    return;
  }
  saveFigureInteractively(this, *source, FigureFormat::Png, 2.0);
}

void MainWindow::exportAll() {
  if (!run_) {
    statusBar()->showMessage(QStringLiteral("Nothing to export yet: type a prompt first."), 4000);
    return;
  }
  if (export_job_) {
    statusBar()->showMessage(QStringLiteral("An export is already running."), 4000);
    return;
  }
  QSettings settings;
  const QString start = settings.value(QStringLiteral("export/lastFolder"), QDir::homePath()).toString();
  const QString dir = QFileDialog::getExistingDirectory(this, QStringLiteral("Export All Views To"), start);
  if (dir.isEmpty()) return;
  settings.setValue(QStringLiteral("export/lastFolder"), dir);
  ExportAllJob::Options options;
  options.out_dir = dir;
  options.scale = 2.0;
  options.position = selection_->position();
  options.target = selection_->target();
  for (size_t i = 0; i < views_.size(); ++i)
    if (const ViewInputs inputs = views_[i]->viewInputs(); !inputs.isEmpty())
      options.view_inputs[viewRegistry()[i].id] = inputs;
  export_job_ = std::make_unique<ExportAllJob>(run_, options);
  progress_->setValue(0);
  progress_->setFormat(QStringLiteral("%p%"));
  progress_->show();
  connect(export_job_.get(), &ExportAllJob::progress, this, [this](int done, int total, const QString& name) {
    progress_->setValue(total > 0 ? done * 1000 / total : 0);
    status_busy_->setText(QStringLiteral("Exporting %1 (%2 of %3)").arg(name).arg(done).arg(total));
  });
  connect(export_job_.get(), &ExportAllJob::finished, this, [this](bool ok, const QString& message) {
    progress_->hide();
    status_busy_->clear();
    if (ok) statusBar()->showMessage(message, 8000);
    else QMessageBox::warning(this, QStringLiteral("Export failed"), message);
    export_job_.release()->deleteLater();
  });
  export_job_->start();
}

void MainWindow::scanDataSet() {
  if (!controller_->model()) {
    statusBar()->showMessage(QStringLiteral("No model yet: wait for it to load, or open one."), 4000);
    return;
  }
  if (scan_job_) {
    statusBar()->showMessage(QStringLiteral("A scan is already running (Cancel Scan in the status bar stops it)."), 4000);
    return;
  }
  ScanDialog dialog(controller_->model()->config().n_ctx, this);
  if (dialog.exec() != QDialog::Accepted) return;
  startScan(dialog.options());
}

void MainWindow::startScan(const hs::ScanOptions& options) {
  scan_job_ = std::make_unique<ScanJob>(controller_->model(), options);
  progress_->setValue(0);
  progress_->setFormat(QStringLiteral("%p%"));
  progress_->show();
  scan_cancel_->show();
  scan_cancel_->setEnabled(true);
  status_busy_->setText(QStringLiteral("Scanning the data set…"));
  connect(scan_cancel_, &QToolButton::clicked, scan_job_.get(), [this] {
    scan_cancel_->setEnabled(false);
    status_busy_->setText(QStringLiteral("Stopping the scan after this prompt…"));
    scan_job_->cancel();
  });
  connect(scan_job_.get(), &ScanJob::progress, this, [this](qint64 done, qint64 total) {
    progress_->setValue(total > 0 ? static_cast<int>(done * 1000 / total) : 0);
    if (scan_cancel_->isEnabled())
      status_busy_->setText(QStringLiteral("Scanning the data set: %1 of %2 lines").arg(done).arg(total));
  });
  connect(scan_job_.get(), &ScanJob::finished, this,
          [this](bool ok, bool cancelled, const QString& message, std::shared_ptr<const hs::ScanState> state) {
            progress_->hide();
            scan_cancel_->hide();
            status_busy_->clear();
            scan_job_.release()->deleteLater();
            if (!ok) {
              QMessageBox::warning(this, QStringLiteral("Scan failed"), message);
              return;
            }
            if (cancelled) {
              statusBar()->showMessage(QStringLiteral("Scan cancelled; the head grid keeps what it showed."), 8000);
              return;
            }
            for (HeadMetricValues& v : ScanJob::headMetricValues(*state)) head_metrics_->setExternalValues(std::move(v));
            head_metrics_->setMetricId(QStringLiteral("induction_dataset"));
            int64_t bad = 0;
            for (const auto& [reason, b] : state->bad) bad += b.count;
            statusBar()->showMessage(QStringLiteral("Scanned %1 prompts (%2 bad lines skipped): the head grid shows "
                                                    "the data set's mean induction score; Scores: chooses another.")
                                         .arg(state->prompts)
                                         .arg(bad),
                                     15000);
          });
  scan_job_->start();
}

void MainWindow::showShortcuts() {
  QStringList keys, titles;
  for (size_t i = 0; i < viewRegistry().size() && i < 9; ++i) {
    keys << QString::number(i + 1);
    titles << viewRegistry()[i].title;
  }
  const QString viewShortcuts = QStringLiteral("Ctrl+") + keys.join(QStringLiteral(", "));
  const QString viewTitles = titles.join(QStringLiteral(", "));
  QMessageBox::information(
      this, QStringLiteral("Keyboard Shortcuts"),
      QStringLiteral("<table cellpadding=3>"
                     "<tr><td><b>Enter</b></td><td>run the prompt now (it also runs as you type)</td></tr>"
                     "<tr><td><b>Shift+Enter</b></td><td>new line in the prompt</td></tr>"
                     "<tr><td><b>Esc</b></td><td>leave the prompt, so the arrow keys move the selection</td></tr>"
                     "<tr><td><b>← / →</b></td><td>previous / next head</td></tr>"
                     "<tr><td><b>↑ / ↓, Page Up / Page Down</b></td><td>previous / next layer</td></tr>"
                     "<tr><td><b>Shift+← / Shift+→</b></td><td>previous / next position</td></tr>"
                     "<tr><td><b>%1</b></td><td>%2</td></tr>"
                     "<tr><td><b>Ctrl+O</b></td><td>open a model folder</td></tr>"
                     "<tr><td><b>Ctrl+E</b></td><td>export the current view (PNG, 2×)</td></tr>"
                     "<tr><td><b>Ctrl+Shift+E</b></td><td>export every view</td></tr>"
                     "<tr><td><b>Ctrl+Q</b></td><td>quit</td></tr></table>"
                     "<p>Arrow keys move the selection when the prompt does not have the focus "
                     "(press Esc or click a view).</p>")
          .arg(viewShortcuts, viewTitles));
}

void MainWindow::showAbout() {
  QMessageBox::about(this, QStringLiteral("About HeadScope"),
                     QStringLiteral("<h3>HeadScope %1</h3><p>A lab for looking inside transformer language models: "
                                    "attention patterns, what each head adds to the residual stream, and why "
                                    "concatenating heads then projecting equals projecting each head then summing.</p>")
                         .arg(QStringLiteral(HEADSCOPE_VERSION)));
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  if (restore_settings_) {
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/splitter"), splitter_->saveState());
    head_metrics_->saveSettings();
  }
  QMainWindow::closeEvent(event);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  const QList<QUrl> urls = event->mimeData()->urls();
  if (urls.size() != 1 || !urls.front().isLocalFile()) return;
  // A model folder, or a llama2.c checkpoint file (its tokenizer beside it).
  const QFileInfo info(urls.front().toLocalFile());
  if (info.isDir() || (info.isFile() && info.suffix().compare(QStringLiteral("bin"), Qt::CaseInsensitive) == 0))
    event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QList<QUrl> urls = event->mimeData()->urls();
  if (urls.isEmpty()) return;
  event->acceptProposedAction();
  loadModel(urls.front().toLocalFile());
}

}  // namespace hs::ui
