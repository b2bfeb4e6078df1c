// What each view of a run shows, computed here so the GUI and the CLI compute the same thing:
// the GUI schedules these on its workers and turns the results into pixels (a grid's values
// become colours, a NaN the masked colour); nothing here knows about colours or Qt.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/analysis/concat_sum.h"
#include "core/analysis/dla.h"
#include "core/analysis/residual.h"
#include "core/analysis/top_k.h"
#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

// A small grid summarizing a large matrix (thumbnails, small multiples). values [rows, cols] row-major.
struct PooledGrid {
  int rows = 0, cols = 0;              // cells
  int block_rows = 1, block_cols = 1;  // source entries per cell along each axis
  std::vector<float> values;           // NaN: every entry of the cell's block is masked
};

// Head (layer, head)'s attention pattern [query_pos, key_pos] max-pooled to at most max_side x max_side
// cells: block = ceil(n_pos / max_side) positions per cell on both axes; each cell holds the
// largest weight of its block (a maximum, so a one-cell diagonal stays visible); a cell whose first
// key is after the block's last query (entirely masked) is NaN. Read from the cache's lower-triangle
// rows (pattern_row), never a [pos, pos] copy. An empty grid for a run without tokens; throws
// hs::Error for a layer or head that does not exist.
PooledGrid pooled_pattern(const ActivationCache& cache, int layer, int head, int max_side = 64);
// The same, reusing the rows of cells of `previous` (the grid of the same head in the run whose
// first `reused` positions this cache reused, made with the same max_side): a row of cells whose
// queries all lie in that prefix has the same values as long as the block size is the same, which
// it is while the prompt's length stays within one multiple of max_side. Typing at the end of a
// long prompt then pools only the last row of cells.
PooledGrid pooled_pattern(const ActivationCache& cache, int layer, int head, int max_side, const PooledGrid* previous,
                          int reused);

// A signed matrix pooled to at most max_rows x max_cols cells; each cell holds the entry of largest
// magnitude in its block (the first one in row-major order on ties; 0 for an all-zero block).
// Blocks are ceil(rows / max_rows) x ceil(cols / max_cols) entries, the last ones cut short.
PooledGrid pooled_signed(const RowMatrixXf& m, int max_rows = 256, int max_cols = 256);

// The q-quantile of |x| over all entries of the matrices, from at most 2^14 evenly spaced samples
// (every stride-th entry, counting across the matrices in order): a colour range needs no more.
// 0 when there are no entries.
float abs_quantile(const std::vector<RowMatrixXf>& ms, double q);

// Everything the contributions view shows at one position.
struct PositionAnalysis {
  int pos = 0;                      // clamped into [0, n_pos)
  bool target_is_prediction = true; // no target was given: the target is the top prediction
  int32_t target = 0;
  RowMatrixXf write_norms;          // [layer, head]
  ResidualDecomposition parts;
  LogitAttribution dla;
  std::vector<Prediction> top;      // top_k predictions after pos
};
PositionAnalysis analyze_position(const ActivationCache& cache, int pos, std::optional<int32_t> target, int top_k);

// Everything the concat-vs-sum view shows for one layer.
struct LayerAnalysis {
  int layer = 0;                    // clamped into [0, n_layer)
  ConcatVsSum cs;
  float output_range = 1.0f;        // max(|via_concat|, |via_sum|); 1 when that is 0
  float head_range = 1.0f;          // abs_quantile(cs.head_results, 0.995); output_range when 0
  std::vector<PooledGrid> head_results_pooled;  // [head] pooled_signed(cs.head_results[h], 256, 256)
};
LayerAnalysis analyze_layer(const ActivationCache& cache, int layer);

// What every view needs from a run regardless of the selection.
struct RunOverview {
  std::vector<Prediction> next;           // top_k predictions after the last position
  std::vector<PooledGrid> thumbnails;     // [layer * n_head + head] pooled_pattern(.., thumbnail_side)
};
RunOverview overview_of_run(const ActivationCache& cache, int top_k, int thumbnail_side = 64);
// The same, reusing earlier thumbnails where they cannot have changed: `previous_thumbnails` must
// be the thumbnails (with the same thumbnail_side) of the run whose prefix `cache` reused
// (cache.reused_prefix positions of it).
RunOverview overview_of_run(const ActivationCache& cache, int top_k, int thumbnail_side,
                            const std::vector<PooledGrid>* previous_thumbnails);

}  // namespace hs
