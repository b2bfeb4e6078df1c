// Small images of attention patterns for the head grid.
#pragma once

#include <QImage>

#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs::ui {

// Head (layer, head)'s pattern [query_pos, key_pos] as an image of at most max_side x max_side pixels: one pixel
// per cell when it fits, else each pixel is the maximum over its block of cells (a maximum, not
// a mean, so a one-cell-wide diagonal or column stays visible). Masked cells (key > query) get
// the masked colour; weights use the sequential map on the fixed range [0, 1].
QImage patternThumbnail(const hs::ActivationCache& cache, int layer, int head, int max_side = 64);

// A signed matrix [rows, cols] as an image of at most max_w x max_h pixels on the diverging map,
// symmetric in [-range, range]; each pixel shows the entry of largest magnitude in its block.
QImage signedMatrixImage(const hs::RowMatrixXf& m, float range, int max_w = 256, int max_h = 256);

}  // namespace hs::ui
