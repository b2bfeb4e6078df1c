#include "ui/views/attention_view.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QShortcut>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <limits>
#include <numeric>

#include "ui/controller/selection.h"
#include "ui/style/colormap.h"
#include "ui/views/head_overview.h"
#include "ui/views/view_text.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"

namespace hs::ui {

ViewDescriptor AttentionView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("attention");
  d.title = QStringLiteral("Attention");
  d.menu_text = QStringLiteral("&Attention");
  d.help = QStringLiteral("each head's attention pattern, and an overview of all heads");
  d.export_size = QSize(1200, 820);
  d.analysis.id = d.id;
  d.analysis.reads = kReadsLayer | kReadsHead;
  d.analysis.compute = [](const RunResult& run, const AnalysisKey& key) {
    auto result = std::make_shared<AttentionPatternResult>();
    result->cells = patternCells(run, key.layer, key.head);
    return std::shared_ptr<ViewResult>(std::move(result));
  };
  d.create = [](Selection* selection, QWidget* parent) { return new AttentionView(selection, parent); };
  return d;
}

AttentionView::AttentionView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("attentionView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(4);
  title_ = new QLabel(this);
  title_->setObjectName(QStringLiteral("viewTitle"));
  summary_ = new QLabel(this);
  summary_->setObjectName(QStringLiteral("attentionSummary"));
  // One line that changes with every keystroke, and a note that never does: a word-wrapped rich
  // text label lays its document out again at each new text, several times per relayout.
  summary_->setTextFormat(Qt::RichText);
  summary_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  note_ = new QLabel(QStringLiteral("Rows sum to 1; hatched cells are later positions the head cannot see. "
                                    "Click a row to select that position."),
                     this);
  note_->setObjectName(QStringLiteral("attentionNote"));
  note_->setWordWrap(true);
  note_->setStyleSheet(QStringLiteral("color: #666"));
  heatmap_ = new HeatmapView(this);
  heatmap_->setObjectName(QStringLiteral("attentionHeatmap"));
  heatmap_->setColorMap(ColorMap::Sequential);
  heatmap_->setRangeMode(HeatmapView::RangeMode::Fixed, 0.0, 1.0);
  heatmap_->setAxisTitles(QStringLiteral("query position (reads)"), QStringLiteral("key position (is read)"));
  heatmap_->setColorScaleTitle(QStringLiteral("attention weight"));
  layout->addWidget(title_);
  layout->addWidget(summary_);
  layout->addWidget(note_);
  // Long prompts: the pattern zooms (wheel) and pans (drag); this line says what is shown.
  heatmap_->setPositionZoom(true);
  auto* zoom_row = new QHBoxLayout;
  zoom_row->setSpacing(8);
  zoom_caption_ = new QLabel(this);
  zoom_caption_->setObjectName(QStringLiteral("attentionZoomCaption"));
  zoom_caption_->setStyleSheet(QStringLiteral("color: #666"));
  reset_zoom_ = new QPushButton(QStringLiteral("Reset Zoom"), this);
  reset_zoom_->setObjectName(QStringLiteral("attentionResetZoom"));
  reset_zoom_->setToolTip(QStringLiteral("Show every position again (also: double-click the pattern, or Ctrl+0).\n"
                                         "Mouse wheel over the pattern zooms in around the pointer; drag to pan."));
  reset_zoom_->setFocusPolicy(Qt::NoFocus);
  reset_zoom_->setEnabled(false);
  connect(reset_zoom_, &QPushButton::clicked, heatmap_, &HeatmapView::resetZoom);
  auto* reset_shortcut = new QShortcut(QKeySequence(QStringLiteral("Ctrl+0")), this);
  reset_shortcut->setContext(Qt::WindowShortcut);
  connect(reset_shortcut, &QShortcut::activated, this, [this] {
    if (isVisible()) heatmap_->resetZoom();
  });
  connect(heatmap_, &HeatmapView::zoomChanged, this, &AttentionView::updateZoomCaption);
  zoom_row->addWidget(zoom_caption_, 1);
  zoom_row->addWidget(reset_zoom_);
  layout->addLayout(zoom_row);
  auto* row = new QHBoxLayout;
  row->setSpacing(12);
  row->addWidget(heatmap_, 1);
  // Beside the pattern: the selected query's row as bars, easier to read than colours.
  side_ = new QWidget(this);
  auto* side_layout = new QVBoxLayout(side_);
  side_layout->setContentsMargins(0, 0, 0, 0);
  row_caption_ = new QLabel(side_);
  row_caption_->setObjectName(QStringLiteral("sectionCaption"));
  row_caption_->setWordWrap(true);
  row_bars_ = new BarChartView(side_);
  row_bars_->setObjectName(QStringLiteral("attentionRowBars"));
  row_bars_->setValueAxisTitle(QStringLiteral("attention weight"));
  side_layout->addWidget(row_caption_);
  side_layout->addWidget(row_bars_, 1);
  row->addWidget(side_, 0);
  layout->addLayout(row, 1);

  heatmap_->setTooltipFormatter([this](int row, int col, float v) -> QString {
    if (!run_) return {};
    const QString q = tokenAt(run_->labels.value(row), row);
    const QString k = tokenAt(run_->labels.value(col), col);
    if (col > row) return QStringLiteral("query %1 ← key %2: masked (a later position)").arg(q, k);
    return QStringLiteral("query %1 ← key %2: %3").arg(q, k, QString::number(v, 'f', 2));
  });
  connect(heatmap_, &HeatmapView::cellClicked, this, [this](int row, int) { selection_->setPosition(row); });
  connect(heatmap_, &HeatmapView::cellHovered, this, [this](int row, int) { selection_->setHoverPosition(row); });
  connect(selection_, &Selection::headChanged, this, [this] { refresher_->request(); });
  // While a refresh is owed the heatmap holds an older run; the refresh draws the highlights.
  connect(selection_, &Selection::positionChanged, this, [this](int pos) {
    if (refresher_->pending()) return;
    heatmap_->setHighlightedRow(pos);
    updateSummary();
  });
  connect(row_bars_, &BarChartView::barHovered, this, [this](int key) { selection_->setHoverPosition(key); });
  connect(selection_, &Selection::hoverChanged, this, [this](int pos) {
    if (!refresher_->pending()) heatmap_->setHoverRow(pos);
  });
  refresher_ = new RefreshWhenShown(this, [this] { refresh(); });
  refresh();
}

std::shared_ptr<const HeatmapCells> AttentionView::patternCells(const RunResult& run, int layer, int head) {
  const int n = run.n_pos();
  layer = std::clamp(layer, 0, run.n_layer() - 1);
  head = std::clamp(head, 0, run.n_head() - 1);
  // [query_pos, key_pos]: the row of query q holds keys 0..q; later keys are masked, not zero.
  // Read from the cache where it is, not copied into a matrix.
  auto row = [cache = run.run.cache, layer, head](int q) {
    const hs::ConstRowVectorRef keys = cache->pattern_row(layer, head, q);
    return std::span<const float>(keys.data(), static_cast<size_t>(q) + 1);
  };
  return HeatmapView::prepareCells(n, n, row, ColorMap::Sequential, HeatmapView::RangeMode::Fixed, 0.0, 1.0);
}

void AttentionView::setRun(std::shared_ptr<const RunResult> run) {
  run_ = std::move(run);
  // The zoom is kept while the prompt changes (a prompt that grows keeps showing the same
  // positions), not across models.
  if (run_ && zoom_model_.lock() != run_->run.model) {
    heatmap_->resetZoom();
    zoom_model_ = run_->run.model;
  }
  shown_layer_ = shown_head_ = -1;
  prepared_.reset();  // it holds its run, and with it that run's whole cache
  // The window hands over the pattern computed with this run right after this call, in the same
  // turn of the event loop; draw then. If none comes, draw from the run once the turn is over.
  refresh_owed_ = true;
  QTimer::singleShot(0, this, [this] {
    if (!refresh_owed_) return;
    refresh_owed_ = false;
    refresher_->request();
  });
}

void AttentionView::setResult(std::shared_ptr<const ViewResult> result) {
  auto pattern = std::dynamic_pointer_cast<const AttentionPatternResult>(result);
  if (!pattern || !run_ || pattern->run_job != run_->job) return;
  prepared_ = std::move(pattern);
  if (prepared_->key.layer == shown_layer_ && prepared_->key.head == shown_head_) return;  // drawn already
  refresh_owed_ = false;
  refresher_->request();
}

AttentionView::~AttentionView() = default;

void AttentionView::refresh() { showHead(selection_->layer(), selection_->head()); }

std::vector<ExportFigure> AttentionView::exportFigures(const RunResult& run) {
  std::vector<ExportFigure> figures;
  figures.push_back({std::nullopt, [this]() -> ExportFigure::Target {
                       if (!run_) return {};
                       // As tall as the grid needs at this width, no blank band below it.
                       constexpr int kWidth = 900, kMaxHeight = 1400;
                       overview_ = std::make_unique<ImageGridView>();
                       overview_->setAttribute(Qt::WA_DontShowOnScreen);
                       overview_->setMaxCellWidth(96);
                       showHeadOverview(*overview_, *run_, false);
                       const QSize size(kWidth, std::min(kMaxHeight, overview_->heightForWidth(kWidth) + 8));
                       overview_->resize(size);
                       overview_->show();
                       return {overview_.get(), size};
                     }});
  for (int l = 0; l < run.n_layer(); ++l)
    for (int h = 0; h < run.n_head(); ++h)
      figures.push_back({std::nullopt, [this, l, h]() -> ExportFigure::Target {
                           showHead(l, h);
                           heatmap_->replotNow();
                           return {heatmap_, kPatternFigureSize};
                         }});
  return figures;
}

void AttentionView::showHead(int layer, int head) {
  if (!run_) {
    title_->setText(QStringLiteral("Attention pattern"));
    summary_->setText(QStringLiteral("Type a prompt to see which earlier tokens each head reads from."));
    heatmap_->clear();
    return;
  }
  layer = std::clamp(layer, 0, run_->n_layer() - 1);
  head = std::clamp(head, 0, run_->n_head() - 1);
  if (layer != shown_layer_ || head != shown_head_) {
    shown_layer_ = layer;
    shown_head_ = head;
    const bool ready = prepared_ && prepared_->run_job == run_->job && prepared_->key.layer == layer &&
                       prepared_->key.head == head;
    heatmap_->setCells(ready ? prepared_->cells : patternCells(*run_, layer, head));
    heatmap_->setRowLabels(run_->labels);
    heatmap_->setColumnLabels(run_->labels);
    heatmap_->setHighlightedRow(selection_->position());
    heatmap_->setHoverRow(selection_->hoverPosition());
    const QString label = headLabel(layer, head);
    title_->setText(QStringLiteral("<b>%1</b> &nbsp;attention pattern").arg(label));
    heatmap_->setFigureText({label + " attention pattern", runSubtitle(*run_)}, "attention_" + label);
  }
  updateSummary();
  updateZoomCaption();
}

void AttentionView::updateZoomCaption() {
  const int n = run_ ? run_->n_pos() : 0;
  reset_zoom_->setEnabled(heatmap_->isZoomed());
  if (n == 0) {
    zoom_caption_->clear();
  } else if (heatmap_->isZoomed()) {
    const auto [first, last] = heatmap_->visiblePositions();
    zoom_caption_->setText(QStringLiteral("Showing positions %1–%2 of %3 · drag to pan, wheel to zoom, "
                                          "double-click or Ctrl+0 to show all")
                               .arg(first).arg(last).arg(n));
  } else {
    zoom_caption_->setText(QStringLiteral("All %1 positions · mouse wheel over the pattern zooms in").arg(n));
  }
}

void AttentionView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  QTimer::singleShot(0, this, &AttentionView::keepCellsSquare);
}

// Attention patterns read best with square cells: the heatmap takes the width its height allows
// and the row profile gets the rest.
void AttentionView::keepCellsSquare() {
  const QRect cells = heatmap_->cellArea();
  if (cells.width() < 20 || cells.height() < 20) return;
  const int extra = heatmap_->width() - cells.width();  // labels and the colour scale
  const int total = width() - 40;
  const int wanted = std::clamp(cells.height() + extra, 320, std::max(320, total - 260));
  side_->setFixedWidth(std::max(220, total - wanted));
}

void AttentionView::updateRowProfile() {
  if (!run_ || shown_layer_ < 0) return;
  const int q = std::clamp(selection_->position(), 0, run_->n_pos() - 1);
  const hs::ConstRowVectorRef row = run_->run.cache->pattern_row(shown_layer_, shown_head_, q);
  std::vector<BarChartView::Bar> bars;
  bars.reserve(static_cast<size_t>(q + 1));
  for (int k = 0; k <= q; ++k) bars.push_back({tokenAt(run_->labels.value(k), k), row[k], QColor(0x22, 0x5e, 0xa8)});
  row_bars_->setBars(std::move(bars));
  const QString label = headLabel(shown_layer_, shown_head_);
  const QString query = tokenAt(run_->labels.value(q), q);
  row_caption_->setText(QStringLiteral("What <b>%1</b> reads at query %2: one row of the pattern.")
                            .arg(label, query.toHtmlEscaped()));
  row_bars_->setFigureText({QStringLiteral("%1 attention from %2").arg(label, query), runSubtitle(*run_)},
                           QStringLiteral("attention_row_%1_pos%2").arg(label).arg(q));
}

void AttentionView::updateSummary() {
  updateRowProfile();
  if (!run_ || shown_layer_ < 0) return;
  const int q = std::clamp(selection_->position(), 0, run_->n_pos() - 1);
  const hs::ConstRowVectorRef row = run_->run.cache->pattern_row(shown_layer_, shown_head_, q);
  std::vector<int> keys(static_cast<size_t>(q + 1));
  std::iota(keys.begin(), keys.end(), 0);
  const size_t shown = std::min<size_t>(3, keys.size());
  std::partial_sort(keys.begin(), keys.begin() + static_cast<long>(shown), keys.end(),
                    [&](int a, int b) { return row[a] > row[b]; });
  QStringList parts;
  for (size_t i = 0; i < shown; ++i) {
    const int k = keys[i];
    parts << QStringLiteral("%1 <span style='color:#666'>%2</span>")
                 .arg(tokenAt(run_->labels.value(k), k).toHtmlEscaped(), QString::number(row[k], 'f', 2));
  }
  summary_->setText(QStringLiteral("Query <b>%1</b> reads most from: %2.")
                        .arg(tokenAt(run_->labels.value(q), q).toHtmlEscaped(), parts.join(QStringLiteral(", "))));
}

FigureText AttentionView::figureText() const {
  if (!run_ || shown_layer_ < 0) return {QStringLiteral("Attention pattern"), {}};
  const int q = std::clamp(selection_->position(), 0, run_->n_pos() - 1);
  // Exports show what the screen shows: zoomed in, the title says which positions.
  const QString range = heatmap_->zoomCaption();
  return {QStringLiteral("%1 attention pattern, query %2%3")
              .arg(headLabel(shown_layer_, shown_head_), tokenAt(run_->labels.value(q), q),
                   range.isEmpty() ? QString() : QStringLiteral(", ") + range),
          runSubtitle(*run_)};
}

QString AttentionView::figureFileStem() const {
  return QStringLiteral("attention_view_%1").arg(headLabel(std::max(0, shown_layer_), std::max(0, shown_head_)));
}

}  // namespace hs::ui
