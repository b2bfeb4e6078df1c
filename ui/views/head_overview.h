// Every head's attention pattern as a thumbnail in a grid: one row per layer (L0, L1, ...), one
// column per head (H0, H1, ...), titled as one figure. The window's head panel and Export All's
// overview both show it.
#pragma once

#include "ui/controller/results.h"

namespace hs::ui {

class ImageGridView;

// `tooltips`: each thumbnail says how to select it (the window's grid is clickable).
void showHeadOverview(ImageGridView& grid, const RunResult& run, bool tooltips);

}  // namespace hs::ui
