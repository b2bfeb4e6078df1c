// Points (x, y), each coloured by a small integer group (a layer) on a sequential colour scale,
// with the diagonal y = x drawn: an estimate against the value it estimates. Without the diagonal
// (two different quantities, setDiagonalShown(false)) each axis gets its own range. Click a point
// to select it; hover for its tooltip. Wraps QCustomPlot (hidden behind this class).
#pragma once

#include <QString>
#include <QWidget>

#include <functional>
#include <vector>

#include "ui/base/figure.h"

class QCustomPlot;
class QCPColorScale;
class QCPGraph;
class QCPItemLine;
class QCPItemText;
class QMouseEvent;

namespace hs::ui {

class ScatterView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  struct Point {
    double x = 0.0, y = 0.0;
    int group = 0;  // the colour: group / (groups - 1) along the scale
  };

  explicit ScatterView(QWidget* parent = nullptr);
  ~ScatterView() override;

  // `groups` colours, labelled `group_title` on the colour scale (groups - 1 at its top).
  void setPoints(std::vector<Point> points, int groups, const QString& group_title);
  // No points, and `message` in the middle of the empty axes.
  void clear(const QString& message = {});
  int pointCount() const { return static_cast<int>(points_.size()); }
  const Point& point(int index) const { return points_[static_cast<size_t>(index)]; }
  // The (x, y) the plot draws for point `index`, read back from its data (tests).
  std::pair<double, double> plottedPoint(int index) const;
  // Whether the diagonal y = x is drawn across the whole range shown.
  bool diagonalShown() const;
  // On (the default): the diagonal, and one range for both axes so that it is the diagonal. Off:
  // no diagonal, and each axis fits its own values (x and y are different quantities).
  void setDiagonalShown(bool shown);
  void setAxisTitles(const QString& x, const QString& y);
  void setHighlighted(int index);  // -1: none
  int highlighted() const { return highlighted_; }
  void setTooltipFormatter(std::function<QString(int index)> formatter);
  // Where point `index` is drawn, in widget coordinates (tests click there).
  QPoint pointCenter(int index) const;
  void replotNow();

  void setFigureText(const FigureText& text, const QString& file_stem);
  FigureText figureText() const override { return figure_text_; }
  QSize figureSize() const override;
  void paintFigure(QPainter& painter, QSize size) override;
  QString figureFileStem() const override { return file_stem_; }

 Q_SIGNALS:
  void pointClicked(int index);

 private:
  int pointAt(const QPoint& plot_pos) const;  // the nearest point within a few pixels, or -1
  void onMouseMove(QMouseEvent* event);
  void onMousePress(QMouseEvent* event);
  void rebuild();

  QCustomPlot* plot_ = nullptr;
  QCPColorScale* scale_ = nullptr;
  QCPItemLine* diagonal_ = nullptr;
  QCPItemText* message_ = nullptr;
  QCPGraph* highlight_ = nullptr;
  std::vector<QCPGraph*> series_;  // one per group: QCustomPlot gives a graph one scatter style
  std::vector<Point> points_;
  int groups_ = 1;
  int highlighted_ = -1;
  int hovered_ = -1;
  bool diagonal_wanted_ = true;
  std::function<QString(int)> tooltip_;
  FigureText figure_text_;
  QString file_stem_ = QStringLiteral("scatter");
};

}  // namespace hs::ui
