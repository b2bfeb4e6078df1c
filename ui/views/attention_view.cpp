#include "ui/views/attention_view.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QButtonGroup>
#include <QPushButton>
#include <QRadioButton>
#include <QShortcut>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/analysis/attribution.h"
#include "core/model/backward.h"
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

namespace {

// Layer l's sliding window (0: global), as the forward pass applies it (core attention_window).
int layerWindow(const RunResult& run, int layer) { return hs::attention_window(run.run.cache->config(), layer); }

// "sliding window 4096" / "global" for the title, as Hugging Face's layer_types names them.
QString windowText(int window) {
  return window > 0 ? QStringLiteral("sliding window %1").arg(window) : QStringLiteral("global");
}

}  // namespace

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
    if (key.params == QStringList{kEdgeParams}) return std::shared_ptr<ViewResult>(edgeCells(run, key));
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
  // The two modes: what the head does (its pattern), and what its edges do for the target.
  pattern_button_ = new QRadioButton(QStringLiteral("Pattern"), this);
  pattern_button_->setObjectName(QStringLiteral("attentionModePattern"));
  pattern_button_->setToolTip(QStringLiteral("The attention weights A[query, key]."));
  edge_button_ = new QRadioButton(QStringLiteral("Edge attribution"), this);
  edge_button_->setObjectName(QStringLiteral("attentionModeEdges"));
  edge_button_->setToolTip(QStringLiteral("A[query, key] · ∂M/∂A[query, key]: each edge's first-order share of the "
                                          "metric the Attribution view explains (the target's logit at the selected "
                                          "position, or its logit difference)."));
  pattern_button_->setChecked(true);
  auto* modes = new QButtonGroup(this);
  modes->addButton(pattern_button_);
  modes->addButton(edge_button_);
  connect(edge_button_, &QRadioButton::toggled, this,
          [this](bool on) { setMode(on ? Mode::EdgeAttribution : Mode::Pattern); });
  zoom_row->addWidget(pattern_button_);
  zoom_row->addWidget(edge_button_);
  zoom_row->addSpacing(12);
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
    if (shown_layer_ >= 0) {
      const int window = layerWindow(*run_, shown_layer_);
      if (col < hs::first_key(window, row))
        return QStringLiteral("query %1 ← key %2: masked (outside the sliding window of %3 keys)").arg(q, k).arg(window);
    }
    if (shown_edges_ && shown_layer_ >= 0)
      return QStringLiteral("query %1 ← key %2: A = %3, A·∂M/∂A = %4")
          .arg(q, k, QString::number(run_->plainCache()->pattern_row(shown_layer_, shown_head_, row)[col], 'f', 2),
               formatSigned(v));
    return QStringLiteral("query %1 ← key %2: %3").arg(q, k, QString::number(v, 'f', 2));
  });
  connect(heatmap_, &HeatmapView::cellClicked, this, [this](int row, int) { selection_->setPosition(row); });
  connect(heatmap_, &HeatmapView::cellHovered, this, [this](int row, int) { selection_->setHoverPosition(row); });
  connect(selection_, &Selection::headChanged, this, [this] { refresher_->request(); });
  // While a refresh is owed the heatmap holds an older run; the refresh draws the highlights.
  connect(selection_, &Selection::positionChanged, this, [this](int pos) {
    if (refresher_->pending()) return;
    if (mode_ == Mode::EdgeAttribution) return refresher_->request();  // other edges: shown when they land
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

std::shared_ptr<AttentionPatternResult> AttentionView::edgeCells(const RunResult& run, const AnalysisKey& key) {
  auto result = std::make_shared<AttentionPatternResult>();
  result->edges = true;
  // Gradients explain a plain run: the run on screen without its ablations.
  const std::shared_ptr<const hs::ActivationCache> plain = run.plainCache();
  result->ablations_left_out = !run.ablations().empty();
  result->target = hs::target_metric(*plain, key.pos, key.target, key.versus);
  const int layer = std::clamp(key.layer, 0, run.n_layer() - 1);
  const int head = std::clamp(key.head, 0, run.n_head() - 1);
  hs::GradOptions options;
  options.keep = {hs::HookPoint::Pattern};
  options.threads = 1;
  const hs::GradientCache grad = hs::backward(*plain, result->target.metric, options);
  auto edges = std::make_shared<const hs::RowMatrixXf>(hs::attention_edge_attribution(*plain, grad, layer, head));
  result->edge_values = edges;
  const int n = static_cast<int>(edges->rows());
  // Row q holds keys 0..q; later keys are masked, as in the pattern.
  auto row = [edges](int q) { return std::span<const float>(edges->row(q).data(), static_cast<size_t>(q) + 1); };
  result->cells = HeatmapView::prepareCells(n, n, row, ColorMap::Diverging, HeatmapView::RangeMode::Symmetric, 0.0, 1.0,
                                            layerWindow(run, layer));
  return result;
}

AnalysisKey AttentionView::analysisKey(AnalysisKey selected) const {
  if (mode_ != Mode::EdgeAttribution) return selected;
  selected.pos = selection_->position();
  selected.target = selection_->target();
  selected.versus = selection_->versus();
  selected.params = {kEdgeParams};
  return selected;
}

void AttentionView::setMode(Mode mode) {
  if (mode == mode_) return;
  mode_ = mode;
  {
    QSignalBlocker b1(pattern_button_), b2(edge_button_);
    pattern_button_->setChecked(mode == Mode::Pattern);
    edge_button_->setChecked(mode == Mode::EdgeAttribution);
  }
  failure_.clear();
  shown_layer_ = shown_head_ = -1;  // draw again, in the other mode
  Q_EMIT analysisKeyChanged();
  refresher_->request();
}

void AttentionView::showFailure(const QString& message) {
  if (mode_ != Mode::EdgeAttribution) return;
  failure_ = message;
  refresher_->request();
}

bool AttentionView::edgesReady(int layer, int head) const {
  if (!prepared_ || !prepared_->edges || !run_ || prepared_->run_job != run_->job) return false;
  return prepared_->key == analysisKey(AnalysisKey{layer, head});
}

QString AttentionView::summaryText() const { return summary_->text(); }

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
  // On a sliding layer the keys before the window's first are masked as the later ones are.
  return HeatmapView::prepareCells(n, n, row, ColorMap::Sequential, HeatmapView::RangeMode::Fixed, 0.0, 1.0,
                                   layerWindow(run, layer));
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
  if (prepared_->edges) failure_.clear();
  if (!prepared_->edges && prepared_->key.layer == shown_layer_ && prepared_->key.head == shown_head_ && !shown_edges_)
    return;  // drawn already
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
  // The selected head's edges, attributed to the selection's target at its position.
  AnalysisKey edges{selection_->layer(), selection_->head()};
  edges.pos = selection_->position();
  edges.target = selection_->target();
  edges.versus = selection_->versus();
  edges.params = {kEdgeParams};
  figures.push_back({edges, [this]() -> ExportFigure::Target {
                       setMode(Mode::EdgeAttribution);
                       showHead(selection_->layer(), selection_->head());
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
  const bool edges = mode_ == Mode::EdgeAttribution;
  // Edges come from the worker only (a backward pass): until they are there, nothing is drawn
  // rather than another position's or target's.
  const std::shared_ptr<const HeatmapCells> edge_cells = edges && edgesReady(layer, head) ? prepared_->cells : nullptr;
  if (layer != shown_layer_ || head != shown_head_ || edges != shown_edges_ ||
      (edges && edge_cells != heatmap_->cells())) {
    shown_layer_ = layer;
    shown_head_ = head;
    shown_edges_ = edges;
    const bool ready = prepared_ && !prepared_->edges && prepared_->run_job == run_->job &&
                       prepared_->key.layer == layer && prepared_->key.head == head;
    if (edges) {
      heatmap_->setColorMap(ColorMap::Diverging);
      heatmap_->setRangeMode(HeatmapView::RangeMode::Symmetric);
      heatmap_->setColorScaleTitle(QStringLiteral("A·∂M/∂A"));
      heatmap_->setCells(edge_cells);
    } else {
      heatmap_->setColorMap(ColorMap::Sequential);
      heatmap_->setRangeMode(HeatmapView::RangeMode::Fixed, 0.0, 1.0);
      heatmap_->setColorScaleTitle(QStringLiteral("attention weight"));
      heatmap_->setCells(ready ? prepared_->cells : patternCells(*run_, layer, head));
    }
    heatmap_->setRowLabels(run_->labels);
    heatmap_->setColumnLabels(run_->labels);
    heatmap_->setHighlightedRow(selection_->position());
    heatmap_->setHoverRow(selection_->hoverPosition());
    const QString label = headLabel(layer, head);
    const int window = layerWindow(*run_, layer);
    // Named only when the model has sliding layers, so GPT-2's title stays as it was.
    const bool any_window = hs::window_matters(run_->run.cache->config(), std::numeric_limits<int>::max());
    const QString layer_kind = any_window ? QStringLiteral(" &nbsp;(L%1: %2)").arg(layer).arg(windowText(window)) : QString();
    if (edges) {
      const QString metric = edge_cells ? edgeMetricText() : QStringLiteral("the target");
      title_->setText(QStringLiteral("<b>%1</b> &nbsp;edge attribution A·∂M/∂A to %2%3")
                          .arg(label, metric.toHtmlEscaped(), layer_kind));
      heatmap_->setFigureText({QStringLiteral("%1 edge attribution A·∂M/∂A to %2").arg(label, metric), runSubtitle(*run_)},
                              "attention_edges_" + label);
      note_->setText(QStringLiteral("Each cell is A[q, k] · ∂M/∂A[q, k], the edge's first-order share of M: red edges "
                                    "raise M, blue ones lower it. Target and position as in the Attribution view."));
    } else {
      title_->setText(QStringLiteral("<b>%1</b> &nbsp;attention pattern%2").arg(label, layer_kind));
      heatmap_->setFigureText({label + " attention pattern" + (window > 0 ? ", " + windowText(window) : QString()),
                               runSubtitle(*run_)},
                              "attention_" + label);
      note_->setText(window > 0 ? QStringLiteral("Rows sum to 1; hatched cells are keys the head cannot see: later "
                                                 "positions, and on this sliding layer keys more than %1 back "
                                                 "(a query reads keys q − %2 … q). Click a row to select that position.")
                                      .arg(window - 1).arg(window - 1)
                                : QStringLiteral("Rows sum to 1; hatched cells are later positions the head cannot see. "
                                                 "Click a row to select that position."));
    }
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

QString AttentionView::edgeMetricText() const {
  if (!prepared_ || !prepared_->edges) return {};
  const RunResult& run = *prepared_->run;
  const hs::TargetMetric& t = prepared_->target;
  const QString at = tokenAt(run.labels.value(t.pos), t.pos);
  return t.versus ? QStringLiteral("logit(%1) − logit(%2) at %3").arg(tokenText(run, t.target), tokenText(run, *t.versus), at)
                  : QStringLiteral("logit(%1) at %2").arg(tokenText(run, t.target), at);
}

void AttentionView::updateRowProfile() {
  if (!run_ || shown_layer_ < 0) return;
  const int q = std::clamp(selection_->position(), 0, run_->n_pos() - 1);
  if (shown_edges_) {
    // The selected query's edges, as bars over the keys (when the edges are there).
    std::vector<BarChartView::Bar> bars;
    if (edgesReady(shown_layer_, shown_head_)) {
      const hs::RowMatrixXf& e = *prepared_->edge_values;
      for (int k = 0; k <= q && k < e.cols(); ++k)
        bars.push_back({tokenAt(run_->labels.value(k), k), e(q, k),
                        e(q, k) >= 0 ? QColor(0xb2, 0x18, 0x2b) : QColor(0x21, 0x66, 0xac)});
    }
    row_bars_->clearValueRange();
    row_bars_->setValueAxisTitle(QStringLiteral("A·∂M/∂A"));
    row_bars_->setBars(std::move(bars));
    const QString label = headLabel(shown_layer_, shown_head_);
    const QString query = tokenAt(run_->labels.value(q), q);
    row_caption_->setText(QStringLiteral("The edges of <b>%1</b> at query %2, attributed to M.").arg(label, query.toHtmlEscaped()));
    row_bars_->setFigureText({QStringLiteral("%1 edge attribution from %2 to %3").arg(label, query, edgeMetricText()),
                              runSubtitle(*run_)},
                             QStringLiteral("attention_edges_row_%1_pos%2").arg(label).arg(q));
    return;
  }
  row_bars_->setValueAxisTitle(QStringLiteral("attention weight"));
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
  if (shown_edges_) {
    if (!failure_.isEmpty()) {
      summary_->setText(QStringLiteral("<span style='color:#b3261e'>%1</span>").arg(failure_.toHtmlEscaped()));
    } else if (!edgesReady(shown_layer_, shown_head_)) {
      summary_->setText(QStringLiteral("Computing the edge attributions (a backward pass)…"));
    } else {
      const hs::RowMatrixXf& e = *prepared_->edge_values;
      // The three edges of the whole pattern with the largest |A·∂M/∂A|.
      std::vector<std::pair<int, int>> cells;
      for (int r = 0; r < e.rows(); ++r)
        for (int k = 0; k <= r; ++k) cells.push_back({r, k});
      const size_t shown = std::min<size_t>(3, cells.size());
      std::partial_sort(cells.begin(), cells.begin() + static_cast<long>(shown), cells.end(),
                        [&](auto a, auto b) { return std::abs(e(a.first, a.second)) > std::abs(e(b.first, b.second)); });
      QStringList parts;
      for (size_t i = 0; i < shown; ++i) {
        const auto [r, k] = cells[i];
        parts << QStringLiteral("%1 ← %2 <span style='color:#666'>%3</span>")
                     .arg(tokenAt(run_->labels.value(r), r).toHtmlEscaped(), tokenAt(run_->labels.value(k), k).toHtmlEscaped(),
                          formatSigned(e(r, k)));
      }
      summary_->setText(QStringLiteral("M = %1 = %2. Largest edges: %3.%4")
                            .arg(edgeMetricText().toHtmlEscaped(), formatNumber(prepared_->target.value),
                                 parts.join(QStringLiteral(", ")),
                                 prepared_->ablations_left_out ? QStringLiteral(" (the run without its ablations)")
                                                               : QString()));
    }
    return;
  }
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
  if (shown_edges_)
    return {QStringLiteral("%1 edge attribution A·∂M/∂A to %2%3")
                .arg(headLabel(shown_layer_, shown_head_), edgeMetricText(),
                     range.isEmpty() ? QString() : QStringLiteral(", ") + range),
            runSubtitle(*run_)};
  return {QStringLiteral("%1 attention pattern, query %2%3")
              .arg(headLabel(shown_layer_, shown_head_), tokenAt(run_->labels.value(q), q),
                   range.isEmpty() ? QString() : QStringLiteral(", ") + range),
          runSubtitle(*run_)};
}

QString AttentionView::figureFileStem() const {
  return (shown_edges_ ? QStringLiteral("attention_view_edges_%1") : QStringLiteral("attention_view_%1"))
      .arg(headLabel(std::max(0, shown_layer_), std::max(0, shown_head_)));
}

}  // namespace hs::ui
