// A small key for the thumbnails: the sequential colour map from 0 to 1, and the masked hatch.
#pragma once

#include <QWidget>

namespace hs::ui {

class ColorLegend : public QWidget {
  Q_OBJECT

 public:
  explicit ColorLegend(QWidget* parent = nullptr);
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
};

}  // namespace hs::ui
