// One bar per item, each with its own colour and label; click a bar to select it. Wraps
// QCustomPlot (hidden behind this class).
#pragma once

#include <QColor>
#include <QString>
#include <QWidget>

#include <functional>
#include <vector>

#include "ui/base/figure.h"

class QCustomPlot;
class QCPItemRect;
class QMouseEvent;

namespace hs::ui {

class BarChartView : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  struct Bar {
    QString label;
    double value = 0.0;
    QColor color;
  };

  explicit BarChartView(QWidget* parent = nullptr);
  ~BarChartView() override;

  void setBars(std::vector<Bar> bars);
  int barCount() const { return static_cast<int>(bars_.size()); }
  const Bar& bar(int index) const { return bars_[static_cast<size_t>(index)]; }
  // The value drawn for a bar, read back from the plot's data (for tests).
  double plottedValue(int index) const;
  void setHighlighted(int index);
  void setValueAxisTitle(const QString& title);
  // A fixed value range (attention weights: [0, 1]); by default the range follows the data.
  void setValueRange(double lo, double hi);
  // Back to a range that follows the data.
  void clearValueRange();
  // A legend entry per colour: (name, colour).
  void setLegend(const std::vector<std::pair<QString, QColor>>& entries);
  const std::vector<std::pair<QString, QColor>>& legend() const { return legend_; }
  void setTooltipFormatter(std::function<QString(int index)> formatter);
  QPoint barCenter(int index) const;

  void setFigureText(const FigureText& text, const QString& file_stem);
  FigureText figureText() const override { return figure_text_; }
  QSize figureSize() const override;
  void paintFigure(QPainter& painter, QSize size) override;
  QString figureFileStem() const override { return file_stem_; }

 Q_SIGNALS:
  void barClicked(int index);
  void barHovered(int index);

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  int barAt(const QPoint& plot_pos) const;
  void onMouseMove(QMouseEvent* event);
  void onMousePress(QMouseEvent* event);
  void updateTicks();
  void rebuild();

  QCustomPlot* plot_ = nullptr;
  QCPItemRect* highlight_ = nullptr;
  std::vector<Bar> bars_;
  std::vector<std::pair<QString, QColor>> legend_;
  bool fixed_range_ = false;
  double range_lo_ = 0.0, range_hi_ = 1.0;
  int highlighted_ = -1;
  int hovered_ = -1;
  std::function<QString(int)> tooltip_;
  FigureText figure_text_;
  QString file_stem_ = QStringLiteral("bars");
};

}  // namespace hs::ui
