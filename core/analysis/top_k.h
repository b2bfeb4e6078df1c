// The most likely tokens: the k largest entries of one row of logits, by one scan (the lens and
// the OV circuit read a row of d_vocab per cell and keep only its top few), and the next-token
// predictions of a run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor/eigen.h"

namespace hs {

class ActivationCache;

// out = the k largest (value, index) pairs of `row`, largest first; on equal values the lower
// index first. NaN entries are never chosen, so `out` may hold fewer than k.
inline void top_k_entries(const Eigen::Ref<const RowVectorXf>& row, int k, std::vector<std::pair<float, int32_t>>& out) {
  out.clear();
  out.reserve(static_cast<size_t>(k) + 1);
  for (Eigen::Index t = 0; t < row.size(); ++t) {
    const float v = row(t);
    // Most entries lose against the current k-th at once.
    if (static_cast<int>(out.size()) == k && !(v > out.back().first)) continue;
    if (v != v) continue;  // NaN
    const auto at = std::upper_bound(out.begin(), out.end(), v, [](float x, const auto& e) { return x > e.first; });
    out.insert(at, {v, static_cast<int32_t>(t)});
    if (static_cast<int>(out.size()) > k) out.pop_back();
  }
}

struct Prediction {
  int32_t id = 0;
  float probability = 0.0f;
  float logit = 0.0f;
};
// The k most likely next tokens after `pos`, most likely first.
std::vector<Prediction> top_predictions(const ActivationCache& cache, int pos, int k);

}  // namespace hs
