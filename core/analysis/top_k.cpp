#include "core/analysis/top_k.h"

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/model/cache.h"

namespace hs {

std::vector<Prediction> top_predictions(const ActivationCache& cache, int pos, int k) {
  if (pos < 0 || pos >= cache.n_pos()) throw Error("position " + std::to_string(pos) + " is outside the prompt.");
  const auto row = cache.logits.row(pos);
  const int V = static_cast<int>(row.size());
  k = std::clamp(k, 0, V);
  const float m = row.maxCoeff();
  double z = 0.0;
  for (int i = 0; i < V; ++i) z += std::exp(static_cast<double>(row(i) - m));
  std::vector<int> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return row(a) > row(b); });
  std::vector<Prediction> out;
  for (int i = 0; i < k; ++i) {
    const int id = idx[static_cast<size_t>(i)];
    out.push_back({id, static_cast<float>(std::exp(static_cast<double>(row(id) - m)) / z), row(id)});
  }
  return out;
}

}  // namespace hs
