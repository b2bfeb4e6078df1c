// A prompt's tokens, wrapped into lines, each on a background shaded by one unit's activation at
// that position: CircuitsVis's text_neuron_activations (ColoredTokens). Its colours: a positive
// value v is blue mixed with white by v / max, a negative one red by v / min, 0 white, mixed in
// CIE Lab as colord's mix() does; the text is white on dark chips. Unlike CircuitsVis, max and min
// are one range symmetric around 0 (the largest |value| over the prompt), so that a small negative
// value is not drawn as strongly as the largest positive one. One token is outlined (the selected position). Clicking a token selects it; hovering shows its
// value. Painted with QPainter, so its figure is vector in SVG and PDF.
#pragma once

#include <QColor>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <vector>

#include "ui/base/figure.h"

namespace hs::ui {

class ActivationStrip : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  explicit ActivationStrip(QWidget* parent = nullptr);

  // `values[pos]` for `tokens[pos]`; `outlined` the position drawn with an outline (-1: none).
  void setTokens(QStringList tokens, std::vector<float> values, int outlined);
  void setOutlined(int pos);
  void setMessage(const QString& message);  // shown instead of tokens when there are none
  // The tooltip of a token: %1 its label, %2 its position, %3 its value.
  void setTooltipFormat(const QString& format) { tooltip_format_ = format; }
  const std::vector<float>& values() const { return values_; }
  const QStringList& tokens() const { return tokens_; }
  int outlined() const { return outlined_; }

  // CircuitsVis's getTokenBackgroundColor(value, min, max, "red", "blue").
  static QColor backgroundColor(float value, float min, float max);

  void setFigureText(const FigureText& text, const QString& stem);
  FigureText figureText() const override { return figure_text_; }
  QSize figureSize() const override;
  void paintFigure(QPainter& painter, QSize size) override;
  QString figureFileStem() const override { return stem_; }

  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 Q_SIGNALS:
  void tokenClicked(int pos);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  bool event(QEvent* event) override;  // tooltips

 private:
  // Where each token is drawn at this width.
  std::vector<QRectF> layout(int width) const;
  void paintInto(QPainter& painter, int width) const;
  int tokenAtPoint(QPointF point) const;

  QStringList tokens_;
  std::vector<float> values_;
  float min_ = 0.0f, max_ = 0.0f;
  int outlined_ = -1;
  QString message_;
  QString tooltip_format_ = QStringLiteral("%1 (%2): %3");
  FigureText figure_text_;
  QString stem_ = QStringLiteral("activations");
};

}  // namespace hs::ui
