// A grid of small images with labels: the head thumbnails (one row per layer) and the per-head
// results r_h of the concat-vs-sum view. Images are painted scaled without smoothing, so a
// 144-head model costs 144 drawImage calls, not 144 plot widgets.
#pragma once

#include <QImage>
#include <QStringList>
#include <QWidget>

#include <vector>

#include "ui/base/figure.h"

class QMenu;

namespace hs::ui {

class ImageGridView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  struct Item {
    QImage image;
    QString label;    // drawn under the image when there is room ("L3H7")
    QString tooltip;
    QString tag;      // a short mark drawn on the image's corner ("0": the head is zero-ablated)
  };

  explicit ImageGridView(QWidget* parent = nullptr);

  void setItems(std::vector<Item> items, int columns);
  void clear();
  int itemCount() const { return static_cast<int>(items_.size()); }
  const Item& item(int index) const { return items_[static_cast<size_t>(index)]; }
  void setRowHeaders(const QStringList& headers);
  void setColumnHeaders(const QStringList& headers);
  // Width / height of each image cell (1 for square patterns).
  void setCellAspect(double aspect);
  void setMaxCellWidth(int px);
  void setSelectedIndex(int index);
  int selectedIndex() const { return selected_; }
  // An index whose cell gets a light outline (e.g. the head under the mouse elsewhere); -1: none.
  void setMarkedIndex(int index);
  // Items picked for an action on several at once (Ctrl+click), outlined with dashes.
  void setPickedIndices(const QList<int>& indices);
  const QList<int>& pickedIndices() const { return picked_; }

  // The rectangle of an item's image in widget coordinates (tests click there).
  QRect itemRect(int index) const;
  int indexAt(const QPoint& pos) const;

  void setFigureText(const FigureText& text, const QString& file_stem);
  FigureText figureText() const override { return figure_text_; }
  QSize figureSize() const override { return size(); }
  void paintFigure(QPainter& painter, QSize size) override;
  QString figureFileStem() const override { return file_stem_; }

  QSize sizeHint() const override;
  // The height the grid needs at `width` (cells as wide as the width allows, up to the maximum).
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize minimumSizeHint() const override;

 Q_SIGNALS:
  void itemClicked(int index);
  void itemCtrlClicked(int index);  // a click with Ctrl held: pick or unpick it
  void itemHovered(int index);  // -1 when leaving
  // Right-click on an item: receivers add their actions to `menu` (the export actions follow).
  void itemContextMenu(int index, QMenu* menu);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;

 private:
  struct Geometry {
    int header_w = 0, header_h = 0, cell_w = 0, cell_h = 0, label_h = 0, gap = 4, x0 = 0, y0 = 0;
  };
  Geometry geometryFor(QSize size) const;
  QRect imageRect(const Geometry& g, int index) const;
  void paintGrid(QPainter& painter, QSize size) const;
  int rows() const;

  std::vector<Item> items_;
  int columns_ = 1;
  QStringList row_headers_, column_headers_;
  double aspect_ = 1.0;
  int max_cell_w_ = 120;
  int selected_ = -1;
  int marked_ = -1;
  QList<int> picked_;
  int hovered_ = -1;
  FigureText figure_text_;
  QString file_stem_ = QStringLiteral("grid");
};

}  // namespace hs::ui
