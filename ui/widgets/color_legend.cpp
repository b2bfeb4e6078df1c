#include "ui/widgets/color_legend.h"

#include <QPainter>

namespace hs::ui {

ColorLegend::ColorLegend(QWidget* parent)
    : QWidget(parent),
      caption_(QStringLiteral("attention weight")),
      low_(QStringLiteral("0")),
      high_(QStringLiteral("1")),
      swatch_fill_(maskedColor()),  // as in the thumbnails (the large pattern hatches it)
      swatch_label_(QStringLiteral("later position")) {
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
}

void ColorLegend::setScale(ColorMap map, const QString& caption, const QString& low_text, const QString& high_text) {
  if (map == map_ && caption == caption_ && low_text == low_ && high_text == high_) return;
  map_ = map;
  caption_ = caption;
  low_ = low_text;
  high_ = high_text;
  update();
}

void ColorLegend::setSwatch(const QColor& fill, const QString& mark, const QString& label) {
  swatch_fill_ = fill;
  swatch_mark_ = mark;
  swatch_label_ = label;
  update();
}

QSize ColorLegend::sizeHint() const { return QSize(240, fontMetrics().height() * 2 + 12); }
QSize ColorLegend::minimumSizeHint() const { return QSize(160, sizeHint().height()); }

void ColorLegend::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QFontMetrics fm = fontMetrics();
  const int bar_h = 10;
  const int y = 4;
  const int swatch = 14;
  const int swatch_w = swatch + 6 + fm.horizontalAdvance(swatch_label_);
  const int bar_w = std::max(60, width() - swatch_w - 24);
  // The gradient, low to high.
  for (int x = 0; x < bar_w; ++x)
    p.fillRect(QRect(x, y, 1, bar_h), QColor(colorAt(map_, x / double(bar_w - 1))));
  p.setPen(QPen(QColor(0xb0, 0xb0, 0xb0), 1));
  p.setBrush(Qt::NoBrush);
  p.drawRect(QRectF(0.5, y + 0.5, bar_w - 1, bar_h - 1));
  const QColor text = palette().color(QPalette::Text).lighter(140);
  p.setPen(text);
  const int text_y = y + bar_h + 2;
  p.drawText(QRect(0, text_y, bar_w, fm.height()), Qt::AlignLeft, low_);
  p.drawText(QRect(0, text_y, bar_w, fm.height()), Qt::AlignRight, high_);
  // Centred between the end labels, shortened with an ellipsis when the panel is narrow.
  const int ends = std::max(fm.horizontalAdvance(low_), fm.horizontalAdvance(high_)) + 6;
  p.drawText(QRect(ends, text_y, bar_w - 2 * ends, fm.height()), Qt::AlignHCenter,
             fm.elidedText(caption_, Qt::ElideRight, bar_w - 2 * ends));
  // The swatch.
  const int sx = bar_w + 24;
  const QRect box(sx, y - 2, swatch, swatch);
  p.fillRect(box, swatch_fill_);
  if (!swatch_mark_.isEmpty()) {
    p.setPen(text.darker(130));
    p.drawText(box, Qt::AlignCenter, swatch_mark_);
  }
  p.setPen(text);
  p.drawText(QRect(sx + swatch + 6, y - 3, width() - sx, fm.height()), Qt::AlignLeft | Qt::AlignVCenter, swatch_label_);
}

}  // namespace hs::ui
