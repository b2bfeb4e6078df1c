#include "ui/widgets/bar_chart_view.h"

#include <QMenu>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <map>

#include "qcustomplot.h"
#include "ui/style/colormap.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/plot_ticks.h"

namespace hs::ui {

BarChartView::BarChartView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  plot_ = newLivePlot(this, QStringLiteral("barPlot"));
  layout->addWidget(plot_);
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    styleValueAxis(axis);
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.9);
    axis->setTickLabelFont(f);
  }
  plot_->xAxis->grid()->setVisible(false);
  plot_->xAxis->setTickLength(0, 3);
  plot_->yAxis->grid()->setPen(QPen(QColor(0xe4, 0xe4, 0xe4)));
  plot_->yAxis->grid()->setZeroLinePen(QPen(QColor(0x70, 0x70, 0x70)));
  plot_->xAxis->setTickLabelRotation(90);
  highlight_ = new QCPItemRect(plot_);
  highlight_->setPen(QPen(accentColor(), 2.5));
  highlight_->setBrush(Qt::NoBrush);
  highlight_->setVisible(false);
  plot_->legend->setVisible(false);
  plot_->legend->setBorderPen(QPen(QColor(0xcc, 0xcc, 0xcc)));
  QFont lf = font();
  lf.setPointSizeF(lf.pointSizeF() * 0.85);
  plot_->legend->setFont(lf);
  // The legend (when there is one) gets a row of its own above the bars: see setLegend.
  plot_->axisRect()->insetLayout()->take(plot_->legend);
  plot_->legend->setFillOrder(QCPLegend::foColumnsFirst);
  plot_->legend->setBorderPen(Qt::NoPen);
  plot_->legend->setMargins(QMargins(0, 0, 0, 0));
  plot_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(plot_, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
    QMenu menu(this);
    addFigureExportActions(menu, this, *this);
    menu.exec(plot_->mapToGlobal(pos));
  });
  connect(plot_, &QCustomPlot::mouseMove, this, &BarChartView::onMouseMove);
  connect(plot_, &QCustomPlot::mousePress, this, &BarChartView::onMousePress);
  retickAfterLayout(plot_, this, [this] { updateTicks(); });
  setMinimumSize(200, 140);
}

BarChartView::~BarChartView() = default;

void BarChartView::setBars(std::vector<Bar> bars) {
  bars_ = std::move(bars);
  if (highlighted_ >= barCount()) highlighted_ = -1;
  rebuild();
}

void BarChartView::setLegend(const std::vector<std::pair<QString, QColor>>& entries) {
  legend_ = entries;
  if (!legend_.empty() && plot_->plotLayout()->rowCount() == 1) {
    // A row of its own above the bars, so the legend never covers one.
    plot_->plotLayout()->insertRow(0);
    plot_->plotLayout()->addElement(0, 0, plot_->legend);
    plot_->plotLayout()->setRowStretchFactor(0, 0.001);
    plot_->plotLayout()->setRowSpacing(0);
  }
  rebuild();
}

void BarChartView::rebuild() {
  plot_->clearPlottables();
  // One QCPBars per colour: QCustomPlot gives a bar series a single brush.
  std::map<QRgb, QCPBars*> series;
  for (int i = 0; i < barCount(); ++i) {
    const Bar& b = bars_[static_cast<size_t>(i)];
    QCPBars*& s = series[b.color.rgba()];
    if (!s) {
      s = new QCPBars(plot_->xAxis, plot_->yAxis);
      s->setWidth(0.8);
      s->setPen(Qt::NoPen);
      s->setBrush(b.color);
      s->setAntialiased(false);
      s->setSelectable(QCP::stNone);
      s->removeFromLegend();
    }
    s->addData(i, b.value);
  }
  plot_->legend->clearItems();
  for (const auto& [name, color] : legend_) {
    auto* g = plot_->addGraph();  // an invisible graph, only to carry a legend entry
    g->setName(name);
    g->setLineStyle(QCPGraph::lsNone);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, color, color, 9));
  }
  plot_->legend->setVisible(!legend_.empty() && !bars_.empty());
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {  // an empty chart is blank
    axis->setVisible(!bars_.empty());
  }
  plot_->yAxis->grid()->setVisible(!bars_.empty());
  double lo = 0.0, hi = 0.0;
  for (const Bar& b : bars_) {
    lo = std::min(lo, b.value);
    hi = std::max(hi, b.value);
  }
  const double pad = (hi - lo) * 0.06 + 1e-9;
  if (fixed_range_)
    plot_->yAxis->setRange(range_lo_, range_hi_);
  else
    plot_->yAxis->setRange(lo < 0 ? lo - pad : 0.0, hi + pad);
  plot_->xAxis->setRange(-0.7, std::max(1, barCount()) - 0.3);
  setHighlighted(highlighted_);
  updateTicks();
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

double BarChartView::plottedValue(int index) const {
  for (int i = 0; i < plot_->plottableCount(); ++i) {
    auto* bars = qobject_cast<QCPBars*>(plot_->plottable(i));
    if (!bars) continue;
    auto it = bars->data()->findBegin(index - 0.25, false);
    if (it != bars->data()->constEnd() && std::fabs(it->key - index) < 0.25) return it->value;
  }
  return std::nan("");
}

void BarChartView::setHighlighted(int index) {
  highlighted_ = index;
  if (index >= 0 && index < barCount()) {
    const double v = bars_[static_cast<size_t>(index)].value;
    highlight_->topLeft->setCoords(index - 0.55, std::max(0.0, v));
    highlight_->bottomRight->setCoords(index + 0.55, std::min(0.0, v));
    highlight_->setVisible(true);
  } else {
    highlight_->setVisible(false);
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void BarChartView::setValueAxisTitle(const QString& title) {
  plot_->yAxis->setLabel(title);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void BarChartView::setValueRange(double lo, double hi) {
  fixed_range_ = true;
  range_lo_ = lo;
  range_hi_ = hi;
  rebuild();
}

void BarChartView::clearValueRange() {
  if (!fixed_range_) return;
  fixed_range_ = false;
  rebuild();
}

void BarChartView::setTooltipFormatter(std::function<QString(int)> formatter) { tooltip_ = std::move(formatter); }

QPoint BarChartView::barCenter(int index) const {
  const double v = index >= 0 && index < barCount() ? bars_[static_cast<size_t>(index)].value : 0.0;
  const QPoint p(static_cast<int>(plot_->xAxis->coordToPixel(index)), static_cast<int>(plot_->yAxis->coordToPixel(v / 2)));
  return plot_->mapTo(this, p);
}

void BarChartView::setFigureText(const FigureText& text, const QString& file_stem) {
  figure_text_ = text;
  file_stem_ = file_stem;
}

QSize BarChartView::figureSize() const {
  const QSize s = plot_->size();
  return (s.width() < 50 || s.height() < 50) ? QSize(1200, 500) : s;
}

void BarChartView::paintFigure(QPainter& painter, QSize size) {
  // The selected bar's outline marks where the person is, not the data: not exported.
  const bool highlighted = highlight_->visible();
  highlight_->setVisible(false);
  paintPlotInto(plot_, painter, size);
  highlight_->setVisible(highlighted);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void BarChartView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  updateTicks();
}

void BarChartView::updateTicks() {
  const int line = QFontMetrics(plot_->xAxis->tickLabelFont()).height() + 1;
  const int width = plot_->axisRect()->width() > 20 ? plot_->axisRect()->width() : std::max(60, plot_->width() - 80);
  const int n = barCount();
  const int step = std::max(1, static_cast<int>(std::ceil(n * double(line) / std::max(1, width))));
  auto ticker = QSharedPointer<QCPAxisTickerText>::create();
  // Room for "<|endoftext|> (0)" whole: a token label with its position.
  for (int i = 0; i < n; i += step) ticker->addTick(i, elideLabel(bars_[static_cast<size_t>(i)].label, 18));
  plot_->xAxis->setTicker(ticker);
}

int BarChartView::barAt(const QPoint& plot_pos) const {
  if (!plot_->axisRect()->rect().contains(plot_pos)) return -1;
  const int i = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(plot_pos.x())));
  return i >= 0 && i < barCount() ? i : -1;
}

void BarChartView::onMouseMove(QMouseEvent* event) {
  const int i = barAt(event->pos());
  if (i == hovered_) return;
  hovered_ = i;
  if (i < 0) {
    QToolTip::hideText();
  } else {
    const Bar& b = bars_[static_cast<size_t>(i)];
    QToolTip::showText(event->globalPosition().toPoint(), tooltip_ ? tooltip_(i) : b.label + ": " + formatNumber(b.value),
                       plot_);
  }
  Q_EMIT barHovered(i);
}

void BarChartView::onMousePress(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  const int i = barAt(event->pos());
  if (i >= 0) Q_EMIT barClicked(i);
}

}  // namespace hs::ui
