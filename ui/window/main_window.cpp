// The window's construction and layout: the model and prompt row, the tokens, the heads panel
// and the view tabs; its settings; drops. The other main_window_*.cpp files hold the rest, one
// part each.
#include "ui/window/main_window.h"

#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileInfo>
#include <QFrame>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QMimeData>
#include <QScreen>
#include <QScrollArea>
#include <QComboBox>
#include <QSettings>
#include <QSplitter>
#include <QTabWidget>
#include <QVBoxLayout>

#include <algorithm>

#include "core/session/session.h"
#include "ui/base/warm_heap.h"
#include "ui/controller/ablations.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/views/head_metrics_bar.h"
#include "ui/views/registry.h"
#include "ui/widgets/color_legend.h"
#include "ui/widgets/grid_scroll_area.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/widgets/token_strip.h"
#include "ui/window/export_all.h"
#include "ui/window/scan_job.h"

namespace hs::ui {
namespace {

const char* kExamplePrompt = "The cat sat on the mat. The cat sat on the";

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
  const bool keep_last = options.keep_last.value_or(
      restore_settings_ && settings.value(QStringLiteral("prompt/keep_last"), false).toBool());
  controller_->setKeepLast(keep_last);
  keep_choice_->setCurrentIndex(keep_last ? 1 : 0);
  connect(keep_choice_, &QComboBox::currentIndexChanged, this, [this](int index) {
    controller_->setKeepLast(keep_choice_->itemData(index).toBool());
    if (restore_settings_) QSettings().setValue(QStringLiteral("prompt/keep_last"), controller_->keepLast());
    controller_->requestRun(prompt_->toPlainText());
  });
  if (restore_settings_) {
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    heads_width_ = std::max(0, settings.value(QStringLiteral("window/headsWidth"), 0).toInt());
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
  splitter_->setSizes({heads_width_ > 0 ? heads_width_ : 340, width()});
  // Only a drag chooses the width; whatever else resizes the splitter (a dock, the window, a
  // view's minimum) is followed by giving the panel its width back where there is room.
  connect(splitter_, &QSplitter::splitterMoved, this, [this] {
    heads_width_ = splitter_->sizes().value(0);
    if (restore_settings_) QSettings().setValue(QStringLiteral("window/headsWidth"), heads_width_);
  });
  heads_width_timer_.setSingleShot(true);
  heads_width_timer_.setInterval(0);
  connect(&heads_width_timer_, &QTimer::timeout, this, &MainWindow::applyHeadsWidth);
  splitter_->installEventFilter(this);

  try {
    builtin_dir_ = QString::fromStdString(hs::builtin_model_dir().string());
  } catch (const std::exception& e) {
    builtin_error_ = QString::fromStdString(e.what());
  }
  refreshModelCombo();
  updateRecentMenu();
  for (int i = 0; i < static_cast<int>(viewRegistry().size()); ++i)
    if (viewRegistry()[static_cast<size_t>(i)].id == options.view) tabs_->setCurrentIndex(i);
  if (options.view == QLatin1String(kAblationViewId)) {
    ablation_dock_->setProperty("shownOnce", true);  // no second resize with the first ablation
    ablation_dock_->show();
    resizeDocks({ablation_dock_}, {std::clamp(width() / 5, 280, 340)}, Qt::Horizontal);
  }

  for (size_t i = 0; i < views_.size(); ++i)
    if (const auto inputs = options.view_inputs.find(viewRegistry()[i].id); inputs != options.view_inputs.end())
      views_[i]->setViewInputs(inputs->second);
  if (options.layer != 0 || options.head != 0) first_head_ = std::make_pair(options.layer, options.head);
  first_ablations_ = options.ablations;
  pending_sae_edits_ = options.sae_edits;
  sae_loads_before_edits_ = static_cast<int>(options.sae_dirs.size());
  for (const QString& dir : options.sae_dirs) loadSaeFolder(dir);  // once the model is in
  for (const QString& dir : options.dashboard_dirs) loadDashboardFolder(dir);
  loadOwnDashboards();

  prompt_->setPlainText(options.text.isEmpty() ? QString::fromUtf8(kExamplePrompt) : options.text);
  prompt_->moveCursor(QTextCursor::End);
  debounce_.stop();  // the text above is run once the model is in
  const QString start_dir = options.model_dir.isEmpty() ? builtin_dir_ : options.model_dir;
  // Read beside the model's load; it is shown once a run of the model that made it is in.
  if (!options.scan_results.isEmpty()) openScanResultsFile(options.scan_results);
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
  head_grid_ = new ImageGridView;
  head_grid_->setObjectName(QStringLiteral("headGrid"));
  head_grid_->setMaxCellWidth(110);
  // Thumbnails stay big enough for their labels and badges; a smaller panel scrolls.
  head_grid_->setMinCellWidth(ImageGridView::kLabelledCellWidth);
  head_grid_->setColorKeys({}, false);  // on screen the key is the widget below; exports draw it
  auto* grid_scroll = new GridScrollArea(head_grid_, heads_panel);
  grid_scroll->setObjectName(QStringLiteral("headGridScroll"));
  head_metrics_ = new HeadMetricsBar(head_grid_, heads_panel);
  heads_layout->addWidget(heads_title);
  heads_layout->addWidget(heads_caption_);
  heads_layout->addWidget(head_metrics_);
  heads_layout->addWidget(grid_scroll);
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

AnalysisView* MainWindow::view(const QString& id) const {
  for (size_t i = 0; i < views_.size(); ++i)
    if (viewRegistry()[i].id == id) return views_[i];
  return nullptr;
}

QObject* MainWindow::viewObject(const QString& id) const { return view(id); }

void MainWindow::applyHeadsWidth() {
  const QList<int> sizes = splitter_->sizes();
  if (heads_width_ <= 0 || sizes.size() != 2 || sizes[0] == heads_width_) return;
  const int total = sizes[0] + sizes[1];
  // QSplitter keeps each side at least at its minimum: the views' wins when both cannot be had.
  const int heads = std::min(heads_width_, std::max(splitter_->widget(0)->minimumSizeHint().width(),
                                                    total - splitter_->widget(1)->minimumSizeHint().width()));
  if (heads != sizes[0]) splitter_->setSizes({heads, total - heads});
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
  if (watched == splitter_ && (event->type() == QEvent::Resize || event->type() == QEvent::LayoutRequest))
    heads_width_timer_.start();
  return QMainWindow::eventFilter(watched, event);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  if (restore_settings_) {
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    if (heads_width_ > 0) settings.setValue(QStringLiteral("window/headsWidth"), heads_width_);
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
