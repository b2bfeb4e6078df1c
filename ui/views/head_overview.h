// Every head's attention pattern as a thumbnail in a grid: one row per layer (L0, L1, ...), one
// column per head (H0, H1, ...), titled as one figure. The window's head panel and Export All's
// overview both show it. The panel can put one head metric's badge on each thumbnail and sort or
// filter the heads by it (HeadBadges).
#pragma once

#include <optional>
#include <vector>

#include "ui/controller/head_metrics.h"
#include "ui/controller/results.h"

namespace hs::ui {

class ImageGridView;

// What the grid shows on top of the thumbnails.
struct HeadBadges {
  const HeadMetric* metric = nullptr;        // null: no badges, layer-by-layer order
  const HeadMetricValues* values = nullptr;  // [layer, head] of `metric`; null or another shape: no values ("—")
  bool sorted = false;                       // highest first, no score last; rows are no longer layers
  std::optional<float> threshold;            // only heads with a score >= threshold are shown
};

// `tooltips`: each thumbnail says how to select it (the window's grid is clickable).
void showHeadOverview(ImageGridView& grid, const RunResult& run, bool tooltips, const HeadBadges& badges = {});

// The grid's display order (ImageGridView::setDisplayOrder) for values [layer, head]: sorted, highest first (ties
// and no score in layer/head order, no score last), or in place with filtered-out heads left as
// empty cells; only heads with a score >= threshold when one is given. nullopt: every head in
// place (neither sorted nor filtered).
std::optional<std::vector<int>> headOrder(const hs::RowMatrixXf& values, bool sorted, std::optional<float> threshold);

}  // namespace hs::ui
