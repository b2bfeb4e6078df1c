// The two colour maps HeadScope uses everywhere, as 256-entry lookup tables.
//   Sequential (attention weights, norms): white at 0 to dark blue at 1, ColorBrewer YlGnBu
//   with white prepended; monotone in lightness, so it reads in greyscale and for colour-blind
//   people.
//   Diverging (attributions, signed activations, differences): ColorBrewer RdBu reversed, blue
//   for negative, white at 0, red for positive; symmetric around 0 by construction.
//   Score (per-head scores drawn on top of the thumbnails, e.g. induction): ColorBrewer Purples,
//   near-white at 0 to dark purple at 1; sequential and single-hue like the first, but a hue
//   neither the patterns (blue-green) nor the selection outline (orange) use.
#pragma once

#include <QColor>
#include <QVector>

namespace hs::ui {

enum class ColorMap { Sequential, Diverging, Score };

// Control points of the map, evenly spaced over [0, 1].
const QVector<QColor>& colorMapStops(ColorMap map);
// t in [0, 1] (clamped); for Diverging, 0.5 is the zero point.
QRgb colorAt(ColorMap map, double t);
// The colour for a masked cell (attention to a later position): a neutral grey, not a weight.
QColor maskedColor();
// Colour of the selection outline and of highlighted bands.
QColor accentColor();

}  // namespace hs::ui
