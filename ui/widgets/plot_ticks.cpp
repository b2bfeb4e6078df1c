#include "ui/widgets/plot_ticks.h"

#include <algorithm>
#include <cstdlib>

#include "qcustomplot.h"

namespace hs::ui {

void retickAfterLayout(QCustomPlot* plot, QObject* context, const QSize* thinned_for,
                       std::function<void()> update_ticks) {
  QObject::connect(plot, &QCustomPlot::afterLayout, context, [plot, thinned_for, update = std::move(update_ticks)] {
    const QSize now(plot->axisRect()->width(), plot->axisRect()->height());
    const auto differs = [](int a, int b) { return std::abs(a - b) > std::max(12, b / 8); };
    if (differs(now.width(), thinned_for->width()) || differs(now.height(), thinned_for->height())) {
      update();
      plot->replot(QCustomPlot::rpQueuedReplot);
    }
  });
}

}  // namespace hs::ui
