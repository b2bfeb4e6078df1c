// A small colour key: a colour map's gradient from its low to its high value with a caption, and
// a swatch for what is not a value. By default the thumbnails' key: the sequential map from 0 to
// 1 ("attention weight") and the masked colour ("later position").
#pragma once

#include <QColor>
#include <QWidget>

#include "ui/style/colormap.h"

namespace hs::ui {

class ColorLegend : public QWidget {
  Q_OBJECT

 public:
  explicit ColorLegend(QWidget* parent = nullptr);
  // The gradient of `map` over [0, 1] of the map, labelled low_text ... caption ... high_text.
  void setScale(ColorMap map, const QString& caption, const QString& low_text, const QString& high_text);
  // The swatch beside the gradient: its fill, the text drawn in it ("—") and its label.
  void setSwatch(const QColor& fill, const QString& mark, const QString& label);
  QString caption() const { return caption_; }
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  ColorMap map_ = ColorMap::Sequential;
  QString caption_, low_, high_;
  QColor swatch_fill_;
  QString swatch_mark_, swatch_label_;
};

}  // namespace hs::ui
