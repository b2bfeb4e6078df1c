#include "ui/widgets/plot_ticks.h"

#include <QSize>

#include <algorithm>
#include <cstdlib>

#include "qcustomplot.h"

namespace hs::ui {

void styleValueAxis(QCPAxis* axis) {
  axis->setSubTicks(false);
  axis->setBasePen(QPen(QColor(0x88, 0x88, 0x88)));
  axis->setTickPen(QPen(QColor(0x88, 0x88, 0x88)));
  axis->setTickLabelColor(QColor(0x30, 0x30, 0x30));
  axis->setLabelColor(QColor(0x40, 0x40, 0x40));
}

QCustomPlot* newLivePlot(QWidget* parent, const QString& object_name) {
  auto* plot = new QCustomPlot(parent);
  plot->setObjectName(object_name);
  plot->setMouseTracking(true);
  plot->setFocusPolicy(Qt::ClickFocus);
  plot->setPlottingHint(QCP::phCacheLabels, true);
  plot->setPlottingHint(QCP::phImmediateRefresh, false);
  plot->layer(QStringLiteral("overlay"))->setMode(QCPLayer::lmLogical);
  return plot;
}

void retickAfterLayout(QCustomPlot* plot, QObject* context, std::function<void()> update_ticks) {
  QObject::connect(plot, &QCustomPlot::afterLayout, context,
                   [plot, seen = QSize(-1000, -1000), update = std::move(update_ticks)]() mutable {
                     const QSize now(plot->axisRect()->width(), plot->axisRect()->height());
                     const auto differs = [](int a, int b) { return std::abs(a - b) > std::max(12, b / 8); };
                     if (!differs(now.width(), seen.width()) && !differs(now.height(), seen.height())) return;
                     seen = now;
                     update();
                     plot->replot(QCustomPlot::rpQueuedReplot);
                   });
}

}  // namespace hs::ui
