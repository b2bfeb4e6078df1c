// Tick labels that follow the plot's size.
#pragma once

#include <QSize>

#include <functional>

class QCustomPlot;
class QObject;

namespace hs::ui {

// Tick labels are thinned for the axis length, which is only known once the plot is laid out (a
// view built while hidden in another tab has none). After each layout of `plot` whose axis rect
// differs noticeably from *thinned_for (the lengths the labels were last thinned for), calls
// `update_ticks` and queues a replot. `context` owns the connection.
void retickAfterLayout(QCustomPlot* plot, QObject* context, const QSize* thinned_for,
                       std::function<void()> update_ticks);

}  // namespace hs::ui
