#include "ui/style/colormap.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace hs::ui {
namespace {

QVector<QColor> stopsFromHex(std::initializer_list<const char*> hex) {
  QVector<QColor> stops;
  for (const char* h : hex) stops.push_back(QColor(h));
  return stops;
}

std::array<QRgb, 256> buildTable(const QVector<QColor>& stops) {
  std::array<QRgb, 256> table{};
  const int segments = static_cast<int>(stops.size()) - 1;
  for (int i = 0; i < 256; ++i) {
    const double x = i / 255.0 * segments;
    const int s = std::min(static_cast<int>(x), segments - 1);
    const double f = x - s;
    const QColor& a = stops[s];
    const QColor& b = stops[s + 1];
    table[static_cast<size_t>(i)] = qRgb(static_cast<int>(std::lround(a.red() + f * (b.red() - a.red()))),
                                         static_cast<int>(std::lround(a.green() + f * (b.green() - a.green()))),
                                         static_cast<int>(std::lround(a.blue() + f * (b.blue() - a.blue()))));
  }
  return table;
}

}  // namespace

const QVector<QColor>& colorMapStops(ColorMap map) {
  static const QVector<QColor> sequential = stopsFromHex(
      {"#ffffff", "#edf8b1", "#c7e9b4", "#7fcdbb", "#41b6c4", "#1d91c0", "#225ea8", "#253494", "#081d58"});
  static const QVector<QColor> diverging = stopsFromHex({"#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0",
                                                         "#f7f7f7", "#fddbc7", "#f4a582", "#d6604d", "#b2182b",
                                                         "#67001f"});
  static const QVector<QColor> score = stopsFromHex(
      {"#fcfbfd", "#efedf5", "#dadaeb", "#bcbddc", "#9e9ac8", "#807dba", "#6a51a3", "#54278f", "#3f007d"});
  switch (map) {
    case ColorMap::Sequential: return sequential;
    case ColorMap::Diverging: return diverging;
    case ColorMap::Score: break;
  }
  return score;
}

QRgb colorAt(ColorMap map, double t) {
  static const std::array<QRgb, 256> sequential = buildTable(colorMapStops(ColorMap::Sequential));
  static const std::array<QRgb, 256> diverging = buildTable(colorMapStops(ColorMap::Diverging));
  static const std::array<QRgb, 256> score = buildTable(colorMapStops(ColorMap::Score));
  if (!std::isfinite(t)) return maskedColor().rgb();
  // Rounds half up like std::lround on the clamped, non-negative value, without its library call:
  // this runs per pixel of every thumbnail and r_h image (docs/benchmarks.md, "Measurements
  // behind the code").
  const int i = static_cast<int>(std::clamp(t, 0.0, 1.0) * 255.0 + 0.5);
  const std::array<QRgb, 256>& table =
      map == ColorMap::Sequential ? sequential : map == ColorMap::Diverging ? diverging : score;
  return table[static_cast<size_t>(i)];
}

QColor maskedColor() { return QColor(0xd9, 0xd9, 0xd9); }
QColor accentColor() { return QColor(0xe6, 0x55, 0x0d); }  // orange: stands out on both maps

}  // namespace hs::ui
