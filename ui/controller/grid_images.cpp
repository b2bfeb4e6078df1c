#include "ui/controller/grid_images.h"

#include <cmath>

#include "ui/style/colormap.h"

namespace hs::ui {

QImage patternImage(const hs::PooledGrid& grid) {
  if (grid.rows == 0 || grid.cols == 0) return {};
  QImage image(grid.cols, grid.rows, QImage::Format_RGB32);
  const QRgb masked = maskedColor().rgb();
  for (int y = 0; y < grid.rows; ++y) {
    auto* line = reinterpret_cast<QRgb*>(image.scanLine(y));
    const float* cells = grid.values.data() + static_cast<size_t>(y) * static_cast<size_t>(grid.cols);
    for (int x = 0; x < grid.cols; ++x) line[x] = std::isnan(cells[x]) ? masked : colorAt(ColorMap::Sequential, cells[x]);
  }
  return image;
}

QImage signedImage(const hs::PooledGrid& grid, float range) {
  if (grid.rows == 0 || grid.cols == 0) return {};
  QImage image(grid.cols, grid.rows, QImage::Format_RGB32);
  const double inv = range > 0.0f ? 1.0 / range : 1.0;
  for (int y = 0; y < grid.rows; ++y) {
    auto* line = reinterpret_cast<QRgb*>(image.scanLine(y));
    const float* cells = grid.values.data() + static_cast<size_t>(y) * static_cast<size_t>(grid.cols);
    for (int x = 0; x < grid.cols; ++x) line[x] = colorAt(ColorMap::Diverging, 0.5 + 0.5 * cells[x] * inv);
  }
  return image;
}

}  // namespace hs::ui
