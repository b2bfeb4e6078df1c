// Tick labels that follow the plot's size.
#pragma once

#include <functional>

class QCustomPlot;
class QObject;

namespace hs::ui {

// Tick labels are thinned for the axis length, which is only known once the plot is laid out (a
// view built while hidden in another tab has none). After a layout of `plot` whose axis rect
// differs noticeably from the one seen at the last such call, calls `update_ticks` and queues a
// replot. The size compared is the one observed, never the fallback length `update_ticks` may
// thin for: comparing against that had replotted a plot with a collapsed axis rect without end,
// keeping the GUI thread busy while the window sat idle. `context` owns the connection.
void retickAfterLayout(QCustomPlot* plot, QObject* context, std::function<void()> update_ticks);

}  // namespace hs::ui
