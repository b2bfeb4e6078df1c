// The colours of the pooled grids that core/analysis/view_data computes: thumbnails of attention
// patterns for the head grid, and signed matrices for small multiples. Any thread.
#pragma once

#include <QImage>

#include "core/analysis/view_data.h"

namespace hs::ui {

// One pixel per cell: the sequential map on the fixed range [0, 1]; masked cells (NaN) in the
// masked colour.
QImage patternImage(const hs::PooledGrid& grid);

// One pixel per cell on the diverging map, symmetric in [-range, range].
QImage signedImage(const hs::PooledGrid& grid, float range);

}  // namespace hs::ui
