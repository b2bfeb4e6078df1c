// A scroll area around an ImageGridView that is as tall as the grid needs at its width and no
// taller (the room below goes to whatever follows it in the layout), and scrolls once the grid
// would have to shrink its cells below their minimum (ImageGridView::setMinCellWidth): the head
// grid keeps its labels and badges readable in a narrow or short panel.
#pragma once

#include <QScrollArea>

namespace hs::ui {

class ImageGridView;

class GridScrollArea : public QScrollArea {
  Q_OBJECT

 public:
  // Takes `grid` as its widget; the grid's own height-for-width is turned off, so that the area
  // gives it the viewport's size (no less than the grid's minimum: then it scrolls).
  explicit GridScrollArea(ImageGridView* grid, QWidget* parent = nullptr);
  ImageGridView* grid() const { return grid_; }
  QSize sizeHint() const override;

 protected:
  void resizeEvent(QResizeEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  ImageGridView* grid_;
  int hinted_width_ = -1;  // the width sizeHint() was last asked at
};

}  // namespace hs::ui
