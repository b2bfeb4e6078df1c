#include "ui/widgets/scatter_view.h"

#include <QMenu>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

#include "qcustomplot.h"
#include "ui/style/colormap.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/plot_ticks.h"

namespace hs::ui {
namespace {

// The part of the sequential map a point is drawn with: its white end would hide a point.
constexpr double kLightest = 0.3;
QColor groupColor(int group, int groups) {
  const double t = groups > 1 ? static_cast<double>(group) / (groups - 1) : 1.0;
  return QColor::fromRgb(colorAt(ColorMap::Sequential, kLightest + (1.0 - kLightest) * t));
}

}  // namespace

ScatterView::ScatterView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  plot_ = newLivePlot(this, QStringLiteral("scatterPlot"));
  layout->addWidget(plot_);
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    styleValueAxis(axis);
    axis->grid()->setPen(QPen(QColor(0xe8, 0xe8, 0xe8)));
    axis->grid()->setZeroLinePen(QPen(QColor(0xb0, 0xb0, 0xb0)));
    axis->ticker()->setTickCount(4);  // the pane is narrow: more labels run into each other
  }
  diagonal_ = new QCPItemLine(plot_);
  diagonal_->setPen(QPen(QColor(0x60, 0x60, 0x60), 1.2, Qt::DashLine));
  diagonal_->setSelectable(false);
  message_ = new QCPItemText(plot_);
  message_->position->setType(QCPItemPosition::ptAxisRectRatio);
  message_->position->setCoords(0.5, 0.5);
  message_->setColor(QColor(0x50, 0x50, 0x50));
  message_->setSelectable(false);
  message_->setTextAlignment(Qt::AlignCenter);

  // The colour of a point is its group (a layer): the scale beside the axes says which.
  scale_ = new QCPColorScale(plot_);
  scale_->setType(QCPAxis::atRight);
  scale_->setBarWidth(10);
  scale_->setRangeDrag(false);
  scale_->setRangeZoom(false);
  scale_->axis()->setSubTicks(false);
  scale_->axis()->setTickLabelColor(QColor(0x30, 0x30, 0x30));
  plot_->plotLayout()->addElement(0, 1, scale_);
  auto* group = new QCPMarginGroup(plot_);
  plot_->axisRect()->setMarginGroup(QCP::msTop | QCP::msBottom, group);
  scale_->setMarginGroup(QCP::msTop | QCP::msBottom, group);

  plot_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(plot_, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
    QMenu menu(this);
    addFigureExportActions(menu, this, *this);
    menu.exec(plot_->mapToGlobal(pos));
  });
  connect(plot_, &QCustomPlot::mouseMove, this, &ScatterView::onMouseMove);
  connect(plot_, &QCustomPlot::mousePress, this, &ScatterView::onMousePress);
  setMinimumSize(220, 200);
  clear();
}

ScatterView::~ScatterView() = default;

void ScatterView::setPoints(std::vector<Point> points, int groups, const QString& group_title) {
  points_ = std::move(points);
  groups_ = std::max(1, groups);
  QCPColorGradient gradient;
  gradient.clearColorStops();
  for (int i = 0; i <= 8; ++i) {
    const double t = i / 8.0;
    gradient.setColorStopAt(t, QColor::fromRgb(colorAt(ColorMap::Sequential, kLightest + (1.0 - kLightest) * t)));
  }
  scale_->setGradient(gradient);
  scale_->setDataRange(QCPRange(0.0, std::max(1, groups_ - 1)));
  scale_->setLabel(group_title);
  auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
  ticker->setTickStep(std::max(1, (groups_ + 5) / 6));
  ticker->setScaleStrategy(QCPAxisTickerFixed::ssNone);
  scale_->axis()->setTicker(ticker);
  message_->setText({});
  if (highlighted_ >= pointCount()) highlighted_ = -1;
  rebuild();
}

void ScatterView::clear(const QString& message) {
  points_.clear();
  highlighted_ = -1;
  message_->setText(message);
  rebuild();
}

void ScatterView::rebuild() {
  plot_->clearGraphs();
  series_.clear();
  highlight_ = nullptr;
  for (int g = 0; g < groups_; ++g) {
    QCPGraph* graph = plot_->addGraph();
    graph->setLineStyle(QCPGraph::lsNone);
    const QColor c = groupColor(g, groups_);
    graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, c.darker(115), c, 6));
    graph->setSelectable(QCP::stNone);
    series_.push_back(graph);
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  double x_lo = lo, x_hi = hi, y_lo = lo, y_hi = hi;
  for (const Point& p : points_) {
    series_[static_cast<size_t>(std::clamp(p.group, 0, groups_ - 1))]->addData(p.x, p.y);
    lo = std::min({lo, p.x, p.y});
    hi = std::max({hi, p.x, p.y});
    x_lo = std::min(x_lo, p.x), x_hi = std::max(x_hi, p.x);
    y_lo = std::min(y_lo, p.y), y_hi = std::max(y_hi, p.y);
  }
  highlight_ = plot_->addGraph();
  highlight_->setLineStyle(QCPGraph::lsNone);
  highlight_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(accentColor(), 2.5), Qt::NoBrush, 14));
  highlight_->setSelectable(QCP::stNone);
  // One range for both axes, so the diagonal is the diagonal and distances from it compare.
  if (points_.empty()) lo = 0.0, hi = 1.0;
  const double pad = std::max(1e-6, (hi - lo) * 0.06);
  plot_->xAxis->setRange(lo - pad, hi + pad);
  plot_->yAxis->setRange(lo - pad, hi + pad);
  diagonal_->start->setCoords(lo - pad, lo - pad);
  diagonal_->end->setCoords(hi + pad, hi + pad);
  diagonal_->setVisible(!points_.empty() && diagonal_wanted_);
  if (!diagonal_wanted_ && !points_.empty()) {
    // Two quantities of their own units: each axis fits its values.
    auto padded = [](double a, double b) {
      const double p = std::max(1e-6, (b - a) * 0.06);
      return QCPRange(a - p, b + p);
    };
    plot_->xAxis->setRange(padded(x_lo, x_hi));
    plot_->yAxis->setRange(padded(y_lo, y_hi));
  }
  scale_->setVisible(!points_.empty());
  setHighlighted(highlighted_);
}

std::pair<double, double> ScatterView::plottedPoint(int index) const {
  if (index < 0 || index >= pointCount()) return {std::nan(""), std::nan("")};
  // Looked up in its group's graph (kept sorted by x there), so a test sees what is drawn.
  const Point& p = points_[static_cast<size_t>(index)];
  const QCPGraph* graph = series_[static_cast<size_t>(std::clamp(p.group, 0, groups_ - 1))];
  for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it)
    if (it->key == p.x && it->value == p.y) return {it->key, it->value};
  return {std::nan(""), std::nan("")};
}

bool ScatterView::diagonalShown() const {
  if (!diagonal_->visible()) return false;
  const QPointF a = diagonal_->start->coords(), b = diagonal_->end->coords();
  return a.x() == a.y() && b.x() == b.y() && a.x() <= plot_->xAxis->range().lower &&
         b.x() >= plot_->xAxis->range().upper;
}

void ScatterView::setDiagonalShown(bool shown) {
  if (shown == diagonal_wanted_) return;
  diagonal_wanted_ = shown;
  rebuild();
}

void ScatterView::setAxisTitles(const QString& x, const QString& y) {
  plot_->xAxis->setLabel(x);
  plot_->yAxis->setLabel(y);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void ScatterView::setHighlighted(int index) {
  highlighted_ = index >= 0 && index < pointCount() ? index : -1;
  if (highlight_) {
    highlight_->data()->clear();
    if (highlighted_ >= 0) highlight_->addData(point(highlighted_).x, point(highlighted_).y);
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void ScatterView::setTooltipFormatter(std::function<QString(int)> formatter) { tooltip_ = std::move(formatter); }

QPoint ScatterView::pointCenter(int index) const {
  if (index < 0 || index >= pointCount()) return {};
  const Point& p = point(index);
  const QPoint at(static_cast<int>(std::lround(plot_->xAxis->coordToPixel(p.x))),
                  static_cast<int>(std::lround(plot_->yAxis->coordToPixel(p.y))));
  return plot_->mapTo(this, at);
}

void ScatterView::replotNow() { plot_->replot(QCustomPlot::rpImmediateRefresh); }

void ScatterView::setFigureText(const FigureText& text, const QString& file_stem) {
  figure_text_ = text;
  file_stem_ = file_stem;
}

QSize ScatterView::figureSize() const {
  const QSize s = plot_->size();
  return (s.width() < 50 || s.height() < 50) ? QSize(720, 640) : s;
}

void ScatterView::paintFigure(QPainter& painter, QSize size) {
  // The selected point's ring marks where the person is, not the data: not exported.
  const bool ring = highlight_ && highlight_->visible();
  if (highlight_) highlight_->setVisible(false);
  paintPlotInto(plot_, painter, size);
  if (highlight_) highlight_->setVisible(ring);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

int ScatterView::pointAt(const QPoint& plot_pos) const {
  if (!plot_->axisRect()->rect().contains(plot_pos)) return -1;
  constexpr double kReachPx = 7.0;
  int best = -1;
  double best_d = kReachPx * kReachPx;
  for (int i = 0; i < pointCount(); ++i) {
    const double dx = plot_->xAxis->coordToPixel(point(i).x) - plot_pos.x();
    const double dy = plot_->yAxis->coordToPixel(point(i).y) - plot_pos.y();
    if (dx * dx + dy * dy <= best_d) {
      best_d = dx * dx + dy * dy;
      best = i;
    }
  }
  return best;
}

void ScatterView::onMouseMove(QMouseEvent* event) {
  const int i = pointAt(event->pos());
  if (i == hovered_) return;
  hovered_ = i;
  if (i < 0) {
    QToolTip::hideText();
    return;
  }
  QToolTip::showText(event->globalPosition().toPoint(),
                     tooltip_ ? tooltip_(i)
                              : QStringLiteral("(%1, %2)").arg(formatNumber(point(i).x), formatNumber(point(i).y)),
                     plot_);
}

void ScatterView::onMousePress(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  const int i = pointAt(event->pos());
  if (i >= 0) Q_EMIT pointClicked(i);
}

}  // namespace hs::ui
