// A grid of small images with labels: the head thumbnails (one row per layer) and the per-head
// results r_h of the concat-vs-sum view. Images are painted scaled without smoothing, so a
// 144-head model costs 144 drawImage calls, not 144 plot widgets.
//
// Items keep their index (a head's is layer * n_head + head) whatever the order they are shown
// in: setDisplayOrder puts them in any order, leaving cells empty or items out (sorting and filtering
// the heads by a score), and clicks, the selection and itemRect always speak of item indices.
#pragma once

#include <QHash>
#include <QImage>
#include <QPixmap>
#include <QStringList>
#include <QWidget>

#include <functional>
#include <vector>

#include "ui/base/figure.h"
#include "ui/widgets/color_legend.h"

class QMenu;

namespace hs::ui {

class ImageGridView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  struct Item {
    QImage image;
    QString label;    // drawn under the image when there is room ("L3H7")
    QString tooltip;  // empty: the tooltip provider's, if any
    // A small value drawn in the image's top-right corner (for a causal pattern, the masked
    // half, so it hides no weight), filled with badge_color; only a colour chip when the cell is
    // too small for text. Empty: none.
    QString badge = {};
    QColor badge_color = {};
    QString tag = {};  // a short mark on the image's bottom-left corner ("0": the head is zero-ablated)
  };

  // Cells narrower than this leave the labels under the images out (and a badge's text is cut
  // to a colour chip a little below it).
  static constexpr int kLabelledCellWidth = 40;

  explicit ImageGridView(QWidget* parent = nullptr);

  void setItems(std::vector<Item> items, int columns);
  void clear();
  // Display order: slot s (row-major, `columns` per row) shows item order[s]; -1 leaves the cell
  // empty, and an item in no slot is not shown. Stays set across setItems; indices past the item
  // count are treated as -1. clearDisplayOrder() (the default): item i in slot i.
  void setDisplayOrder(std::vector<int> order);
  void clearDisplayOrder();
  bool hasDisplayOrder() const { return has_order_; }
  const std::vector<int>& displayOrder() const { return order_; }
  // The slot showing item `index`, or -1 when it is not shown.
  int slotOf(int index) const;
  // Tooltip text of items whose own tooltip is empty, made when the mouse rests on them (so a
  // grid that changes with every keystroke builds no strings it does not show).
  void setTooltipProvider(std::function<QString(int index)> provider);
  // What hovering item `index` shows: its own tooltip, else the provider's.
  QString tooltipFor(int index) const;
  int itemCount() const { return static_cast<int>(items_.size()); }
  const Item& item(int index) const { return items_[static_cast<size_t>(index)]; }
  void setRowHeaders(const QStringList& headers);
  void setColumnHeaders(const QStringList& headers);
  // Width / height of each image cell (1 for square patterns).
  void setCellAspect(double aspect);
  void setMaxCellWidth(int px);
  // The narrowest a cell gets: below it the grid stops shrinking and asks for more room
  // (minimumSizeHint), so a scroll area around it scrolls instead (the head grid keeps its labels
  // and badges readable). Default 6.
  void setMinCellWidth(int px);
  int minCellWidth() const { return min_cell_w_; }
  // The width of the cells as laid out now.
  int cellWidth() const;
  // Colour keys drawn under the cells, one per line: in exported figures always, on screen too
  // unless `on_screen` is false (the head panel shows its key as a widget under its scroll area).
  void setColorKeys(std::vector<ColorKey> keys, bool on_screen = true);
  const std::vector<ColorKey>& colorKeys() const { return keys_; }
  bool colorKeysOnScreen() const { return keys_on_screen_; }
  void setSelectedIndex(int index);
  int selectedIndex() const { return selected_; }
  // An index whose cell gets a light outline (e.g. the head under the mouse elsewhere); -1: none.
  void setMarkedIndex(int index);
  // Items picked for an action on several at once (Ctrl+click), outlined with dashes.
  void setPickedIndices(const QList<int>& indices);
  const QList<int>& pickedIndices() const { return picked_; }
  // The item under the pointer (outlined with dashes), or -1. A new set of items of another
  // count forgets it (its index was an item of the old set) until the pointer moves again.
  int hoveredIndex() const { return hovered_; }
  // Every shown item drawn with an outline other than the selection's: the picked, the hovered
  // and the marked ones, in that order.
  QList<int> outlinedIndices() const;

  // The rectangle of an item's image in widget coordinates (tests click there); empty when the
  // item is not shown.
  QRect itemRect(int index) const;
  int indexAt(const QPoint& pos) const;

  void setFigureText(const FigureText& text, const QString& file_stem);
  FigureText figureText() const override { return figure_text_; }
  // As wide as the widget, as tall as its cells (no blank band below them), plus the colour keys.
  QSize figureSize() const override;
  void paintFigure(QPainter& painter, QSize size) override;
  QString figureFileStem() const override { return file_stem_; }

  QSize sizeHint() const override;
  // The height the grid needs at `width` (cells as wide as the width allows, up to the maximum),
  // with its on-screen keys. The size policy says whether layouts use it (on by default; the
  // head grid turns it off so that its scroll area gives it the viewport's height).
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
  void changeEvent(QEvent* event) override;

 private:
  struct Geometry {
    int header_w = 0, header_h = 0, cell_w = 0, cell_h = 0, label_h = 0, gap = 4, x0 = 0, y0 = 0;
  };
  // `with_keys`: room is kept below the cells for the colour keys (figures; on screen when shown there).
  Geometry geometryFor(QSize size, bool with_keys) const;
  int keysHeight() const;
  int cellsHeight(const Geometry& g) const;
  QRect imageRect(const Geometry& g, int slot) const;
  // `on_screen`: badges come from badge_cache_ (exported figures draw them afresh, at any scale).
  void paintGrid(QPainter& painter, QSize size, bool on_screen) const;
  void paintBadge(QPainter& painter, const QFontMetrics& metrics, const QRect& image, const Item& item,
                  bool on_screen) const;
  int rows() const;
  int cellCount() const;
  int itemAt(int slot) const;  // -1: empty

  // Badges as drawn on screen, by text, colour and size: a score shown with two decimals has at most
  // 101 looks, and a pixmap is several times cheaper to paint than a filled, outlined text box
  // (docs/benchmarks.md, "Measurements behind the code").
  struct BadgeKey {
    QString text;
    QRgb color;
    QSize size;
    bool operator==(const BadgeKey&) const = default;
  };
  friend size_t qHash(const BadgeKey& key, size_t seed) { return qHashMulti(seed, key.text, key.color, key.size.width(), key.size.height()); }
  mutable QHash<BadgeKey, QPixmap> badge_cache_;
  std::vector<Item> items_;
  std::vector<int> order_;
  bool has_order_ = false;
  std::function<QString(int)> tooltip_provider_;
  int columns_ = 1;
  QStringList row_headers_, column_headers_;
  double aspect_ = 1.0;
  int max_cell_w_ = 120;
  int min_cell_w_ = 6;
  std::vector<ColorKey> keys_;
  bool keys_on_screen_ = true;
  int selected_ = -1;
  int marked_ = -1;
  QList<int> picked_;
  int hovered_ = -1;
  FigureText figure_text_;
  QString file_stem_ = QStringLiteral("grid");
};

}  // namespace hs::ui
