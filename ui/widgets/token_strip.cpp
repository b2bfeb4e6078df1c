#include "ui/widgets/token_strip.h"

#include <QMouseEvent>
#include <QPainter>
#include <QScrollArea>
#include <QTimer>
#include <QToolTip>

#include "ui/style/colormap.h"
#include "ui/widgets/labels.h"

namespace hs::ui {
namespace {
constexpr int kChipGap = 4;
constexpr int kChipPadX = 6;
constexpr int kMaxLabelChars = 16;
}  // namespace

TokenStrip::TokenStrip(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setFocusPolicy(Qt::ClickFocus);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void TokenStrip::setTooltipProvider(std::function<QString(int)> provider) { tooltip_ = std::move(provider); }

void TokenStrip::setTokens(const QStringList& labels, bool bos) {
  labels_ = labels;
  bos_ = bos;
  if (selected_ >= labels_.size()) selected_ = -1;
  if (hover_ >= labels_.size()) hover_ = -1;
  int h = 0;
  layoutChips(width(), &rects_, &h);
  setMinimumHeight(h);
  if (h != content_height_) {
    content_height_ = h;
    Q_EMIT contentHeightChanged(h);
  }
  updateGeometry();
  update();
  revealSelection();
}

void TokenStrip::setSelectedPosition(int pos) {
  if (pos == selected_) return;
  selected_ = pos;
  update();
  revealSelection();
}

void TokenStrip::revealSelection() {
  if (reveal_queued_) return;
  reveal_queued_ = true;
  QTimer::singleShot(0, this, [this] {
    reveal_queued_ = false;
    QWidget* viewport = parentWidget();
    auto* area = viewport ? qobject_cast<QScrollArea*>(viewport->parentWidget()) : nullptr;
    const QRect chip = chipRect(selected_);
    if (!area || chip.isNull()) return;
    // The chip's row whole, with the gap around it.
    area->ensureVisible(chip.center().x(), chip.center().y(), chip.width() / 2 + kChipGap, chip.height() / 2 + kChipGap);
  });
}

void TokenStrip::setHoverPosition(int pos) {
  if (pos == hover_) return;
  hover_ = pos;
  update();
}

QRect TokenStrip::chipRect(int pos) const {
  return pos >= 0 && pos < static_cast<int>(rects_.size()) ? rects_[static_cast<size_t>(pos)] : QRect();
}

void TokenStrip::layoutChips(int width, std::vector<QRect>* rects, int* height) const {
  rects->clear();
  const QFontMetrics fm(font());
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.75);
  const QFontMetrics sm(small);
  const int chip_h = fm.height() + 8;
  int x = kChipGap, y = kChipGap;
  for (int i = 0; i < labels_.size(); ++i) {
    const int w = fm.horizontalAdvance(elideLabel(labels_[i], kMaxLabelChars)) + sm.horizontalAdvance(QString::number(i)) +
                  2 * kChipPadX + 4;
    if (x + w > width - kChipGap && x > kChipGap) {
      x = kChipGap;
      y += chip_h + kChipGap;
    }
    rects->push_back(QRect(x, y, w, chip_h));
    x += w + kChipGap;
  }
  *height = labels_.isEmpty() ? chip_h + 2 * kChipGap : y + chip_h + kChipGap;
}

int TokenStrip::heightForWidth(int width) const {
  std::vector<QRect> rects;
  int h = 0;
  layoutChips(width, &rects, &h);
  return h;
}

QSize TokenStrip::sizeHint() const { return QSize(600, heightForWidth(600)); }

void TokenStrip::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  int h = 0;
  layoutChips(width(), &rects_, &h);
  if (minimumHeight() != h) setMinimumHeight(h);
  if (h != content_height_) {
    content_height_ = h;
    Q_EMIT contentHeightChanged(h);
  }
}

void TokenStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QFont base = font();
  QFont small = base;
  small.setPointSizeF(small.pointSizeF() * 0.75);
  if (labels_.isEmpty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect().adjusted(kChipGap + 2, 0, 0, 0), Qt::AlignLeft | Qt::AlignVCenter,
               QStringLiteral("Tokens appear here as you type."));
    return;
  }
  for (int i = 0; i < static_cast<int>(rects_.size()); ++i) {
    const QRectF r = QRectF(rects_[static_cast<size_t>(i)]).adjusted(0.5, 0.5, -0.5, -0.5);
    const bool is_bos = bos_ && i == 0;
    QColor fill = is_bos ? QColor(0xee, 0xee, 0xee) : QColor(0xf3, 0xf6, 0xfa);
    QPen border(QColor(0xc8, 0xd0, 0xda), 1.0);
    if (i == selected_) {
      fill = QColor(0xfd, 0xe4, 0xd2);
      border = QPen(accentColor(), 2.0);
    } else if (i == hover_) {
      fill = QColor(0xe4, 0xec, 0xf5);
      border = QPen(QColor(0x55, 0x66, 0x77), 1.0);
    }
    p.setPen(border);
    p.setBrush(fill);
    p.drawRoundedRect(r, 4, 4);
    QFont f = base;
    f.setItalic(is_bos);
    p.setFont(f);
    p.setPen(is_bos ? QColor(0x70, 0x70, 0x70) : QColor(0x1a, 0x1a, 0x1a));
    const QString text = elideLabel(labels_[i], kMaxLabelChars);
    const QRectF text_rect = r.adjusted(kChipPadX, 0, -kChipPadX, 0);
    p.drawText(text_rect, Qt::AlignLeft | Qt::AlignVCenter, text);
    p.setFont(small);
    p.setPen(QColor(0x8a, 0x94, 0xa0));
    p.drawText(text_rect.adjusted(0, 0, 0, -3), Qt::AlignRight | Qt::AlignBottom, QString::number(i));
  }
}

int TokenStrip::chipAt(const QPoint& pos) const {
  for (int i = 0; i < static_cast<int>(rects_.size()); ++i)
    if (rects_[static_cast<size_t>(i)].contains(pos)) return i;
  return -1;
}

void TokenStrip::mousePressEvent(QMouseEvent* event) {
  const int i = chipAt(event->pos());
  if (event->button() == Qt::LeftButton && i >= 0) Q_EMIT tokenClicked(i);
}

void TokenStrip::mouseMoveEvent(QMouseEvent* event) {
  const int i = chipAt(event->pos());
  if (i == hover_) return;
  hover_ = i;
  if (i >= 0 && tooltip_) QToolTip::showText(event->globalPosition().toPoint(), tooltip_(i), this);
  update();
  Q_EMIT tokenHovered(i);
}

void TokenStrip::leaveEvent(QEvent* event) {
  QWidget::leaveEvent(event);
  if (hover_ != -1) {
    hover_ = -1;
    update();
    Q_EMIT tokenHovered(-1);
  }
}

}  // namespace hs::ui
