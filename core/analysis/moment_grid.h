// Count, mean and M2 per cell of a grid, in double: exact, mergeable accumulators of a sample's
// mean and variance (Welford's step; Chan, Golub and LeVeque's pairwise merge). The data-set scan
// (scan.h) and the per-head statistics (head_dataset.h) keep their floating-point aggregates in
// these.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hs {

// Count, mean and M2 per cell of a [rows, cols] grid (row-major).
class MomentGrid {
 public:
  MomentGrid() = default;
  MomentGrid(int rows, int cols);

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  // Welford's step; a non-finite x (no score) is not counted.
  void add(int r, int c, double x);
  // Chan et al.: the grid of the union of both samples. Throws hs::Error for another shape.
  void merge(const MomentGrid& other);

  int64_t count(int r, int c) const { return count_[index(r, c)]; }
  double mean(int r, int c) const;      // NaN when count is 0
  // Population variance M2 / count (numpy's ddof=0); NaN when count is 0.
  double variance(int r, int c) const;
  double m2(int r, int c) const { return m2_[index(r, c)]; }

  // {"rows", "cols", "count": [...], "mean": [...], "m2": [...]}: every double written so that it
  // reads back bit for bit, so a resumed or merged scan starts from exactly this state.
  nlohmann::json state() const;
  static MomentGrid from_state(const nlohmann::json& j, const std::string& name);

 private:
  size_t index(int r, int c) const { return static_cast<size_t>(r) * static_cast<size_t>(cols_) + static_cast<size_t>(c); }
  int rows_ = 0, cols_ = 0;
  std::vector<int64_t> count_;
  std::vector<double> mean_, m2_;
};

}  // namespace hs
