#include "ui/widgets/image_grid_view.h"

#include <QContextMenuEvent>
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
constexpr int kMinLabelCell = 40;  // below this width the labels under the images are left out
}

ImageGridView::ImageGridView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  QSizePolicy policy(QSizePolicy::Expanding, QSizePolicy::Preferred);
  policy.setHeightForWidth(true);
  setSizePolicy(policy);
  setFocusPolicy(Qt::ClickFocus);
}

void ImageGridView::setItems(std::vector<Item> items, int columns) {
  items_ = std::move(items);
  columns_ = std::max(1, columns);
  if (selected_ >= itemCount()) selected_ = -1;
  if (marked_ >= itemCount()) marked_ = -1;
  updateGeometry();
  update();
}

void ImageGridView::clear() { setItems({}, columns_); }

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

int ImageGridView::rows() const { return (itemCount() + columns_ - 1) / columns_; }

ImageGridView::Geometry ImageGridView::geometryFor(QSize size) const {
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
  auto fits = [&](int cell_w, int lh) {
    const int cell_h = static_cast<int>(std::ceil(cell_w / aspect_)) + lh;
    return g.header_h + n_rows * (cell_h + g.gap) + g.gap <= size.height();
  };
  int cell_w = std::min(max_cell_w_, std::max(6, w_from_width));
  int lh = cell_w >= kMinLabelCell ? label_h : 0;
  while (cell_w > 6 && !fits(cell_w, lh)) {
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

QRect ImageGridView::imageRect(const Geometry& g, int index) const {
  const int r = index / columns_, c = index % columns_;
  const int x = g.x0 + g.header_w + g.gap + c * (g.cell_w + g.gap);
  const int y = g.y0 + g.header_h + g.gap + r * (g.cell_h + g.gap);
  return QRect(x, y, g.cell_w, g.cell_h - g.label_h);
}

QRect ImageGridView::itemRect(int index) const {
  if (index < 0 || index >= itemCount()) return {};
  return imageRect(geometryFor(size()), index);
}

int ImageGridView::indexAt(const QPoint& pos) const {
  const Geometry g = geometryFor(size());
  for (int i = 0; i < itemCount(); ++i) {
    QRect r = imageRect(g, i);
    r.setHeight(g.cell_h);
    if (r.adjusted(-g.gap / 2, -g.gap / 2, g.gap / 2, g.gap / 2).contains(pos)) return i;
  }
  return -1;
}

QSize ImageGridView::sizeHint() const {
  const int cell = 44;
  return QSize(columns_ * (cell + 4) + 40, rows() * (cell + 18) + 24);
}

int ImageGridView::heightForWidth(int width) const {
  const Geometry g = geometryFor(QSize(width, 1 << 20));
  return g.header_h + rows() * (g.cell_h + g.gap) + g.gap;
}

QSize ImageGridView::minimumSizeHint() const { return QSize(120, 80); }

void ImageGridView::paintGrid(QPainter& p, QSize size) const {
  p.fillRect(QRect(QPoint(0, 0), size), palette().color(QPalette::Base));
  if (items_.empty()) return;
  const Geometry g = geometryFor(size);
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
  for (int i = 0; i < itemCount(); ++i) {
    const QRect r = imageRect(g, i);
    const Item& item = items_[static_cast<size_t>(i)];
    if (!item.image.isNull()) p.drawImage(r, item.image);
    p.setPen(QPen(QColor(0xb0, 0xb0, 0xb0), 1));
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(r).adjusted(-0.5, -0.5, 0.5, 0.5));
    if (!item.tag.isEmpty() && r.width() >= 14) {
      // A dark chip in the top-right corner, legible on any pattern.
      QFont f = header_font;
      f.setBold(true);
      p.setFont(f);
      const QFontMetrics fm(f);
      const QRect chip(r.right() - fm.horizontalAdvance(item.tag) - 6, r.top(), fm.horizontalAdvance(item.tag) + 6,
                       fm.height());
      p.fillRect(chip, QColor(0x30, 0x30, 0x30, 220));
      p.setPen(Qt::white);
      p.drawText(chip, Qt::AlignCenter, item.tag);
      p.setFont(header_font);
    }
    if (g.label_h > 0 && !item.label.isEmpty()) {
      p.setPen(i == selected_ ? accentColor().darker(130) : text.lighter(130));
      QFont f = header_font;
      f.setBold(i == selected_);
      p.setFont(f);
      p.drawText(QRect(r.x() - 4, r.bottom() + 4, r.width() + 8, g.label_h), Qt::AlignHCenter | Qt::AlignTop,
                 item.label);
      p.setFont(header_font);
    }
  }
  auto outline = [&](int index, const QPen& pen) {
    if (index < 0 || index >= itemCount()) return;
    p.setPen(pen);
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(imageRect(g, index)).adjusted(-2, -2, 2, 2));
  };
  for (int i : picked_) outline(i, QPen(accentColor().darker(120), 2.0, Qt::DashLine));
  if (hovered_ != selected_) outline(hovered_, QPen(QColor(0x50, 0x50, 0x50), 1.0, Qt::DashLine));
  if (marked_ != selected_) outline(marked_, QPen(accentColor().lighter(130), 1.5, Qt::DotLine));
  outline(selected_, QPen(accentColor(), 3.0));
}

void ImageGridView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  paintGrid(p, size());
}

void ImageGridView::paintFigure(QPainter& painter, QSize size) { paintGrid(painter, size); }

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
  if (index >= 0 && !items_[static_cast<size_t>(index)].tooltip.isEmpty())
    QToolTip::showText(event->globalPosition().toPoint(), items_[static_cast<size_t>(index)].tooltip, this);
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
}

}  // namespace hs::ui
