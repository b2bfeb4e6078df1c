#include "ui/widgets/heatmap_view.h"

#include <QAction>
#include <QMenu>
#include <QMouseEvent>
#include <QWheelEvent>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>

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

// Image memory for the cells, recycled: on a long prompt each keystroke colours a new image of
// several MB, and faulting in fresh pages for it costs more than colouring it. A buffer comes back
// when the last QImage on it goes; capacities are rounded up so a prompt growing by a token
// still fits the buffer it had.
class ImageBuffers {
 public:
  static ImageBuffers& instance() {
    static auto* pool = new ImageBuffers;  // never destroyed: images may outlive static teardown
    return *pool;
  }

  // A premultiplied ARGB image of `size`, on a recycled buffer.
  QImage take(QSize size) {
    const size_t bytes = static_cast<size_t>(size.width()) * size.height() * 4;
    Buffer* buffer = nullptr;
    {
      std::lock_guard lock(mutex_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if ((*it)->capacity >= bytes && (best == free_.end() || (*it)->capacity < (*best)->capacity)) best = it;
      if (best != free_.end()) {
        buffer = best->release();
        free_.erase(best);
      }
    }
    if (!buffer) {
      buffer = new Buffer;
      buffer->capacity = bytes + bytes / 4;
      buffer->bytes = std::make_unique<uchar[]>(buffer->capacity);
    }
    return QImage(buffer->bytes.get(), size.width(), size.height(), size.width() * 4,
                  QImage::Format_ARGB32_Premultiplied, &ImageBuffers::giveBack, buffer);
  }

 private:
  struct Buffer {
    std::unique_ptr<uchar[]> bytes;
    size_t capacity = 0;
  };
  static constexpr size_t kKept = 4;  // the shown image, the next one, and two in flight

  static void giveBack(void* info) {
    std::unique_ptr<Buffer> buffer(static_cast<Buffer*>(info));
    ImageBuffers& pool = instance();
    std::lock_guard lock(pool.mutex_);
    if (pool.free_.size() < kKept) pool.free_.push_back(std::move(buffer));
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<Buffer>> free_;
};

// Nearest-cell stretch of the part `source` of `image` onto `out` (its size is the target's),
// mirrored as asked: into an image kept from the last draw, so no new memory per keystroke.
void stretchInto(const QImage& image, const QRect& source, QImage& out, bool mirror_x, bool mirror_y) {
  const int w = out.width(), h = out.height(), iw = source.width(), ih = source.height();
  std::vector<int> column(static_cast<size_t>(w));
  for (int x = 0; x < w; ++x) {
    const int c = static_cast<int>(static_cast<int64_t>(x) * iw / w);
    column[static_cast<size_t>(x)] = source.left() + (mirror_x ? iw - 1 - c : c);
  }
  for (int y = 0; y < h; ++y) {
    int r = static_cast<int>(static_cast<int64_t>(y) * ih / h);
    if (mirror_y) r = ih - 1 - r;
    const auto* in = reinterpret_cast<const QRgb*>(image.constScanLine(source.top() + r));
    auto* line = reinterpret_cast<QRgb*>(out.scanLine(y));
    for (int x = 0; x < w; ++x) line[x] = in[column[static_cast<size_t>(x)]];
  }
}

}  // namespace

float HeatmapCells::value(int r, int c) const {
  const std::span<const float> cells = row(r);
  if (c < maskedBefore(r)) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<size_t>(c) < cells.size() ? cells[static_cast<size_t>(c)] : std::numeric_limits<float>::quiet_NaN();
}

// The cells as one image, drawn over [-0.5, cols - 0.5] x [-0.5, rows - 0.5]. A QCPColorMap for
// the colour scale's sake (range and gradient), drawing HeatmapCells instead of its own data: no
// cell-by-cell copy and no colouring on the GUI thread.
class CellsPlottable : public QCPColorMap {
 public:
  // From this many image pixels on, an image is large: kept stretched, and on a recycled buffer.
  static constexpr int64_t kKeepStretchedFrom = 256 * 256;

  CellsPlottable(QCPAxis* key, QCPAxis* value) : QCPColorMap(key, value) {}

  void setCells(std::shared_ptr<const HeatmapCells> cells) {
    cells_ = std::move(cells);
    stretched_for_.reset();
  }
  // A white veil over the cells: still readable, plainly not current (HeatmapView::setGreyed).
  bool veiled = false;

 protected:
  void draw(QCPPainter* painter) override {
    if (!cells_ || cells_->rows == 0 || cells_->cols == 0 || cells_->image.isNull()) return;
    // Only the cells in view (zoomed in, the whole matrix stretched would be an image of tens of
    // thousands of pixels a side): whole cells, from the first partly shown to the last.
    const QCPRange xr = keyAxis()->range(), yr = valueAxis()->range();
    const int c0 = std::clamp(static_cast<int>(std::floor(xr.lower + 0.5)), 0, cells_->cols - 1);
    const int c1 = std::clamp(static_cast<int>(std::ceil(xr.upper - 0.5)), c0, cells_->cols - 1);
    const int r0 = std::clamp(static_cast<int>(std::floor(yr.lower + 0.5)), 0, cells_->rows - 1);
    const int r1 = std::clamp(static_cast<int>(std::ceil(yr.upper - 0.5)), r0, cells_->rows - 1);
    const int fx = cells_->image.width() / cells_->cols, fy = cells_->image.height() / cells_->rows;
    const QRect source(c0 * fx, r0 * fy, (c1 - c0 + 1) * fx, (r1 - r0 + 1) * fy);
    const QRectF target = QRectF(coordsToPixels(c0 - 0.5, r0 - 0.5), coordsToPixels(c1 + 0.5, r1 + 0.5)).normalized();
    // Row 0 is the image's first scanline: it goes at the top unless the row axis runs upwards.
    const bool mirror_x = keyAxis()->rangeReversed(), mirror_y = !valueAxis()->rangeReversed();
    painter->save();
    painter->setRenderHint(QPainter::SmoothPixmapTransform, false);
    // Cell edges fall on whole pixels at the plot's own scale (the axis ends are the axis rect's).
    const QRect rounded(QPoint(qRound(target.left()), qRound(target.top())),
                        QSize(qRound(target.width()), qRound(target.height())));
    // A large image is stretched once and kept, so that a replot for the hover outline is a blit;
    // a small one is cheap to stretch as it is drawn, and keeping a window-sized copy of it would
    // cost fresh memory at every resize.
    const bool keep_stretched = static_cast<int64_t>(cells_->image.width()) * cells_->image.height() >= kKeepStretchedFrom;
    if (keep_stretched && painter->transform().isIdentity() && !rounded.isEmpty()) {
      if (stretched_for_ != cells_ || stretched_.size() != rounded.size() || stretched_source_ != source ||
          stretched_mirror_ != std::pair(mirror_x, mirror_y)) {
        if (stretched_.size() != rounded.size()) stretched_ = QImage(rounded.size(), QImage::Format_ARGB32_Premultiplied);
        stretchInto(cells_->image, source, stretched_, mirror_x, mirror_y);
        stretched_for_ = cells_;
        stretched_source_ = source;
        stretched_mirror_ = {mirror_x, mirror_y};
      }
      painter->drawImage(rounded.topLeft(), stretched_);
    } else {
      const QImage part = source == cells_->image.rect() ? cells_->image : cells_->image.copy(source);
      painter->drawImage(target, mirror_x || mirror_y ? part.mirrored(mirror_x, mirror_y) : part);
    }
    if (veiled) painter->fillRect(target, QColor(255, 255, 255, 175));
    painter->restore();
  }

 private:
  std::shared_ptr<const HeatmapCells> cells_;
  QImage stretched_;
  std::shared_ptr<const HeatmapCells> stretched_for_;
  QRect stretched_source_;
  std::pair<bool, bool> stretched_mirror_{false, false};
};

std::shared_ptr<const HeatmapCells> HeatmapView::prepareCells(int rows, int cols, std::vector<float> values,
                                                              ColorMap map, RangeMode mode, double lo, double hi) {
  rows = std::max(0, rows);
  cols = std::max(0, cols);
  values.resize(static_cast<size_t>(rows) * static_cast<size_t>(cols), 0.0f);
  auto data = std::make_shared<const std::vector<float>>(std::move(values));
  return prepareCells(rows, cols, [data, cols](int r) {
    return std::span<const float>(data->data() + static_cast<size_t>(r) * cols, static_cast<size_t>(cols));
  }, map, mode, lo, hi);
}

std::shared_ptr<const HeatmapCells> HeatmapView::prepareCells(int rows, int cols, HeatmapRow row, ColorMap map,
                                                              RangeMode mode, double lo, double hi, int window) {
  auto cells = std::make_shared<HeatmapCells>();
  cells->window = std::max(0, window);
  cells->rows = std::max(0, rows);
  cells->cols = std::max(0, cols);
  cells->row = std::move(row);
  cells->color_map = map;
  cells->range_mode = mode;
  cells->fixed_lo = lo;
  cells->fixed_hi = hi;
  cells->lo = lo;
  cells->hi = hi;
  if (mode != RangeMode::Fixed) {
    double peak = 0.0;
    for (int r = 0; r < cells->rows; ++r) {
      const std::span<const float> in = cells->row(r);
      const size_t first = std::min<size_t>(static_cast<size_t>(cells->maskedBefore(r)), in.size());
      for (float v : in.first(std::min<size_t>(in.size(), static_cast<size_t>(cells->cols))).subspan(first))
        if (std::isfinite(v)) peak = std::max(peak, static_cast<double>(std::fabs(v)));
    }
    if (peak <= 0.0) peak = 1.0;
    cells->lo = mode == RangeMode::Symmetric ? -peak : 0.0;
    cells->hi = peak;
  }
  if (cells->rows == 0 || cells->cols == 0) return cells;
  // One colour per level of the gradient, as QCustomPlot picks them (the level is the value's
  // place in the range, truncated, clamped to the ends); each level's colour is asked of the
  // gradient once, at its centre, so the cells match the colour scale's bar exactly.
  QCPColorGradient gradient = gradientFor(map);  // a copy per call: colouring caches inside it
  const int levels = gradient.levelCount();
  const QCPRange range(cells->lo, cells->hi);
  const double span = cells->hi - cells->lo;
  std::vector<double> centres(static_cast<size_t>(levels));
  for (int i = 0; i < levels; ++i) centres[static_cast<size_t>(i)] = cells->lo + (i + 0.5) * span / (levels - 1);
  std::vector<QRgb> lut(static_cast<size_t>(levels));
  gradient.colorize(centres.data(), range, lut.data(), levels);
  const double to_level = span > 0.0 ? (levels - 1) / span : 0.0;
  // Only large images (a long prompt's pattern, several MB) are worth a recycled buffer; small ones
  // come from the heap's own free memory like any other.
  const QSize size(cells->cols, cells->rows);
  QImage image = static_cast<int64_t>(size.width()) * size.height() >= CellsPlottable::kKeepStretchedFrom
                     ? ImageBuffers::instance().take(size)
                     : QImage(size, QImage::Format_ARGB32_Premultiplied);
  for (int r = 0; r < cells->rows; ++r) {
    const std::span<const float> in = cells->row(r);
    const int given = static_cast<int>(std::min<size_t>(in.size(), static_cast<size_t>(cells->cols)));
    auto* out = reinterpret_cast<QRgb*>(image.scanLine(r));
    std::fill(out + given, out + cells->cols, QRgb{0});  // after the row's end: masked
    const int first = std::min(given, cells->maskedBefore(r));
    std::fill(out, out + first, QRgb{0});  // before a sliding window's first key: masked
    for (int c = first; c < given; ++c) {
      const double v = in[static_cast<size_t>(c)];
      if (std::isnan(v)) {
        out[c] = 0;  // masked: transparent, the hatch behind shows through
        continue;
      }
      const double level = (v - cells->lo) * to_level;
      out[c] = lut[static_cast<size_t>(level <= 0.0 ? 0 : level >= levels - 1 ? levels - 1 : static_cast<int>(level))];
    }
  }
  // QCustomPlot's rule: below 100 cells a side, an integer number of pixels per cell.
  const int fx = 1 + 100 / cells->cols, fy = 1 + 100 / cells->rows;
  cells->image = fx > 1 || fy > 1 ? image.scaled(cells->cols * fx, cells->rows * fy) : std::move(image);
  return cells;
}

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

  map_ = new CellsPlottable(plot_->xAxis, plot_->yAxis);
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
  connect(plot_, &QCustomPlot::mouseRelease, this, &HeatmapView::onMouseRelease);
  connect(plot_, &QCustomPlot::mouseWheel, this, &HeatmapView::onWheel);
  connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent* event) {
    if (zoomable_ && event->button() == Qt::LeftButton) resetZoom();
  });
  retickAfterLayout(plot_, this, [this] { updateTicks(); });
  setMinimumSize(160, 140);
  clear();
}

HeatmapView::~HeatmapView() = default;

void HeatmapView::clear() { setMatrix(0, 0, {}); }

void HeatmapView::setMatrix(int rows, int cols, std::vector<float> values) {
  setCells(prepareCells(rows, cols, std::move(values), color_map_, range_mode_, fixed_lo_, fixed_hi_));
}

void HeatmapView::setCells(std::shared_ptr<const HeatmapCells> cells) {
  if (!cells) cells = prepareCells(0, 0, std::vector<float>{}, color_map_, range_mode_, fixed_lo_, fixed_hi_);
  if (cells->color_map != color_map_ || cells->range_mode != range_mode_ || cells->fixed_lo != fixed_lo_ ||
      cells->fixed_hi != fixed_hi_)
    cells = prepareCells(cells->rows, cells->cols, cells->row, color_map_, range_mode_, fixed_lo_, fixed_hi_,
                         cells->window);
  cells_ = std::move(cells);
  rows_ = cells_->rows;
  cols_ = cells_->cols;
  map_->setCells(cells_);
  map_->setDataRange(QCPRange(cells_->lo, cells_->hi));  // the colour scale's axis
  // An empty view is blank, not one big masked cell.
  const bool empty = rows_ == 0 || cols_ == 0;
  plot_->axisRect()->setBackground(empty ? QBrush(Qt::white) : maskedBrush());
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    axis->setTicks(!empty);
    axis->setBasePen(empty ? QPen(Qt::NoPen) : QPen(QColor(0x88, 0x88, 0x88)));
  }
  scale_->setVisible(!empty && color_scale_wanted_);
  applyRanges();
  if (highlighted_row_ >= rows_) highlighted_row_ = -1;
  if (hover_row_ >= rows_) hover_row_ = -1;
  if (cell_row_ >= rows_ || cell_col_ >= cols_) cell_row_ = cell_col_ = -1;
  updateTicks();
  updateOverlays();
  scheduleReplot();
}

double HeatmapView::plottedValue(int row, int col) const {
  if (row < 0 || col < 0 || row >= rows_ || col >= cols_) return std::numeric_limits<double>::quiet_NaN();
  return cells_->value(row, col);
}

QRgb HeatmapView::plottedColor(int row, int col) const {
  if (row < 0 || col < 0 || row >= rows_ || col >= cols_) return 0;
  const int fx = cells_->image.width() / cols_, fy = cells_->image.height() / rows_;
  return cells_->image.pixel(col * fx, row * fy);
}

void HeatmapView::setPositionZoom(bool on) {
  zoomable_ = on;
  if (!on) resetZoom();
}

void HeatmapView::applyRanges() {
  const int n = std::max(rows_, cols_);
  if (zoomed_ && n <= kMinZoomPositions) zoomed_ = false;  // nothing to zoom into
  if (zoomed_) {
    // Clamped into the matrix, never fewer than kMinZoomPositions positions; the whole matrix is
    // no zoom at all.
    const double full = n;
    const double span = std::clamp(view_hi_ - view_lo_, double(kMinZoomPositions), full);
    if (span >= full - 1e-9) {
      zoomed_ = false;
    } else {
      view_lo_ = std::clamp(view_lo_, -0.5, full - 0.5 - span);
      view_hi_ = view_lo_ + span;
      plot_->xAxis->setRange(view_lo_, view_hi_);
      plot_->yAxis->setRange(view_lo_, view_hi_);
      return;
    }
  }
  plot_->xAxis->setRange(-0.5, std::max(1, cols_) - 0.5);
  plot_->yAxis->setRange(-0.5, std::max(1, rows_) - 0.5);
}

void HeatmapView::setWindow(double lo, double hi) {
  if (!zoomable_ || rows_ == 0 || cols_ == 0) return;
  const std::pair<int, int> before = visiblePositions();
  const bool was_zoomed = zoomed_;
  zoomed_ = true;
  view_lo_ = lo;
  view_hi_ = hi;
  applyRanges();
  updateTicks();
  scheduleReplot();
  if (visiblePositions() != before || zoomed_ != was_zoomed) Q_EMIT zoomChanged();
}

void HeatmapView::setVisiblePositions(int first, int last) { setWindow(first - 0.5, last + 0.5); }

void HeatmapView::resetZoom() {
  if (!zoomed_) return;
  zoomed_ = false;
  applyRanges();
  updateTicks();
  scheduleReplot();
  Q_EMIT zoomChanged();
}

std::pair<int, int> HeatmapView::visiblePositions() const {
  const int n = std::max(rows_, cols_);
  if (n == 0) return {0, -1};
  if (!zoomed_) return {0, n - 1};
  // Every cell at least half in view.
  const int first = std::clamp(static_cast<int>(std::ceil(view_lo_)), 0, n - 1);
  const int last = std::clamp(static_cast<int>(std::floor(view_hi_)), first, n - 1);
  return {first, last};
}

QString HeatmapView::zoomCaption() const {
  if (!zoomed_) return {};
  const auto [first, last] = visiblePositions();
  return QStringLiteral("positions %1–%2").arg(first).arg(last);
}

FigureText HeatmapView::figureText() const {
  FigureText text = figure_text_;
  if (zoomed_ && !text.title.isEmpty()) text.title += QStringLiteral(", ") + zoomCaption();
  return text;
}

void HeatmapView::setColorMap(ColorMap map) {
  color_map_ = map;
  map_->setGradient(gradientFor(map));  // the colour scale's bar
  recolor();
}

void HeatmapView::setRangeMode(RangeMode mode, double lo, double hi) {
  range_mode_ = mode;
  fixed_lo_ = lo;
  fixed_hi_ = hi;
  recolor();
}

double HeatmapView::rangeLower() const { return map_->dataRange().lower; }
double HeatmapView::rangeUpper() const { return map_->dataRange().upper; }

void HeatmapView::recolor() {
  if (cells_) setCells(cells_);  // recoloured only if the colours changed
}

void HeatmapView::setColorScaleTitle(const QString& title) {
  scale_->axis()->setLabel(title);
  scheduleReplot();
}

bool HeatmapView::colorScaleShown() const { return scale_->visible(); }

QString HeatmapView::colorScaleTitle() const { return scale_->axis()->label(); }

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

void HeatmapView::setGreyed(bool greyed) {
  if (map_->veiled == greyed) return;
  map_->veiled = greyed;
  scheduleReplot();
}

bool HeatmapView::greyed() const { return map_->veiled; }

QString HeatmapView::title() const { return title_ ? title_->text() : QString(); }

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
  updateTicks();  // its label is always shown
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
  updateTicks();  // its label is always shown
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
      const float v = cells_->value(r, c);
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
  // Where the pointer is, and unless asked what is selected, is not part of the figure.
  std::vector<std::pair<QCPItemRect*, bool>> hidden = {{hover_highlight_, hover_highlight_->visible()}};
  if (!selection_in_exports_)
    for (QCPItemRect* r : {row_highlight_, cell_highlight_}) hidden.emplace_back(r, r->visible());
  for (auto& [rect, was_visible] : hidden) rect->setVisible(false);
  exporting_ = true;  // nor is the label shown only because a position is hovered or selected
  updateTicks();
  paintPlotInto(plot_, painter, size);
  exporting_ = false;
  updateTicks();
  for (auto& [rect, was_visible] : hidden) rect->setVisible(was_visible);
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
  if (press_pos_.x() >= 0 && (event->buttons() & Qt::LeftButton) && zoomed_) {
    const QPoint d = event->pos() - press_pos_;
    if (dragging_ || d.manhattanLength() > 3) {
      // A pan: the cells follow the pointer along the larger of the two moves (one window serves
      // both axes, so a drag right and a drag down both bring earlier positions into view).
      if (!dragging_) {
        dragging_ = true;
        plot_->setCursor(Qt::ClosedHandCursor);
        QToolTip::hideText();
      }
      const QCPAxisRect* rect = plot_->axisRect();
      const double span = view_hi_ - view_lo_;
      const double moved = std::abs(d.x()) >= std::abs(d.y()) ? double(d.x()) / std::max(1, rect->width())
                                                              : double(d.y()) / std::max(1, rect->height());
      setWindow(press_lo_ - moved * span, press_lo_ - moved * span + span);
      return;
    }
  }
  const QPoint cell = cellAt(plot_->mapTo(this, event->pos()));
  if (cell.y() < 0) {
    // Over the labels: the full text of a label the axis shortened.
    const QString label = labelTooltipAt(event->pos());
    if (!label.isEmpty()) QToolTip::showText(event->globalPosition().toPoint(), label, plot_);
  }
  if (cell == last_hover_) return;
  last_hover_ = cell;
  const int col = cell.x(), row = cell.y();
  if (row < 0) {
    if (labelTooltipAt(event->pos()).isEmpty()) QToolTip::hideText();
  } else {
    const float v = cells_->value(row, col);
    const QString text = tooltip_ ? tooltip_(row, col, v)
                                  : QStringLiteral("row %1, column %2: %3").arg(row).arg(col).arg(formatNumber(v));
    QToolTip::showText(event->globalPosition().toPoint(), text, plot_);
  }
  Q_EMIT cellHovered(row, col);
}

QString HeatmapView::labelTextAt(const QPoint& widget_pos) const { return labelTooltipAt(plot_->mapFrom(this, widget_pos)); }

QString HeatmapView::rowTickLabel(int row) const {
  const auto ticker = plot_->yAxis->ticker().dynamicCast<QCPAxisTickerText>();
  return ticker ? ticker->ticks().value(row) : QString();
}

QFont HeatmapView::tickLabelFont() const { return plot_->yAxis->tickLabelFont(); }

QString HeatmapView::labelTooltipAt(const QPoint& plot_pos) const {
  const QCPAxisRect* rect = plot_->axisRect();
  const QRect cells = rect->rect();
  if (!row_labels_.isEmpty() && plot_pos.x() < cells.left() && plot_pos.y() >= cells.top() && plot_pos.y() <= cells.bottom()) {
    const int row = static_cast<int>(std::lround(plot_->yAxis->pixelToCoord(plot_pos.y())));
    if (row >= 0 && row < row_labels_.size()) return tokenAt(row_labels_[row], row);
  }
  if (!col_labels_.isEmpty() && plot_pos.y() > cells.bottom() && plot_pos.x() >= cells.left() && plot_pos.x() <= cells.right()) {
    const int col = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(plot_pos.x())));
    if (col >= 0 && col < col_labels_.size()) return tokenAt(col_labels_[col], col);
  }
  return {};
}

void HeatmapView::onMousePress(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  if (zoomable_) {
    // A click selects on release, unless the press became a pan.
    press_pos_ = event->pos();
    press_lo_ = view_lo_;
    dragging_ = false;
    return;
  }
  const QPoint cell = cellAt(plot_->mapTo(this, event->pos()));
  if (cell.y() >= 0) Q_EMIT cellClicked(cell.y(), cell.x());
}

void HeatmapView::onMouseRelease(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || !zoomable_ || press_pos_.x() < 0) return;
  const bool was_drag = dragging_;
  press_pos_ = {-1, -1};
  dragging_ = false;
  plot_->setCursor(zoomed_ ? Qt::OpenHandCursor : Qt::ArrowCursor);
  if (was_drag) return;
  const QPoint cell = cellAt(plot_->mapTo(this, event->pos()));
  if (cell.y() >= 0) Q_EMIT cellClicked(cell.y(), cell.x());
}

void HeatmapView::onWheel(QWheelEvent* event) {
  if (!zoomable_ || rows_ == 0 || cols_ == 0) return;
  const QPointF p = event->position();
  if (!plot_->axisRect()->rect().contains(p.toPoint())) return;
  const double steps = event->angleDelta().y() / 120.0;  // one notch of a mouse wheel is 120
  if (steps == 0.0) return;
  const double factor = std::pow(0.8, steps);  // a notch shows 80% (in) or 125% (out) as many
  const double lo = zoomed_ ? view_lo_ : -0.5;
  const double hi = zoomed_ ? view_hi_ : std::max(rows_, cols_) - 0.5;
  // The point of the diagonal nearest to the pointer stays where it is.
  const double centre = (plot_->xAxis->pixelToCoord(p.x()) + plot_->yAxis->pixelToCoord(p.y())) / 2.0;
  const double new_lo = centre - (centre - lo) * factor;
  setWindow(new_lo, new_lo + (hi - lo) * factor);
  plot_->setCursor(zoomed_ ? Qt::OpenHandCursor : Qt::ArrowCursor);
  event->accept();
}

void HeatmapView::showContextMenu(const QPoint& pos) {
  QMenu menu(this);
  if (const QPoint cell = cellAt(pos); cell.x() >= 0) {
    Q_EMIT cellContextMenu(cell.y(), cell.x(), &menu);
    if (!menu.isEmpty()) menu.addSeparator();
  }
  if (zoomable_) {
    QAction* reset = menu.addAction(QStringLiteral("Reset Zoom (show every position)"), this, &HeatmapView::resetZoom);
    reset->setEnabled(zoomed_);
    menu.addSeparator();
  }
  addFigureExportActions(menu, this, *this);
  menu.exec(plot_->mapToGlobal(pos));
}

void HeatmapView::updateTicks() {
  // How many labels fit along each axis: a row label needs a line of text, a rotated column
  // label too; an upright band label ("h7") needs its width.
  const QFontMetrics metrics(plot_->xAxis->tickLabelFont());
  const int line = metrics.height() + 1;
  // Labels up to this wide are shown whole ("<|endoftext|>" is); longer ones end in an ellipsis.
  const int max_label_px = metrics.averageCharWidth() * 18;
  QCPAxisRect* rect = plot_->axisRect();
  const int height = rect->height() > 20 ? rect->height() : std::max(60, plot_->height() - 90);
  const int width = rect->width() > 20 ? rect->width() : std::max(60, plot_->width() - 130);
  const bool rotate_columns = col_labels_rotated_ && col_band_ == 0 && !col_labels_.isEmpty();
  // Positions whose label always shows: the selected one, and the hovered one (not in exports).
  std::vector<int> forced_rows, forced_cols;
  if (!exporting_ || selection_in_exports_) {
    forced_rows.push_back(highlighted_row_);
    forced_cols.push_back(cell_col_);
  }
  if (!exporting_) forced_rows.push_back(hover_row_);
  if (zoomable_) forced_cols.insert(forced_cols.end(), forced_rows.begin(), forced_rows.end());  // same positions

  auto tick_axis = [&](QCPAxis* axis, int n, const QStringList& labels, int band, const QString& prefix, int length,
                       int label_px, const std::vector<int>& forced) -> int {
    if (band > 0 && n > 0) {
      auto ticker = QSharedPointer<QCPAxisTickerText>::create();
      const int bands = (n + band - 1) / band;
      const int px = std::max(label_px, metrics.horizontalAdvance(prefix + QString::number(bands)) + 6);
      const int step = std::max(1, static_cast<int>(std::ceil(bands * double(px) / std::max(1, length))));
      for (int b = 0; b < bands; b += step) ticker->addTick(b * band + (band - 1) / 2.0, prefix + QString::number(b));
      axis->setTicker(ticker);
      return static_cast<int>(ticker->ticks().size());
    }
    if (!labels.isEmpty() && labels.size() == n) {
      // Thinned by the size of a cell on screen at this zoom: every label when a cell has room
      // for one, else every step-th, on a lattice from position 0 so that labels stay put while
      // panning. A forced label displaces the lattice labels it would overlap.
      auto ticker = QSharedPointer<QCPAxisTickerText>::create();
      const QCPRange range = axis->range();
      const double cell_px = length / std::max(1.0, range.size());
      const int step = std::max(1, static_cast<int>(std::ceil(label_px / cell_px)));
      const int first = std::clamp(static_cast<int>(std::ceil(range.lower)), 0, n - 1);
      const int last = std::clamp(static_cast<int>(std::floor(range.upper)), 0, n - 1);
      auto label = [&](int i) { return metrics.elidedText(labels[i], Qt::ElideRight, max_label_px); };
      for (int i = (first + step - 1) / step * step; i <= last; i += step) {
        const bool crowded = std::any_of(forced.begin(), forced.end(), [&](int f) {
          return f >= first && f <= last && f != i && std::abs(f - i) * cell_px < label_px;
        });
        if (!crowded) ticker->addTick(i, label(i));
      }
      for (int f : forced)
        if (f >= first && f <= last && !ticker->ticks().contains(f)) ticker->addTick(f, label(f));
      axis->setTicker(ticker);
      return static_cast<int>(ticker->ticks().size());
    }
    auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
    ticker->setTickStep(1.0);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    ticker->setTickCount(std::clamp(length / 80, 1, 8));
    axis->setTicker(ticker);
    return 0;
  };
  shown_row_labels_ = tick_axis(plot_->yAxis, rows_, row_labels_, row_band_, row_band_prefix_, height, line, forced_rows);
  shown_col_labels_ = tick_axis(plot_->xAxis, cols_, col_labels_, col_band_, col_band_prefix_, width,
                                rotate_columns ? line : metrics.horizontalAdvance(QStringLiteral("0000")) + 8, forced_cols);
  plot_->xAxis->setTickLabelRotation(rotate_columns ? 90 : 0);
  // The label area fits the longest label of the whole axis, not only of those shown now, so that
  // it does not jump as the pointer moves or the view pans. Measured once per set of labels.
  const QString font_key = plot_->xAxis->tickLabelFont().key();
  auto widest = [&](const QStringList& labels, LabelWidth& cache) {
    if (cache.font == font_key && cache.labels.size() == labels.size() && cache.labels == labels) return cache.px;
    int w = 0;
    for (const QString& l : labels) w = std::max(w, std::min(max_label_px, metrics.horizontalAdvance(l)));
    cache = {labels, font_key, w};
    return w;
  };
  const int title_px = QFontMetrics(plot_->yAxis->labelFont()).height();
  QMargins minimum(0, 0, 0, 0);
  if (plot_->yAxis->tickLabels() && row_band_ == 0 && row_labels_.size() == rows_ && rows_ > 0)
    minimum.setLeft(widest(row_labels_, row_labels_px_) + title_px + 16);
  if (rotate_columns && col_labels_.size() == cols_ && cols_ > 0) minimum.setBottom(widest(col_labels_, col_labels_px_) + title_px + 16);
  // QCustomPlot leaves out a cached tick label that would cross the plot's border
  // (QCPAxisPainterPrivate::placeTickLabel, labelClippedByBorder): row 0's label, centred on the
  // top row, needs half a line above the cells.
  if (plot_->yAxis->tickLabels() && !row_labels_.isEmpty()) minimum.setTop(line / 2 + 2);
  rect->setMinimumMargins(minimum);
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
