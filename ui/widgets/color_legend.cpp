#include "ui/widgets/color_legend.h"

#include <QPainter>

#include "ui/style/colormap.h"

namespace hs::ui {

ColorLegend::ColorLegend(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
}

QSize ColorLegend::sizeHint() const { return QSize(240, fontMetrics().height() * 2 + 12); }
QSize ColorLegend::minimumSizeHint() const { return QSize(160, sizeHint().height()); }

void ColorLegend::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QFontMetrics fm = fontMetrics();
  const int bar_h = 10;
  const int y = 4;
  const QString weight = QStringLiteral("attention weight");
  const QString masked = QStringLiteral("later position");
  const int swatch = 14;
  const int masked_w = swatch + 6 + fm.horizontalAdvance(masked);
  const int bar_w = std::max(60, width() - masked_w - 24);
  // The gradient, 0 to 1.
  for (int x = 0; x < bar_w; ++x)
    p.fillRect(QRect(x, y, 1, bar_h), QColor(colorAt(ColorMap::Sequential, x / double(bar_w - 1))));
  p.setPen(QPen(QColor(0xb0, 0xb0, 0xb0), 1));
  p.setBrush(Qt::NoBrush);
  p.drawRect(QRectF(0.5, y + 0.5, bar_w - 1, bar_h - 1));
  p.setPen(palette().color(QPalette::Text).lighter(140));
  const int text_y = y + bar_h + 2;
  p.drawText(QRect(0, text_y, bar_w, fm.height()), Qt::AlignLeft, QStringLiteral("0"));
  p.drawText(QRect(0, text_y, bar_w, fm.height()), Qt::AlignHCenter, weight);
  p.drawText(QRect(0, text_y, bar_w, fm.height()), Qt::AlignRight, QStringLiteral("1"));
  // The masked swatch.
  const int sx = bar_w + 24;
  const QRect box(sx, y - 2, swatch, swatch);
  p.fillRect(box, maskedColor());  // as in the thumbnails (the large pattern hatches it)
  p.setPen(palette().color(QPalette::Text).lighter(140));
  p.drawText(QRect(sx + swatch + 6, y - 3, width() - sx, fm.height()), Qt::AlignLeft | Qt::AlignVCenter, masked);
}

}  // namespace hs::ui
