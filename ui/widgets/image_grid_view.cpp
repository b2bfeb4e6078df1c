#include "ui/widgets/image_grid_view.h"

#include <QContextMenuEvent>
#include <QCursor>
#include <QMenu>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "qcustomplot.h"
#include "ui/style/colormap.h"

namespace hs::ui {
namespace {
constexpr int kMinLabelCell = ImageGridView::kLabelledCellWidth;
}

ImageGridView::ImageGridView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  QSizePolicy policy(QSizePolicy::Expanding, QSizePolicy::Preferred);
  policy.setHeightForWidth(true);
  setSizePolicy(policy);
  setFocusPolicy(Qt::ClickFocus);
}

void ImageGridView::setItems(std::vector<Item> items, int columns) {
  if (items.size() != items_.size()) hovered_ = -1;
  items_ = std::move(items);
  columns_ = std::max(1, columns);
  if (selected_ >= itemCount()) selected_ = -1;
  if (marked_ >= itemCount()) marked_ = -1;
  updateGeometry();
  update();
}

void ImageGridView::clear() { setItems({}, columns_); }

void ImageGridView::setDisplayOrder(std::vector<int> order) {
  if (has_order_ && order == order_) return;
  order_ = std::move(order);
  has_order_ = true;
  updateGeometry();
  update();
}

void ImageGridView::clearDisplayOrder() {
  if (!has_order_) return;
  order_.clear();
  has_order_ = false;
  updateGeometry();
  update();
}

int ImageGridView::cellCount() const { return has_order_ ? static_cast<int>(order_.size()) : itemCount(); }

int ImageGridView::itemAt(int slot) const {
  const int index = has_order_ ? order_[static_cast<size_t>(slot)] : slot;
  return index >= 0 && index < itemCount() ? index : -1;
}

int ImageGridView::slotOf(int index) const {
  if (index < 0 || index >= itemCount()) return -1;
  if (!has_order_) return index;
  const auto it = std::find(order_.begin(), order_.end(), index);
  return it == order_.end() ? -1 : static_cast<int>(it - order_.begin());
}

void ImageGridView::setTooltipProvider(std::function<QString(int)> provider) { tooltip_provider_ = std::move(provider); }

QString ImageGridView::tooltipFor(int index) const {
  if (index < 0 || index >= itemCount()) return {};
  const QString& own = items_[static_cast<size_t>(index)].tooltip;
  return own.isEmpty() && tooltip_provider_ ? tooltip_provider_(index) : own;
}

void ImageGridView::setRowHeaders(const QStringList& headers) {
  row_headers_ = headers;
  update();
}

void ImageGridView::setColumnHeaders(const QStringList& headers) {
  column_headers_ = headers;
  update();
}

void ImageGridView::setCellAspect(double aspect) {
  aspect_ = aspect > 0 ? aspect : 1.0;
  update();
}

void ImageGridView::setMaxCellWidth(int px) {
  max_cell_w_ = std::max(8, px);
  update();
}

void ImageGridView::setMinCellWidth(int px) {
  min_cell_w_ = std::max(6, px);
  updateGeometry();
  update();
}

void ImageGridView::setColorKeys(std::vector<ColorKey> keys, bool on_screen) {
  if (keys == keys_ && on_screen == keys_on_screen_) return;
  keys_ = std::move(keys);
  keys_on_screen_ = on_screen;
  updateGeometry();
  update();
}

int ImageGridView::keysHeight() const {
  return keys_.empty() ? 0 : static_cast<int>(keys_.size()) * (colorKeyHeight(font()) + 2) + 4;
}

int ImageGridView::cellWidth() const { return geometryFor(size(), keys_on_screen_).cell_w; }

void ImageGridView::setSelectedIndex(int index) {
  if (index == selected_) return;
  selected_ = index;
  update();
}

void ImageGridView::setMarkedIndex(int index) {
  if (index == marked_) return;
  marked_ = index;
  update();
}

void ImageGridView::setPickedIndices(const QList<int>& indices) {
  if (indices == picked_) return;
  picked_ = indices;
  update();
}

QList<int> ImageGridView::outlinedIndices() const {
  QList<int> out;
  for (int i : picked_)
    if (slotOf(i) >= 0) out << i;
  for (int i : {hovered_, marked_})
    if (i != selected_ && slotOf(i) >= 0 && !out.contains(i)) out << i;
  return out;
}

int ImageGridView::rows() const { return (cellCount() + columns_ - 1) / columns_; }

ImageGridView::Geometry ImageGridView::geometryFor(QSize size, bool with_keys) const {
  Geometry g;
  const QFontMetrics fm(font());
  g.header_w = row_headers_.isEmpty() ? 0 : fm.horizontalAdvance(QStringLiteral("L00")) + 8;
  g.header_h = column_headers_.isEmpty() ? 0 : fm.height() + 2;
  const int n_rows = std::max(1, rows());
  g.gap = 4;
  const int avail_w = size.width() - g.header_w - g.gap * (columns_ + 1);
  const int w_from_width = avail_w / columns_;
  // With labels under the images, each row is taller by a line of small text.
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  const int label_h = QFontMetrics(small).height() + 4;  // room below the selection outline
  const int avail_h = size.height() - (with_keys ? keysHeight() : 0);
  auto fits = [&](int cell_w, int lh) {
    const int cell_h = static_cast<int>(std::ceil(cell_w / aspect_)) + lh;
    return g.header_h + n_rows * (cell_h + g.gap) + g.gap <= avail_h;
  };
  // Never below the minimum: a grid given less room than that is cut (its scroll area scrolls).
  int cell_w = std::max(min_cell_w_, std::min(max_cell_w_, w_from_width));
  int lh = cell_w >= kMinLabelCell ? label_h : 0;
  while (cell_w > min_cell_w_ && !fits(cell_w, lh)) {
    --cell_w;
    lh = cell_w >= kMinLabelCell ? label_h : 0;
  }
  g.cell_w = cell_w;
  g.label_h = lh;
  g.cell_h = static_cast<int>(std::ceil(cell_w / aspect_)) + lh;
  const int grid_w = g.header_w + columns_ * (g.cell_w + g.gap) + g.gap;
  g.x0 = std::max(0, (size.width() - grid_w) / 2);
  g.y0 = 0;
  return g;
}

QRect ImageGridView::imageRect(const Geometry& g, int slot) const {
  const int r = slot / columns_, c = slot % columns_;
  const int x = g.x0 + g.header_w + g.gap + c * (g.cell_w + g.gap);
  const int y = g.y0 + g.header_h + g.gap + r * (g.cell_h + g.gap);
  return QRect(x, y, g.cell_w, g.cell_h - g.label_h);
}

QRect ImageGridView::itemRect(int index) const {
  const int slot = slotOf(index);
  if (slot < 0) return {};
  return imageRect(geometryFor(size(), keys_on_screen_), slot);
}

int ImageGridView::indexAt(const QPoint& pos) const {
  const Geometry g = geometryFor(size(), keys_on_screen_);
  for (int s = 0; s < cellCount(); ++s) {
    QRect r = imageRect(g, s);
    r.setHeight(g.cell_h);
    if (r.adjusted(-g.gap / 2, -g.gap / 2, g.gap / 2, g.gap / 2).contains(pos)) return itemAt(s);
  }
  return -1;
}

QSize ImageGridView::sizeHint() const {
  const int cell = 44;
  return QSize(columns_ * (cell + 4) + 40, rows() * (cell + 18) + 24);
}

int ImageGridView::cellsHeight(const Geometry& g) const { return g.header_h + rows() * (g.cell_h + g.gap) + g.gap; }

int ImageGridView::heightForWidth(int width) const {
  return cellsHeight(geometryFor(QSize(width, 1 << 20), keys_on_screen_)) + (keys_on_screen_ ? keysHeight() : 0);
}

QSize ImageGridView::minimumSizeHint() const {
  // The grid at its smallest cells: narrower or shorter than this, it would have to shrink them.
  const Geometry g = geometryFor(QSize(0, 0), keys_on_screen_);
  const int width = g.header_w + columns_ * (g.cell_w + g.gap) + g.gap;
  return QSize(std::max(120, width), std::max(80, cellsHeight(g) + (keys_on_screen_ ? keysHeight() : 0)));
}

QSize ImageGridView::figureSize() const {
  const Geometry g = geometryFor(size(), keys_on_screen_);
  return QSize(width(), std::min(height(), cellsHeight(g)) + keysHeight());
}

void ImageGridView::paintGrid(QPainter& p, QSize size, bool on_screen) const {
  p.fillRect(QRect(QPoint(0, 0), size), palette().color(QPalette::Base));
  if (items_.empty()) return;
  const bool with_keys = !on_screen || keys_on_screen_;
  const Geometry g = geometryFor(size, with_keys);
  if (with_keys && !keys_.empty()) {
    // Right under the last row of cells, as wide as the cells (at most 360 px: a key, not a plot).
    const int grid_w = g.header_w + columns_ * (g.cell_w + g.gap) + g.gap;
    const int key_w = std::clamp(grid_w - g.header_w - 2 * g.gap, std::min(200, size.width()), 360);
    const int key_x = std::max(0, g.x0 + g.header_w + g.gap);
    int y = g.y0 + cellsHeight(g) + 4;
    const QColor key_text = palette().color(QPalette::Text).lighter(140);
    for (const ColorKey& key : keys_) {
      paintColorKey(p, QRect(key_x, y, std::min(key_w, size.width() - key_x), colorKeyHeight(font())), key, font(),
                    key_text);
      y += colorKeyHeight(font()) + 2;
    }
  }
  p.setRenderHint(QPainter::SmoothPixmapTransform, false);  // cells stay crisp squares
  const QColor text = palette().color(QPalette::Text);
  QFont header_font = font();
  header_font.setPointSizeF(header_font.pointSizeF() * 0.85);
  p.setFont(header_font);
  p.setPen(text.lighter(150));
  for (int c = 0; c < column_headers_.size() && c < columns_; ++c) {
    const QRect r = imageRect(g, c);
    p.drawText(QRect(r.x() - 6, g.y0, r.width() + 12, g.header_h), Qt::AlignCenter, column_headers_[c]);
  }
  for (int r = 0; r < row_headers_.size() && r < rows(); ++r) {
    const QRect cell = imageRect(g, r * columns_);
    p.drawText(QRect(g.x0, cell.y(), g.header_w - 4, cell.height()), Qt::AlignRight | Qt::AlignVCenter,
               row_headers_[r]);
  }
  for (int s = 0; s < cellCount(); ++s) {
    const int i = itemAt(s);
    if (i < 0) continue;
    const QRect r = imageRect(g, s);
    const Item& item = items_[static_cast<size_t>(i)];
    if (!item.image.isNull()) p.drawImage(r, item.image);
    p.setPen(QPen(QColor(0xb0, 0xb0, 0xb0), 1));
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(r).adjusted(-0.5, -0.5, 0.5, 0.5));
    if (!item.tag.isEmpty() && r.width() >= 14) {
      // A dark chip in the bottom-left corner, legible on any pattern (a score badge takes the
      // top-right one).
      QFont f = header_font;
      f.setBold(true);
      p.setFont(f);
      const QFontMetrics fm(f);
      const QRect chip(r.left(), r.bottom() - fm.height() + 1, fm.horizontalAdvance(item.tag) + 6, fm.height());
      p.fillRect(chip, QColor(0x30, 0x30, 0x30, 220));
      p.setPen(Qt::white);
      p.drawText(chip, Qt::AlignCenter, item.tag);
      p.setFont(header_font);
    }
    if (g.label_h > 0 && !item.label.isEmpty()) {
      // The labels' font stays set; only the selected label switches to bold and back.
      const bool selected = i == selected_;
      p.setPen(selected ? accentColor().darker(130) : text.lighter(130));
      if (selected) {
        QFont bold = header_font;
        bold.setBold(true);
        p.setFont(bold);
      }
      p.drawText(QRect(r.x() - 4, r.bottom() + 4, r.width() + 8, g.label_h), Qt::AlignHCenter | Qt::AlignTop,
                 item.label);
      if (selected) p.setFont(header_font);
    }
  }
  // The badges after every image, in one font.
  QFont badge_font = font();
  badge_font.setPointSizeF(badge_font.pointSizeF() * 0.78);
  p.setFont(badge_font);
  const QFontMetrics badge_metrics(badge_font);
  for (int s = 0; s < cellCount(); ++s) {
    const int i = itemAt(s);
    if (i >= 0 && !items_[static_cast<size_t>(i)].badge.isEmpty())
      paintBadge(p, badge_metrics, imageRect(g, s), items_[static_cast<size_t>(i)], on_screen);
  }
  auto outline = [&](int index, const QPen& pen) {
    const int slot = slotOf(index);
    if (slot < 0) return;
    p.setPen(pen);
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(imageRect(g, slot)).adjusted(-2, -2, 2, 2));
  };
  for (int i : picked_) outline(i, QPen(accentColor().darker(120), 2.0, Qt::DashLine));
  if (hovered_ != selected_) outline(hovered_, QPen(QColor(0x50, 0x50, 0x50), 1.0, Qt::DashLine));
  if (marked_ != selected_) outline(marked_, QPen(accentColor().lighter(130), 1.5, Qt::DotLine));
  outline(selected_, QPen(accentColor(), 3.0));
}

void ImageGridView::paintBadge(QPainter& p, const QFontMetrics& fm, const QRect& r, const Item& item,
                               bool on_screen) const {
  const int text_w = fm.horizontalAdvance(item.badge) + 3, text_h = fm.height();
  // Text when it fits in the top-right corner, the masked triangle but for a sliver near the
  // first rows; a chip of the colour otherwise (a model with many heads on a small screen).
  const bool with_text = text_w <= r.width() * 80 / 100 && text_h <= r.height() * 42 / 100;
  const int side = std::max(6, r.width() * 3 / 10);
  const QSize size = with_text ? QSize(text_w, text_h) : QSize(side, side);
  const QPoint at(r.right() - size.width() + 1, r.top());
  auto draw = [&](QPainter& q, const QRect& box) {
    q.fillRect(box, item.badge_color);
    q.setPen(QPen(item.badge_color.darker(135), 1));
    q.setBrush(Qt::NoBrush);
    q.drawRect(QRectF(box).adjusted(0.5, 0.5, -0.5, -0.5));
    if (!with_text) return;
    // Dark text on light fills, white on dark (the score map runs from near-white to deep purple).
    const QColor c = item.badge_color;
    const bool dark = 0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue() < 140;
    q.setPen(dark ? QColor(Qt::white) : QColor(0x22, 0x22, 0x22));
    q.drawText(box, Qt::AlignCenter, item.badge);
  };
  if (!on_screen) {
    draw(p, QRect(at, size));
    return;
  }
  const BadgeKey key{with_text ? item.badge : QString(), item.badge_color.rgb(), size};
  auto it = badge_cache_.constFind(key);
  if (it == badge_cache_.constEnd()) {
    if (badge_cache_.size() > 1024) badge_cache_.clear();  // a bound, not an eviction policy
    const qreal dpr = devicePixelRatioF();
    QPixmap pixmap(size * dpr);
    pixmap.setDevicePixelRatio(dpr);
    pixmap.fill(Qt::transparent);
    QPainter q(&pixmap);
    q.setFont(p.font());
    draw(q, QRect(QPoint(0, 0), size));
    q.end();
    it = badge_cache_.insert(key, pixmap);
  }
  p.drawPixmap(at, *it);
}

void ImageGridView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  paintGrid(p, size(), true);
}

void ImageGridView::paintFigure(QPainter& painter, QSize size) { paintGrid(painter, size, false); }

void ImageGridView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::FontChange || event->type() == QEvent::PaletteChange) badge_cache_.clear();
}

void ImageGridView::setFigureText(const FigureText& text, const QString& file_stem) {
  figure_text_ = text;
  file_stem_ = file_stem;
}

void ImageGridView::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  const int index = indexAt(event->pos());
  if (index < 0) return;
  if (event->modifiers() & Qt::ControlModifier) Q_EMIT itemCtrlClicked(index);
  else Q_EMIT itemClicked(index);
}

void ImageGridView::mouseMoveEvent(QMouseEvent* event) {
  const int index = indexAt(event->pos());
  if (index == hovered_) return;
  hovered_ = index;
  const QString tip = tooltipFor(index);
  if (!tip.isEmpty())
    QToolTip::showText(event->globalPosition().toPoint(), tip, this);
  else
    QToolTip::hideText();
  update();
  Q_EMIT itemHovered(index);
}

void ImageGridView::leaveEvent(QEvent* event) {
  QWidget::leaveEvent(event);
  if (hovered_ != -1) {
    hovered_ = -1;
    update();
    Q_EMIT itemHovered(-1);
  }
}

void ImageGridView::contextMenuEvent(QContextMenuEvent* event) {
  QMenu menu(this);
  if (const int index = indexAt(event->pos()); index >= 0) {
    Q_EMIT itemContextMenu(index, &menu);
    if (!menu.isEmpty()) menu.addSeparator();
  }
  addFigureExportActions(menu, this, *this);
  menu.exec(event->globalPos());
  // The menu had the pointer: the item it hovered before may be left, or changed by the action.
  const QPoint at = mapFromGlobal(QCursor::pos());
  const int index = rect().contains(at) ? indexAt(at) : -1;
  if (index != hovered_) {
    hovered_ = index;
    update();
    Q_EMIT itemHovered(index);
  }
}

}  // namespace hs::ui
