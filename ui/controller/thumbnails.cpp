#include "ui/controller/thumbnails.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ui/style/colormap.h"

namespace hs::ui {

QImage patternThumbnail(const hs::ActivationCache& cache, int layer, int head, int max_side) {
  const int n = cache.n_pos();
  if (n == 0) return {};
  const int block = (n + max_side - 1) / max_side;  // cells per pixel along each side
  const int side = (n + block - 1) / block;
  QImage image(side, side, QImage::Format_RGB32);
  const QRgb masked = maskedColor().rgb();
  std::vector<float> peak(static_cast<size_t>(side));
  for (int py = 0; py < side; ++py) {
    // The largest weight of each block of keys over this block of queries, read row by row from
    // the cache's packed lower triangle (no [pos, pos] copy).
    std::fill(peak.begin(), peak.end(), 0.0f);
    const int q0 = py * block, q1 = std::min(n, q0 + block);
    for (int q = q0; q < q1; ++q) {
      const hs::ConstRowVectorRef row = cache.pattern_row(layer, head, q);  // keys 0..q
      for (int k = 0; k <= q; ++k) {
        float& p = peak[static_cast<size_t>(k / block)];
        p = std::max(p, row[k]);
      }
    }
    auto* line = reinterpret_cast<QRgb*>(image.scanLine(py));
    for (int px = 0; px < side; ++px)
      line[px] = px * block > q1 - 1 ? masked : colorAt(ColorMap::Sequential, peak[static_cast<size_t>(px)]);
  }
  return image;
}

QImage signedMatrixImage(const hs::RowMatrixXf& m, float range, int max_w, int max_h) {
  const int rows = static_cast<int>(m.rows()), cols = static_cast<int>(m.cols());
  if (rows == 0 || cols == 0) return {};
  const int by = (rows + max_h - 1) / max_h, bx = (cols + max_w - 1) / max_w;
  const int h = (rows + by - 1) / by, w = (cols + bx - 1) / bx;
  QImage image(w, h, QImage::Format_RGB32);
  const double inv = range > 0.0f ? 1.0 / range : 1.0;
  for (int py = 0; py < h; ++py) {
    auto* line = reinterpret_cast<QRgb*>(image.scanLine(py));
    for (int px = 0; px < w; ++px) {
      float pick = 0.0f;
      for (int r = py * by; r < std::min(rows, (py + 1) * by); ++r)
        for (int c = px * bx; c < std::min(cols, (px + 1) * bx); ++c)
          if (std::fabs(m(r, c)) > std::fabs(pick)) pick = m(r, c);
      line[px] = colorAt(ColorMap::Diverging, 0.5 + 0.5 * pick * inv);
    }
  }
  return image;
}

}  // namespace hs::ui
