#include <catch2/catch.hpp>

#include <QImage>
#include <QtConcurrent/QtConcurrentRun>

#include <cmath>
#include <limits>

#include "ui/base/figure.h"
#include "ui/style/colormap.h"
#include "ui/widgets/heatmap_view.h"

using hs::ui::HeatmapView;

namespace {
bool near(QRgb a, QRgb b, int tolerance) {
  return std::abs(qRed(a) - qRed(b)) <= tolerance && std::abs(qGreen(a) - qGreen(b)) <= tolerance &&
         std::abs(qBlue(a) - qBlue(b)) <= tolerance;
}
}  // namespace

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

TEST_CASE("HeatmapView draws each cell in its colour, row 0 at the top, masked cells hatched", "[heatmap]") {
  HeatmapView view;
  view.resize(500, 400);
  view.show();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  view.setMatrix(2, 3, {0.0f, nan, nan, 0.5f, 1.0f, nan});
  view.replotNow();
  // The colours: the colour map's ends exactly, its middle within a level, masked transparent.
  CHECK(view.plottedColor(0, 0) == hs::ui::colorAt(hs::ui::ColorMap::Sequential, 0.0));
  CHECK(view.plottedColor(1, 1) == hs::ui::colorAt(hs::ui::ColorMap::Sequential, 1.0));
  CHECK(near(view.plottedColor(1, 0), hs::ui::colorAt(hs::ui::ColorMap::Sequential, 0.5), 3));
  CHECK(qAlpha(view.plottedColor(0, 1)) == 0);
  // On screen: each cell's centre shows its colour, in the right place.
  const QImage shown = view.grab().toImage();
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      const QRgb pixel = shown.pixel(view.cellCenter(r, c));
      if (std::isnan(view.plottedValue(r, c))) {
        CHECK(!near(pixel, qRgb(0, 0, 0), 40));  // the light hatch, not a colour or black
        CHECK(!near(pixel, view.plottedColor(1, 1), 10));
      } else {
        CHECK(near(pixel, view.plottedColor(r, c), 1));
      }
    }
}

TEST_CASE("Cells coloured on a worker thread draw exactly as the matrix set on the GUI thread", "[heatmap]") {
  const int n = 300;
  std::vector<float> values(static_cast<size_t>(n) * n);
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < n; ++k) values[static_cast<size_t>(q) * n + k] = k > q ? NAN : 1.0f / (q + 1);
  auto prepared = QtConcurrent::run([values] {
                    return HeatmapView::prepareCells(n, n, values, hs::ui::ColorMap::Sequential,
                                                     HeatmapView::RangeMode::Fixed, 0.0, 1.0);
                  }).result();
  HeatmapView worker_view, gui_view;
  worker_view.setColorMap(hs::ui::ColorMap::Sequential);
  worker_view.setCells(prepared);
  CHECK(worker_view.cells() == prepared);  // used as it came: the GUI thread coloured nothing
  gui_view.setMatrix(n, n, values);
  CHECK(worker_view.cells()->image == gui_view.cells()->image);
  // Cells coloured for another colour map are coloured again for this view's.
  HeatmapView diverging;
  diverging.setColorMap(hs::ui::ColorMap::Diverging);
  diverging.setCells(prepared);
  CHECK(diverging.cells() != prepared);
  CHECK(diverging.cells()->color_map == hs::ui::ColorMap::Diverging);
  CHECK(diverging.plottedValue(5, 2) == prepared->value(5, 2));
  CHECK(diverging.plottedValue(5, 2) == values[5 * n + 2]);
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

TEST_CASE("An exported figure is the same with the pointer over the plot and without", "[heatmap][export]") {
  HeatmapView view;
  view.resize(400, 300);
  view.setMatrix(3, 3, {1, NAN, NAN, 0.5, 0.5, NAN, 0.2f, 0.3f, 0.5});
  view.setFigureText({QStringLiteral("L0H0 attention pattern"), QStringLiteral("test")}, QStringLiteral("x"));
  view.show();
  view.replotNow();
  const QSize body = view.figureSize();
  const QImage plain = hs::ui::renderFigureImage(view, body, 1.0);
  // The hover outline (where the pointer is) and the selected row and cell outlines are not data.
  view.setHoverRow(1);
  view.setHighlightedRow(2);
  view.setHighlightedCell(2, 0);
  view.replotNow();
  CHECK(hs::ui::renderFigureImage(view, body, 1.0) == plain);
  // A view that asks for its selection gets it (and still no hover outline).
  view.setSelectionInExports(true);
  CHECK(hs::ui::renderFigureImage(view, body, 1.0) != plain);
  view.setHighlightedRow(-1);
  view.setHighlightedCell(-1, -1);
  view.replotNow();
  CHECK(hs::ui::renderFigureImage(view, body, 1.0) == plain);
}
