// The plots of the live views: how they are made and how their tick labels follow their size.
#pragma once

#include <functional>

class QCPAxis;
class QCustomPlot;
class QObject;
class QString;
class QWidget;

namespace hs::ui {

// A QCustomPlot set up to redraw on every keystroke without painting more than once a frame:
// replots queue an update() instead of repainting the window there and then, tick labels are
// cached, and everything is drawn into one paint buffer. QCustomPlot's default keeps its
// "overlay" layer in a second, transparent buffer of the plot's full size, cleared on every
// replot and alpha-blended over the first on every paint; no view draws on that layer.
// The plot takes the keyboard from the prompt only when clicked.
QCustomPlot* newLivePlot(QWidget* parent, const QString& object_name);

// The look of a value axis in the live plots (bars, scatters): grey lines, dark labels, no sub-ticks.
void styleValueAxis(QCPAxis* axis);

// Tick labels are thinned for the axis length, which is only known once the plot is laid out (a
// view built while hidden in another tab has none). After a layout of `plot` whose axis rect
// differs noticeably from the one seen at the last such call, calls `update_ticks` and queues a
// replot. The size compared is the one observed, never the fallback length `update_ticks` may
// thin for: comparing against that had replotted a plot with a collapsed axis rect without end,
// keeping the GUI thread busy while the window sat idle. `context` owns the connection.
void retickAfterLayout(QCustomPlot* plot, QObject* context, std::function<void()> update_ticks);

}  // namespace hs::ui
