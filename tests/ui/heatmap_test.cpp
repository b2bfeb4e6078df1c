#include <catch2/catch.hpp>

#include <QImage>

#include <cmath>
#include <limits>

#include "ui/base/figure.h"
#include "ui/widgets/heatmap_view.h"

using hs::ui::HeatmapView;

TEST_CASE("HeatmapView plots exactly the matrix it is given, masked cells as NaN", "[heatmap]") {
  HeatmapView view;
  view.resize(500, 400);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  view.setMatrix(2, 3, {0.1f, nan, nan, 0.25f, 0.75f, nan});
  view.replotNow();
  CHECK(view.rowCount() == 2);
  CHECK(view.columnCount() == 3);
  CHECK(view.plottedValue(0, 0) == Approx(0.1));
  CHECK(std::isnan(view.plottedValue(0, 1)));
  CHECK(view.plottedValue(1, 1) == Approx(0.75));
  CHECK(view.rangeLower() == 0.0);
  CHECK(view.rangeUpper() == 1.0);
}

TEST_CASE("HeatmapView handles a single token and 1024 tokens", "[heatmap]") {
  HeatmapView view;
  view.resize(700, 600);
  view.show();  // laid out, so pixels map to cells
  view.setMatrix(1, 1, {0.5f});
  view.replotNow();
  CHECK(view.plottedValue(0, 0) == Approx(0.5));
  CHECK(view.cellAt(view.cellCenter(0, 0)) == QPoint(0, 0));

  const int n = 1024;
  std::vector<float> cells(static_cast<size_t>(n) * n);
  QStringList labels;
  for (int q = 0; q < n; ++q) {
    labels << QStringLiteral("tok%1").arg(q);
    for (int k = 0; k < n; ++k) cells[static_cast<size_t>(q) * n + k] = k > q ? NAN : 1.0f / (q + 1);
  }
  view.setMatrix(n, n, cells);
  view.setRowLabels(labels);
  view.setColumnLabels(labels);
  view.replotNow();
  CHECK(view.plottedValue(1023, 0) == Approx(1.0 / 1024));
  CHECK(std::isnan(view.plottedValue(0, 1023)));
  // A cell is under a pixel wide here; the cell under a pixel is still the one nearest to it.
  const QPoint cell = view.cellAt(view.cellCenter(512, 100));
  CHECK(std::abs(cell.x() - 100) <= 2);
  CHECK(std::abs(cell.y() - 512) <= 2);
}

TEST_CASE("HeatmapView's symmetric range is centred on zero", "[heatmap]") {
  HeatmapView view;
  view.setRangeMode(HeatmapView::RangeMode::Symmetric);
  view.setMatrix(1, 3, {-0.5f, 2.0f, 1.0f});
  CHECK(view.rangeLower() == -2.0);
  CHECK(view.rangeUpper() == 2.0);
}

TEST_CASE("A figure is the plot at the asked scale with a title band", "[heatmap][export]") {
  HeatmapView view;
  view.resize(400, 300);
  view.setMatrix(3, 3, {1, NAN, NAN, 0.5, 0.5, NAN, 0.2f, 0.3f, 0.5});
  view.setFigureText({QStringLiteral("L0H0 attention pattern"), QStringLiteral("test")}, QStringLiteral("x"));
  view.show();
  view.replotNow();
  const QSize body = view.figureSize();
  const QImage image = hs::ui::renderFigureImage(view, body, 2.0);
  CHECK(image.width() == body.width() * 2);
  CHECK(image.height() == (body.height() + hs::ui::figureTitleHeight()) * 2);
  const QByteArray svg = hs::ui::renderFigureVector(view, body, hs::ui::FigureFormat::Svg);
  CHECK(svg.contains("<svg"));
  const QByteArray pdf = hs::ui::renderFigureVector(view, body, hs::ui::FigureFormat::Pdf);
  CHECK(pdf.startsWith("%PDF"));
}
