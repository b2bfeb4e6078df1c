#include "ui/widgets/heatmap_view.h"

#include <QMenu>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

#include "qcustomplot.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/plot_ticks.h"

namespace hs::ui {
namespace {

QCPColorGradient gradientFor(ColorMap map) {
  QCPColorGradient gradient;
  gradient.clearColorStops();
  const QVector<QColor>& stops = colorMapStops(map);
  for (int i = 0; i < stops.size(); ++i) gradient.setColorStopAt(static_cast<double>(i) / (stops.size() - 1), stops[i]);
  gradient.setColorInterpolation(QCPColorGradient::ciRGB);
  gradient.setLevelCount(256);
  gradient.setNanHandling(QCPColorGradient::nhTransparent);  // the hatch behind shows through
  return gradient;
}

// The background a masked (NaN) cell shows: light grey with diagonal lines.
QBrush maskedBrush() {
  QPixmap tile(8, 8);
  tile.fill(maskedColor().lighter(108));
  QPainter p(&tile);
  p.setRenderHint(QPainter::Antialiasing);
  p.setPen(QPen(maskedColor().darker(125), 1.0));
  p.drawLine(QPointF(-1, 9), QPointF(9, -1));
  p.drawLine(QPointF(-1, 1), QPointF(1, -1));
  p.drawLine(QPointF(7, 9), QPointF(9, 7));
  return QBrush(tile);
}

// Draws the cells' texts above the colour map and below the highlights, clipped to the cells,
// through the plot's own painter (so exports get them too).
class CellTextLayer : public QCPLayerable {
 public:
  CellTextLayer(QCustomPlot* plot, std::function<void(QCPPainter*)> draw)
      : QCPLayerable(plot, QStringLiteral("celltext")), draw_(std::move(draw)) {}

 protected:
  void applyDefaultAntialiasingHint(QCPPainter* painter) const override { painter->setAntialiasing(true); }
  QRect clipRect() const override { return mParentPlot->axisRect()->rect(); }
  void draw(QCPPainter* painter) override { draw_(painter); }

 private:
  std::function<void(QCPPainter*)> draw_;
};

QCPItemRect* makeRect(QCustomPlot* plot, const QPen& pen) {
  auto* rect = new QCPItemRect(plot);
  rect->setPen(pen);
  rect->setBrush(Qt::NoBrush);
  rect->setSelectable(false);
  rect->setClipToAxisRect(true);
  rect->setVisible(false);
  rect->setLayer(QStringLiteral("highlights"));
  return rect;
}

void placeRect(QCPItemRect* rect, double x0, double y0, double x1, double y1) {
  rect->topLeft->setCoords(x0, y0);
  rect->bottomRight->setCoords(x1, y1);
  rect->setVisible(true);
}

}  // namespace

HeatmapView::HeatmapView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  plot_ = newLivePlot(this, QStringLiteral("heatmapPlot"));
  layout->addWidget(plot_);
  plot_->setNoAntialiasingOnDrag(true);
  plot_->addLayer(QStringLiteral("highlights"), plot_->layer(QStringLiteral("main")), QCustomPlot::limAbove);
  plot_->addLayer(QStringLiteral("celltext"), plot_->layer(QStringLiteral("main")), QCustomPlot::limAbove);
  cell_text_layer_ = new CellTextLayer(plot_, [this](QCPPainter* painter) { drawCellTexts(painter); });

  QCPAxisRect* rect = plot_->axisRect();
  rect->setBackground(maskedBrush());
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    axis->grid()->setVisible(false);
    axis->setSubTicks(false);
    axis->setTickLength(0, 3);
    axis->setBasePen(QPen(QColor(0x88, 0x88, 0x88)));
    axis->setTickPen(QPen(QColor(0x88, 0x88, 0x88)));
    axis->setLabelColor(QColor(0x40, 0x40, 0x40));
    axis->setTickLabelColor(QColor(0x30, 0x30, 0x30));
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.9);
    axis->setTickLabelFont(f);
    axis->setPadding(2);
    axis->setLabelPadding(4);
  }
  plot_->yAxis->setRangeReversed(true);  // row 0 (the first token) at the top

  map_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
  map_->setInterpolate(false);
  map_->setTightBoundary(false);
  map_->setGradient(gradientFor(color_map_));
  map_->setDataRange(QCPRange(0.0, 1.0));

  scale_ = new QCPColorScale(plot_);
  scale_->setType(QCPAxis::atRight);
  scale_->setBarWidth(10);
  scale_->setRangeDrag(false);
  scale_->setRangeZoom(false);
  scale_->axis()->setTickLabelColor(QColor(0x30, 0x30, 0x30));
  scale_->axis()->setBasePen(QPen(QColor(0x88, 0x88, 0x88)));
  scale_->axis()->setTickPen(QPen(QColor(0x88, 0x88, 0x88)));
  scale_->axis()->setSubTicks(false);
  scale_->axis()->ticker()->setTickCount(5);
  plot_->plotLayout()->addElement(0, 1, scale_);
  map_->setColorScale(scale_);
  auto* group = new QCPMarginGroup(plot_);
  rect->setMarginGroup(QCP::msTop | QCP::msBottom, group);
  scale_->setMarginGroup(QCP::msTop | QCP::msBottom, group);

  const QColor accent = accentColor();
  row_band_highlight_ = makeRect(plot_, QPen(accent, 2.5));
  col_band_highlight_ = makeRect(plot_, QPen(accent, 2.5));
  hover_highlight_ = makeRect(plot_, QPen(QColor(0x30, 0x30, 0x30), 1.0, Qt::DashLine));
  row_highlight_ = makeRect(plot_, QPen(accent, 2.0));
  cell_highlight_ = makeRect(plot_, QPen(accent, 2.5));

  plot_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(plot_, &QWidget::customContextMenuRequested, this, &HeatmapView::showContextMenu);
  connect(plot_, &QCustomPlot::mouseMove, this, &HeatmapView::onMouseMove);
  connect(plot_, &QCustomPlot::mousePress, this, &HeatmapView::onMousePress);
  retickAfterLayout(plot_, this, [this] { updateTicks(); });
  setMinimumSize(160, 140);
  clear();
}

HeatmapView::~HeatmapView() = default;

void HeatmapView::clear() { setMatrix(0, 0, {}); }

void HeatmapView::setMatrix(int rows, int cols, std::vector<float> values) {
  rows_ = std::max(0, rows);
  cols_ = std::max(0, cols);
  values_ = std::move(values);
  values_.resize(static_cast<size_t>(rows_) * static_cast<size_t>(cols_), 0.0f);
  // QCustomPlot centres cells on the data range's ends, so a single row or column would have no
  // extent: store it twice over [-0.25, 0.25], which draws as one cell over [-0.5, 0.5].
  const int key_size = cols_ == 1 ? 2 : std::max(1, cols_);
  const int value_size = rows_ == 1 ? 2 : std::max(1, rows_);
  const QCPRange key_range = cols_ == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, std::max(1, cols_ - 1));
  const QCPRange value_range = rows_ == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, std::max(1, rows_ - 1));
  auto* data = new QCPColorMapData(key_size, value_size, key_range, value_range);
  if (rows_ == 0 || cols_ == 0) {
    data->fill(std::numeric_limits<double>::quiet_NaN());
  } else {
    for (int r = 0; r < value_size; ++r) {
      const float* row = values_.data() + static_cast<size_t>(std::min(r, rows_ - 1)) * cols_;
      for (int c = 0; c < key_size; ++c) data->setCell(c, r, row[std::min(c, cols_ - 1)]);
    }
  }
  map_->setData(data, false);  // takes ownership
  // An empty view is blank, not one big masked cell.
  const bool empty = rows_ == 0 || cols_ == 0;
  plot_->axisRect()->setBackground(empty ? QBrush(Qt::white) : maskedBrush());
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    axis->setTicks(!empty);
    axis->setBasePen(empty ? QPen(Qt::NoPen) : QPen(QColor(0x88, 0x88, 0x88)));
  }
  scale_->setVisible(!empty && color_scale_wanted_);
  plot_->xAxis->setRange(-0.5, std::max(1, cols_) - 0.5);
  plot_->yAxis->setRange(-0.5, std::max(1, rows_) - 0.5);
  if (highlighted_row_ >= rows_) highlighted_row_ = -1;
  if (hover_row_ >= rows_) hover_row_ = -1;
  if (cell_row_ >= rows_ || cell_col_ >= cols_) cell_row_ = cell_col_ = -1;
  updateRange();
  updateTicks();
  updateOverlays();
  scheduleReplot();
}

double HeatmapView::plottedValue(int row, int col) const {
  if (row < 0 || col < 0 || row >= rows_ || col >= cols_) return std::numeric_limits<double>::quiet_NaN();
  return map_->data()->cell(col, row);
}

void HeatmapView::setColorMap(ColorMap map) {
  color_map_ = map;
  map_->setGradient(gradientFor(map));
  scheduleReplot();
}

void HeatmapView::setRangeMode(RangeMode mode, double lo, double hi) {
  range_mode_ = mode;
  fixed_lo_ = lo;
  fixed_hi_ = hi;
  updateRange();
  scheduleReplot();
}

double HeatmapView::rangeLower() const { return map_->dataRange().lower; }
double HeatmapView::rangeUpper() const { return map_->dataRange().upper; }

void HeatmapView::updateRange() {
  double lo = fixed_lo_, hi = fixed_hi_;
  if (range_mode_ != RangeMode::Fixed) {
    double peak = 0.0;
    for (float v : values_)
      if (std::isfinite(v)) peak = std::max(peak, static_cast<double>(std::fabs(v)));
    if (peak <= 0.0) peak = 1.0;
    lo = range_mode_ == RangeMode::Symmetric ? -peak : 0.0;
    hi = peak;
  }
  map_->setDataRange(QCPRange(lo, hi));
}

void HeatmapView::setColorScaleTitle(const QString& title) {
  scale_->axis()->setLabel(title);
  scheduleReplot();
}

void HeatmapView::setCompact(bool compact) {
  scale_->setBarWidth(compact ? 7 : 10);
  scale_->axis()->ticker()->setTickCount(compact ? 3 : 5);
  QFont f = font();
  f.setPointSizeF(f.pointSizeF() * (compact ? 0.8 : 0.9));
  scale_->axis()->setTickLabelFont(f);
  plot_->xAxis->setTickLabelFont(f);
  plot_->yAxis->setTickLabelFont(f);
  QFont label = font();
  label.setPointSizeF(label.pointSizeF() * (compact ? 0.85 : 1.0));
  plot_->xAxis->setLabelFont(label);
  plot_->yAxis->setLabelFont(label);
  scale_->axis()->setLabelFont(label);
  plot_->plotLayout()->setColumnSpacing(compact ? 2 : 5);
  updateTicks();
  scheduleReplot();
}

void HeatmapView::setRowTickLabelsVisible(bool visible) {
  plot_->yAxis->setTickLabels(visible);
  scheduleReplot();
}

void HeatmapView::setColorScaleVisible(bool visible) {
  color_scale_wanted_ = visible;
  if (visible == scale_->visible()) return;
  scale_->setVisible(visible);
  if (visible) {
    plot_->plotLayout()->addElement(title_ ? 1 : 0, 1, scale_);
  } else {
    plot_->plotLayout()->take(scale_);
    plot_->plotLayout()->simplify();
  }
  scheduleReplot();
}

void HeatmapView::setRowLabels(const QStringList& labels) {
  row_labels_ = labels;
  updateTicks();
  scheduleReplot();
}

void HeatmapView::setColumnLabels(const QStringList& labels) {
  col_labels_ = labels;
  updateTicks();
  scheduleReplot();
}

void HeatmapView::setAxisTitles(const QString& rows, const QString& columns) {
  plot_->yAxis->setLabel(rows);
  plot_->xAxis->setLabel(columns);
  scheduleReplot();
}

void HeatmapView::setColumnLabelsRotated(bool rotated) {
  col_labels_rotated_ = rotated;
  updateTicks();
  scheduleReplot();
}

void HeatmapView::setTitle(const QString& title) {
  if (title.isEmpty()) {
    if (title_) {
      plot_->plotLayout()->remove(title_);
      plot_->plotLayout()->simplify();
      title_ = nullptr;
    }
  } else {
    if (!title_) {
      plot_->plotLayout()->insertRow(0);
      title_ = new QCPTextElement(plot_, title);
      QFont f = font();
      f.setBold(true);
      title_->setFont(f);
      title_->setTextColor(QColor(0x20, 0x20, 0x20));
      title_->setMargins(QMargins(0, 2, 0, 2));
      plot_->plotLayout()->addElement(0, 0, title_);
      if (scale_->visible()) plot_->plotLayout()->setColumnStretchFactors({1.0, 0.001});
    }
    title_->setText(title);
  }
  scheduleReplot();
}

void HeatmapView::setRowBands(int size, const QString& prefix, int highlighted) {
  row_band_ = std::max(0, size);
  row_band_prefix_ = prefix;
  row_band_selected_ = highlighted;
  updateTicks();
  updateOverlays();
  scheduleReplot();
}

void HeatmapView::setColumnBands(int size, const QString& prefix, int highlighted) {
  col_band_ = std::max(0, size);
  col_band_prefix_ = prefix;
  col_band_selected_ = highlighted;
  updateTicks();
  updateOverlays();
  scheduleReplot();
}

void HeatmapView::setHighlightedRowBand(int band) {
  row_band_selected_ = band;
  updateOverlays();
  scheduleReplot();
}

void HeatmapView::setHighlightedColumnBand(int band) {
  col_band_selected_ = band;
  updateOverlays();
  scheduleReplot();
}

void HeatmapView::setHighlightedRow(int row) {
  highlighted_row_ = row;
  updateOverlays();
  scheduleReplot();
}

void HeatmapView::setHighlightedCell(int row, int col) {
  cell_row_ = row;
  cell_col_ = col;
  updateOverlays();
  scheduleReplot();
}

void HeatmapView::setHoverRow(int row) {
  if (row == hover_row_) return;
  hover_row_ = row;
  updateOverlays();
  scheduleReplot();
}

void HeatmapView::setTooltipFormatter(std::function<QString(int, int, float)> formatter) {
  tooltip_ = std::move(formatter);
}

void HeatmapView::setCellTexts(QStringList texts) {
  cell_texts_ = std::move(texts);
  scheduleReplot();
}

void HeatmapView::drawCellTexts(QCPPainter* painter) const {
  if (cell_texts_.size() != rows_ * cols_ || rows_ == 0 || cols_ == 0) return;
  const double cell_w = std::abs(plot_->xAxis->coordToPixel(1.0) - plot_->xAxis->coordToPixel(0.0));
  const double cell_h = std::abs(plot_->yAxis->coordToPixel(1.0) - plot_->yAxis->coordToPixel(0.0));
  QFont f = plot_->xAxis->tickLabelFont();
  // As large as the cell allows, up to the tick labels' size; no text below a readable size.
  f.setPointSizeF(std::min(f.pointSizeF(), cell_h * 0.42));
  if (f.pointSizeF() < 6.0 || cell_w < 18.0) return;
  const QFontMetrics metrics(f);
  painter->setFont(f);
  const QCPRange range = map_->dataRange();
  const double span = range.size() > 0 ? range.size() : 1.0;
  for (int r = 0; r < rows_; ++r) {
    for (int c = 0; c < cols_; ++c) {
      const QString& text = cell_texts_[r * cols_ + c];
      if (text.isEmpty()) continue;
      const float v = values_[static_cast<size_t>(r) * cols_ + c];
      // Dark cells get white text (the masked hatch is light).
      bool dark = false;
      if (std::isfinite(v)) {
        const QColor bg = QColor::fromRgb(colorAt(color_map_, (v - range.lower) / span));
        dark = 0.299 * bg.red() + 0.587 * bg.green() + 0.114 * bg.blue() < 140.0;
      }
      painter->setPen(dark ? Qt::white : QColor(0x10, 0x10, 0x10));
      const QRectF cell = QRectF(QPointF(plot_->xAxis->coordToPixel(c - 0.5), plot_->yAxis->coordToPixel(r - 0.5)),
                                 QPointF(plot_->xAxis->coordToPixel(c + 0.5), plot_->yAxis->coordToPixel(r + 0.5)))
                              .normalized();
      painter->drawText(cell.adjusted(2, 0, -2, 0), Qt::AlignCenter,
                        metrics.elidedText(text, Qt::ElideRight, static_cast<int>(cell_w) - 4));
    }
  }
}

void HeatmapView::setFigureText(const FigureText& text, const QString& file_stem) {
  figure_text_ = text;
  file_stem_ = file_stem;
}

QSize HeatmapView::figureSize() const {
  const QSize s = plot_->size();
  return (s.width() < 50 || s.height() < 50) ? QSize(900, 760) : s;
}

void HeatmapView::paintFigure(QPainter& painter, QSize size) {
  paintPlotInto(plot_, painter, size);
  plot_->replot(QCustomPlot::rpQueuedReplot);  // toPainter laid the plot out for `size`
}

QRect HeatmapView::cellArea() const {
  const QRect r = plot_->axisRect()->rect();
  return QRect(plot_->mapTo(this, r.topLeft()), r.size());
}

QPoint HeatmapView::cellAt(const QPoint& widget_pos) const {
  const QPoint p = plot_->mapFrom(this, widget_pos);
  if (rows_ == 0 || cols_ == 0 || !plot_->axisRect()->rect().contains(p)) return {-1, -1};
  const int col = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(p.x())));
  const int row = static_cast<int>(std::lround(plot_->yAxis->pixelToCoord(p.y())));
  if (row < 0 || col < 0 || row >= rows_ || col >= cols_) return {-1, -1};
  return {col, row};
}

QPoint HeatmapView::cellCenter(int row, int col) const {
  const QPoint p(static_cast<int>(std::lround(plot_->xAxis->coordToPixel(col))),
                 static_cast<int>(std::lround(plot_->yAxis->coordToPixel(row))));
  return plot_->mapTo(this, p);
}

void HeatmapView::replotNow() {
  updateTicks();
  plot_->replot(QCustomPlot::rpImmediateRefresh);
}

void HeatmapView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  updateTicks();
}

void HeatmapView::leaveEvent(QEvent* event) {
  QWidget::leaveEvent(event);
  if (last_hover_ != QPoint(-1, -1)) {
    last_hover_ = {-1, -1};
    Q_EMIT cellHovered(-1, -1);
  }
}

void HeatmapView::onMouseMove(QMouseEvent* event) {
  const QPoint cell = cellAt(plot_->mapTo(this, event->pos()));
  if (cell == last_hover_) return;
  last_hover_ = cell;
  const int col = cell.x(), row = cell.y();
  if (row < 0) {
    QToolTip::hideText();
  } else {
    const float v = values_[static_cast<size_t>(row) * cols_ + col];
    const QString text = tooltip_ ? tooltip_(row, col, v)
                                  : QStringLiteral("row %1, column %2: %3").arg(row).arg(col).arg(formatNumber(v));
    QToolTip::showText(event->globalPosition().toPoint(), text, plot_);
  }
  Q_EMIT cellHovered(row, col);
}

void HeatmapView::onMousePress(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  const QPoint cell = cellAt(plot_->mapTo(this, event->pos()));
  if (cell.y() >= 0) Q_EMIT cellClicked(cell.y(), cell.x());
}

void HeatmapView::showContextMenu(const QPoint& pos) {
  QMenu menu(this);
  if (const QPoint cell = cellAt(pos); cell.x() >= 0) {
    Q_EMIT cellContextMenu(cell.y(), cell.x(), &menu);
    if (!menu.isEmpty()) menu.addSeparator();
  }
  addFigureExportActions(menu, this, *this);
  menu.exec(plot_->mapToGlobal(pos));
}

void HeatmapView::updateTicks() {
  // How many labels fit along each axis: a row label needs a line of text, a rotated column
  // label too; an upright band label ("h7") needs its width.
  const QFontMetrics metrics(plot_->xAxis->tickLabelFont());
  const int line = metrics.height() + 1;
  QCPAxisRect* rect = plot_->axisRect();
  const int height = rect->height() > 20 ? rect->height() : std::max(60, plot_->height() - 90);
  const int width = rect->width() > 20 ? rect->width() : std::max(60, plot_->width() - 130);
  const bool rotate_columns = col_labels_rotated_ && col_band_ == 0 && !col_labels_.isEmpty();

  auto tick_axis = [&](QCPAxis* axis, int n, const QStringList& labels, int band, const QString& prefix, int length,
                       int label_px) {
    if (band > 0 && n > 0) {
      auto ticker = QSharedPointer<QCPAxisTickerText>::create();
      const int bands = (n + band - 1) / band;
      const int px = std::max(label_px, metrics.horizontalAdvance(prefix + QString::number(bands)) + 6);
      const int step = std::max(1, static_cast<int>(std::ceil(bands * double(px) / std::max(1, length))));
      for (int b = 0; b < bands; b += step) ticker->addTick(b * band + (band - 1) / 2.0, prefix + QString::number(b));
      axis->setTicker(ticker);
    } else if (!labels.isEmpty() && labels.size() == n) {
      auto ticker = QSharedPointer<QCPAxisTickerText>::create();
      const int step = std::max(1, static_cast<int>(std::ceil(n * double(label_px) / std::max(1, length))));
      for (int i = 0; i < n; i += step) ticker->addTick(i, elideLabel(labels[i], 12));
      axis->setTicker(ticker);
    } else {
      auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
      ticker->setTickStep(1.0);
      ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
      ticker->setTickCount(std::clamp(length / 80, 1, 8));
      axis->setTicker(ticker);
    }
  };
  tick_axis(plot_->yAxis, rows_, row_labels_, row_band_, row_band_prefix_, height, line);
  tick_axis(plot_->xAxis, cols_, col_labels_, col_band_, col_band_prefix_, width,
            rotate_columns ? line : metrics.horizontalAdvance(QStringLiteral("0000")) + 8);
  plot_->xAxis->setTickLabelRotation(rotate_columns ? 90 : 0);
}

void HeatmapView::updateOverlays() {
  for (auto& line : band_lines_)
    if (line) plot_->removeItem(static_cast<QCPAbstractItem*>(line.data()));
  band_lines_.clear();
  const QPen band_pen(QColor(0x40, 0x40, 0x40, 160), 1.0);
  if (col_band_ > 0 && cols_ > col_band_) {
    for (int b = col_band_; b < cols_; b += col_band_) {
      auto* line = new QCPItemLine(plot_);
      line->setPen(band_pen);
      line->setLayer(QStringLiteral("highlights"));
      line->start->setCoords(b - 0.5, -0.5);
      line->end->setCoords(b - 0.5, rows_ - 0.5);
      band_lines_.emplace_back(line);
    }
  }
  if (row_band_ > 0 && rows_ > row_band_) {
    for (int b = row_band_; b < rows_; b += row_band_) {
      auto* line = new QCPItemLine(plot_);
      line->setPen(band_pen);
      line->setLayer(QStringLiteral("highlights"));
      line->start->setCoords(-0.5, b - 0.5);
      line->end->setCoords(cols_ - 0.5, b - 0.5);
      band_lines_.emplace_back(line);
    }
  }
  if (col_band_ > 0 && col_band_selected_ >= 0 && col_band_selected_ * col_band_ < cols_)
    placeRect(col_band_highlight_, col_band_selected_ * col_band_ - 0.5, -0.5,
              std::min(cols_, (col_band_selected_ + 1) * col_band_) - 0.5, rows_ - 0.5);
  else
    col_band_highlight_->setVisible(false);
  if (row_band_ > 0 && row_band_selected_ >= 0 && row_band_selected_ * row_band_ < rows_)
    placeRect(row_band_highlight_, -0.5, row_band_selected_ * row_band_ - 0.5, cols_ - 0.5,
              std::min(rows_, (row_band_selected_ + 1) * row_band_) - 0.5);
  else
    row_band_highlight_->setVisible(false);
  if (highlighted_row_ >= 0 && highlighted_row_ < rows_)
    placeRect(row_highlight_, -0.5, highlighted_row_ - 0.5, cols_ - 0.5, highlighted_row_ + 0.5);
  else
    row_highlight_->setVisible(false);
  if (hover_row_ >= 0 && hover_row_ < rows_ && hover_row_ != highlighted_row_)
    placeRect(hover_highlight_, -0.5, hover_row_ - 0.5, cols_ - 0.5, hover_row_ + 0.5);
  else
    hover_highlight_->setVisible(false);
  if (cell_row_ >= 0 && cell_col_ >= 0 && cell_row_ < rows_ && cell_col_ < cols_)
    placeRect(cell_highlight_, cell_col_ - 0.5, cell_row_ - 0.5, cell_col_ + 0.5, cell_row_ + 0.5);
  else
    cell_highlight_->setVisible(false);
}

void HeatmapView::scheduleReplot() { plot_->replot(QCustomPlot::rpQueuedReplot); }

}  // namespace hs::ui
