// A small colour key: a colour map's gradient from its low to its high value with a caption, and
// a swatch for what is not a value. By default the thumbnails' key: the sequential map from 0 to
// 1 ("attention weight") and the masked colour ("later position").
//
// The key is a value (ColorKey) with a painter function of its own, so a figure that is not a
// plot widget (the head grid's export) draws the same key under its cells.
#pragma once

#include <QColor>
#include <QString>
#include <QWidget>

#include "ui/style/colormap.h"

class QPainter;

namespace hs::ui {

struct ColorKey {
  ColorMap map = ColorMap::Sequential;
  QString caption = QStringLiteral("attention weight");
  QString low = QStringLiteral("0"), high = QStringLiteral("1");
  QColor swatch_fill = maskedColor();  // as in the thumbnails (the large pattern hatches it)
  QString swatch_mark = {};            // drawn in the swatch ("—")
  QString swatch_label = QStringLiteral("later position");  // no label and no mark: no swatch
  bool operator==(const ColorKey&) const = default;
};

// The height a key needs in `font`.
int colorKeyHeight(const QFont& font);
// Paints `key` into `rect` (its height: colorKeyHeight) with `text` for the labels.
void paintColorKey(QPainter& painter, const QRect& rect, const ColorKey& key, const QFont& font, const QColor& text);

class ColorLegend : public QWidget {
  Q_OBJECT

 public:
  explicit ColorLegend(QWidget* parent = nullptr);
  // The gradient of `map` over [0, 1] of the map, labelled low_text ... caption ... high_text.
  void setScale(ColorMap map, const QString& caption, const QString& low_text, const QString& high_text);
  // The swatch beside the gradient: its fill, the text drawn in it ("—") and its label.
  void setSwatch(const QColor& fill, const QString& mark, const QString& label);
  const ColorKey& key() const { return key_; }
  QString caption() const { return key_.caption; }
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  ColorKey key_;
};

}  // namespace hs::ui
