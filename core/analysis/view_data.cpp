#include "core/analysis/view_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace hs {
namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

void check_cells(int max_rows, int max_cols) {
  if (max_rows < 1 || max_cols < 1)
    throw Error("a pooled grid needs at least one cell per side (asked for " + std::to_string(max_rows) + " x " +
                std::to_string(max_cols) + ").");
}

// The analyses below clamp a selection into the run; a run with nothing to clamp into says so.
void check_has_tokens(const ActivationCache& cache) {
  if (cache.n_pos() == 0) throw Error("the run has no tokens; type some text (or keep BOS on).");
}

void check_has_layers(const ActivationCache& cache) {
  if (cache.n_layer() == 0) throw Error("this run kept only the logits; run again with the full cache.");
}

}  // namespace

PooledGrid pooled_pattern(const ActivationCache& cache, int layer, int head, int max_side) {
  return pooled_pattern(cache, layer, head, max_side, nullptr, 0);
}

PooledGrid pooled_pattern(const ActivationCache& cache, int layer, int head, int max_side, const PooledGrid* previous,
                          int reused) {
  check_cells(max_side, max_side);
  if (layer < 0 || layer >= cache.n_layer())
    throw Error("layer " + std::to_string(layer) + " does not exist (0.." + std::to_string(cache.n_layer() - 1) + ").");
  if (head < 0 || head >= cache.config().n_heads)
    throw Error("head " + std::to_string(head) + " does not exist (0.." + std::to_string(cache.config().n_heads - 1) +
                ").");
  PooledGrid grid;
  const int n = cache.n_pos();
  if (n == 0) return grid;
  const int window = attention_window(cache.config(), layer);  // 0: a global layer
  const int block = ceil_div(n, max_side);  // positions per cell along each side
  const int side = ceil_div(n, block);
  grid.rows = grid.cols = side;
  grid.block_rows = grid.block_cols = block;
  grid.values.resize(static_cast<size_t>(side) * static_cast<size_t>(side));
  // Rows of cells whose queries all lie in the reused prefix, from the earlier grid (whose cells to
  // the right of its last column are masked, as they are here).
  int first_row = 0;
  if (previous && previous->block_rows == block && reused > 0) {
    first_row = std::min(reused / block, previous->rows);
    for (int py = 0; py < first_row; ++py)
      for (int px = 0; px < side; ++px)
        grid.values[static_cast<size_t>(py) * static_cast<size_t>(side) + static_cast<size_t>(px)] =
            px < previous->cols ? previous->values[static_cast<size_t>(py) * static_cast<size_t>(previous->cols) +
                                                   static_cast<size_t>(px)]
                                : std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<float> peak(static_cast<size_t>(side));  // [key cell] of one row of cells
  for (int py = first_row; py < side; ++py) {
    // The largest weight of each block of keys over this block of queries, read row by row from
    // the cache's lower triangles, one block of keys at a time.
    std::fill(peak.begin(), peak.end(), 0.0f);
    const int q0 = py * block, q1 = std::min(n, q0 + block);
    for (int q = q0; q < q1; ++q) {
      const ConstRowVectorRef row = cache.pattern_row(layer, head, q);  // keys 0..q
      for (int k0 = 0, px = 0; k0 <= q; k0 += block, ++px) {
        float& p = peak[static_cast<size_t>(px)];
        p = std::max(p, row.segment(k0, std::min(block, q + 1 - k0)).maxCoeff());
      }
    }
    float* out = grid.values.data() + static_cast<size_t>(py) * static_cast<size_t>(side);
    // A cell is masked when every query of it is past every key of it (the usual rule) or, on a
    // sliding-window layer, when all its keys lie before its first query's window.
    const int first = first_key(window, q0);
    for (int px = 0; px < side; ++px)
      out[px] = px * block > q1 - 1 || (px + 1) * block - 1 < first ? std::numeric_limits<float>::quiet_NaN()
                                                                     : peak[static_cast<size_t>(px)];
  }
  return grid;
}

PooledGrid pooled_signed(const RowMatrixXf& m, int max_rows, int max_cols) {
  check_cells(max_rows, max_cols);
  PooledGrid grid;
  const int rows = static_cast<int>(m.rows()), cols = static_cast<int>(m.cols());
  if (rows == 0 || cols == 0) return grid;
  const int by = ceil_div(rows, max_rows), bx = ceil_div(cols, max_cols);
  grid.rows = ceil_div(rows, by);
  grid.cols = ceil_div(cols, bx);
  grid.block_rows = by;
  grid.block_cols = bx;
  grid.values.resize(static_cast<size_t>(grid.rows) * static_cast<size_t>(grid.cols));
  for (int py = 0; py < grid.rows; ++py) {
    for (int px = 0; px < grid.cols; ++px) {
      float pick = 0.0f;
      for (int r = py * by; r < std::min(rows, (py + 1) * by); ++r)
        for (int c = px * bx; c < std::min(cols, (px + 1) * bx); ++c)
          if (std::fabs(m(r, c)) > std::fabs(pick)) pick = m(r, c);
      grid.values[static_cast<size_t>(py) * static_cast<size_t>(grid.cols) + static_cast<size_t>(px)] = pick;
    }
  }
  return grid;
}

// Sampled because the GUI computes it with every keystroke's layer analysis, and a colour range
// needs no more than 2^14 values.
float abs_quantile(const std::vector<RowMatrixXf>& ms, double q) {
  size_t total = 0;
  for (const auto& m : ms) total += static_cast<size_t>(m.size());
  if (total == 0) return 0.0f;
  if (!(q >= 0.0)) q = 0.0;  // also NaN
  if (q > 1.0) q = 1.0;
  const size_t stride = std::max<size_t>(1, (total + (size_t{1} << 14) - 1) >> 14);
  std::vector<float> sample;
  sample.reserve(total / stride + 1);
  size_t i = 0;
  for (const auto& m : ms)
    for (Eigen::Index k = 0; k < m.size(); ++k, ++i)
      if (i % stride == 0) sample.push_back(std::abs(m.data()[k]));
  const auto nth = sample.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(sample.size() - 1));
  std::nth_element(sample.begin(), nth, sample.end());
  return *nth;
}

PositionAnalysis analyze_position(const ActivationCache& cache, int pos, std::optional<int32_t> target, int top_k) {
  check_has_tokens(cache);
  PositionAnalysis a;
  a.pos = std::clamp(pos, 0, cache.n_pos() - 1);
  a.top = top_predictions(cache, a.pos, top_k);
  a.target_is_prediction = !target.has_value();
  a.target = target.value_or(a.top.empty() ? 0 : a.top.front().id);
  a.write_norms = head_write_norms(cache, a.pos);
  a.parts = decompose_residual(cache, a.pos);
  a.dla = direct_logit_attribution(cache, a.parts, a.target);
  return a;
}

LayerAnalysis analyze_layer(const ActivationCache& cache, int layer) {
  check_has_layers(cache);
  LayerAnalysis a;
  a.layer = std::clamp(layer, 0, cache.n_layer() - 1);
  a.cs = concat_vs_sum(cache, a.layer);
  const float out_range = std::max(a.cs.via_concat.cwiseAbs().maxCoeff(), a.cs.via_sum.cwiseAbs().maxCoeff());
  a.output_range = out_range > 0.0f ? out_range : 1.0f;
  // A quantile, not the maximum, so that a few large entries do not flatten the colours of all
  // the others (they saturate instead).
  const float head_range = abs_quantile(a.cs.head_results, 0.995);
  a.head_range = head_range > 0.0f ? head_range : a.output_range;
  a.head_results_pooled.reserve(a.cs.head_results.size());
  for (const RowMatrixXf& r : a.cs.head_results) a.head_results_pooled.push_back(pooled_signed(r, 256, 256));
  return a;
}

RunOverview overview_of_run(const ActivationCache& cache, int top_k, int thumbnail_side) {
  return overview_of_run(cache, top_k, thumbnail_side, nullptr);
}

RunOverview overview_of_run(const ActivationCache& cache, int top_k, int thumbnail_side,
                            const std::vector<PooledGrid>* previous) {
  check_has_tokens(cache);
  RunOverview o;
  o.next = top_predictions(cache, cache.n_pos() - 1, top_k);
  const int n_head = cache.config().n_heads;
  o.thumbnails.reserve(static_cast<size_t>(cache.n_layer()) * static_cast<size_t>(n_head));
  const bool reuse = previous && cache.reused_prefix > 0 &&
                     previous->size() == static_cast<size_t>(cache.n_layer()) * static_cast<size_t>(n_head);
  for (int l = 0; l < cache.n_layer(); ++l)
    for (int h = 0; h < n_head; ++h)
      o.thumbnails.push_back(pooled_pattern(cache, l, h, thumbnail_side,
                                            reuse ? &(*previous)[o.thumbnails.size()] : nullptr,
                                            cache.reused_prefix));
  return o;
}

}  // namespace hs
