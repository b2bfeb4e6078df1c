#include "ui/widgets/plot_ticks.h"

#include <QSize>

#include <algorithm>
#include <cstdlib>

#include "qcustomplot.h"

namespace hs::ui {

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
