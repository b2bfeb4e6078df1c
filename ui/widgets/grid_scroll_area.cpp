#include "ui/widgets/grid_scroll_area.h"

#include <QEvent>
#include <QFrame>
#include <QResizeEvent>
#include <QScrollBar>

#include <algorithm>

#include "ui/widgets/image_grid_view.h"

namespace hs::ui {

GridScrollArea::GridScrollArea(ImageGridView* grid, QWidget* parent) : QScrollArea(parent), grid_(grid) {
  // QScrollArea would size a height-for-width widget by it alone and never let it shrink.
  QSizePolicy policy = grid_->sizePolicy();
  policy.setHeightForWidth(false);
  grid_->setSizePolicy(policy);
  setWidget(grid_);
  setWidgetResizable(true);
  setFrameShape(QFrame::NoFrame);
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
  viewport()->installEventFilter(this);
}

QSize GridScrollArea::sizeHint() const {
  const int frame = 2 * frameWidth();
  const int w = width() > frame + 20 ? width() - frame : grid_->sizeHint().width();
  int h = grid_->heightForWidth(w);
  // At this width the cells are at their smallest and wider than the area: room for the bar.
  if (grid_->minimumSizeHint().width() > w) h += horizontalScrollBar()->sizeHint().height();
  return QSize(QScrollArea::sizeHint().width(), h + frame);
}

void GridScrollArea::resizeEvent(QResizeEvent* event) {
  QScrollArea::resizeEvent(event);
  // The hint depends on the width: a new width asks the layout again (once per width).
  if (event->size().width() != hinted_width_) {
    hinted_width_ = event->size().width();
    updateGeometry();
  }
}

bool GridScrollArea::eventFilter(QObject* watched, QEvent* event) {
  // The grid's updateGeometry (new items, another order) posts a layout request to its parent,
  // the viewport, which has no layout of its own to pass it on.
  if (watched == viewport() && event->type() == QEvent::LayoutRequest) updateGeometry();
  return QScrollArea::eventFilter(watched, event);
}

}  // namespace hs::ui
