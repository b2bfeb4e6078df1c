#include "ui/widgets/color_legend.h"

#include <QPainter>

#include <algorithm>

namespace hs::ui {

int colorKeyHeight(const QFont& font) { return QFontMetrics(font).height() * 2 + 12; }

void paintColorKey(QPainter& p, const QRect& rect, const ColorKey& key, const QFont& font, const QColor& text) {
  p.save();
  p.translate(rect.topLeft());
  p.setFont(font);
  const QFontMetrics fm(font);
  const int width = rect.width();
  const int bar_h = 10;
  const int y = 4;
  const int swatch = 14;
  const bool with_swatch = !key.swatch_label.isEmpty() || !key.swatch_mark.isEmpty();
  const int swatch_w = with_swatch ? swatch + 6 + fm.horizontalAdvance(key.swatch_label) + 24 : 0;
  const int bar_w = std::max(60, width - swatch_w);
  // The gradient, low to high.
  for (int x = 0; x < bar_w; ++x) p.fillRect(QRect(x, y, 1, bar_h), QColor(colorAt(key.map, x / double(bar_w - 1))));
  p.setPen(QPen(QColor(0xb0, 0xb0, 0xb0), 1));
  p.setBrush(Qt::NoBrush);
  p.drawRect(QRectF(0.5, y + 0.5, bar_w - 1, bar_h - 1));
  p.setPen(text);
  const int text_y = y + bar_h + 2;
  p.drawText(QRect(0, text_y, bar_w, fm.height()), Qt::AlignLeft, key.low);
  p.drawText(QRect(0, text_y, bar_w, fm.height()), Qt::AlignRight, key.high);
  // Centred between the end labels, shortened with an ellipsis when the panel is narrow.
  const int ends = std::max(fm.horizontalAdvance(key.low), fm.horizontalAdvance(key.high)) + 6;
  p.drawText(QRect(ends, text_y, bar_w - 2 * ends, fm.height()), Qt::AlignHCenter,
             fm.elidedText(key.caption, Qt::ElideRight, bar_w - 2 * ends));
  if (!with_swatch) return p.restore();
  // The swatch.
  const int sx = bar_w + 24;
  const QRect box(sx, y - 2, swatch, swatch);
  p.fillRect(box, key.swatch_fill);
  if (!key.swatch_mark.isEmpty()) {
    p.setPen(text.darker(130));
    p.drawText(box, Qt::AlignCenter, key.swatch_mark);
  }
  p.setPen(text);
  p.drawText(QRect(sx + swatch + 6, y - 3, width - sx, fm.height()), Qt::AlignLeft | Qt::AlignVCenter, key.swatch_label);
  p.restore();
}

ColorLegend::ColorLegend(QWidget* parent) : QWidget(parent) { setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed); }

void ColorLegend::setScale(ColorMap map, const QString& caption, const QString& low_text, const QString& high_text) {
  if (map == key_.map && caption == key_.caption && low_text == key_.low && high_text == key_.high) return;
  key_.map = map;
  key_.caption = caption;
  key_.low = low_text;
  key_.high = high_text;
  update();
}

void ColorLegend::setSwatch(const QColor& fill, const QString& mark, const QString& label) {
  key_.swatch_fill = fill;
  key_.swatch_mark = mark;
  key_.swatch_label = label;
  update();
}

QSize ColorLegend::sizeHint() const { return QSize(240, colorKeyHeight(font())); }
QSize ColorLegend::minimumSizeHint() const { return QSize(160, sizeHint().height()); }

void ColorLegend::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  paintColorKey(p, rect(), key_, font(), palette().color(QPalette::Text).lighter(140));
}

}  // namespace hs::ui
