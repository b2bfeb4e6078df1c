#include "core/analysis/ablation.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace hs {
namespace {

// log_softmax of one row of logits, in double.
std::vector<double> log_softmax(const Eigen::Ref<const RowVectorXf>& row) {
  const double m = row.maxCoeff();
  double z = 0.0;
  for (Eigen::Index i = 0; i < row.size(); ++i) z += std::exp(static_cast<double>(row(i)) - m);
  const double log_z = m + std::log(z);
  std::vector<double> out(static_cast<size_t>(row.size()));
  for (Eigen::Index i = 0; i < row.size(); ++i) out[static_cast<size_t>(i)] = static_cast<double>(row(i)) - log_z;
  return out;
}

}  // namespace

RunComparison compare_runs(const ActivationCache& before, const ActivationCache& after, int top_k,
                           std::optional<int32_t> target) {
  if (before.weights() != after.weights() || before.tokens() != after.tokens())
    throw Error("the runs to compare are not of the same model and tokens.");
  const int V = before.config().d_vocab;
  RunComparison r;
  r.pos = before.n_pos() - 1;
  r.before = top_predictions(before, r.pos, top_k);
  r.after = top_predictions(after, r.pos, top_k);
  r.target = target ? *target : (r.before.empty() ? 0 : r.before.front().id);
  if (r.target < 0 || r.target >= V)
    throw Error("token " + std::to_string(r.target) + " is outside the vocabulary [0, " + std::to_string(V) + ").");
  r.logit_before = before.logits(r.pos, r.target);
  r.logit_after = after.logits(r.pos, r.target);
  r.kl.resize(static_cast<size_t>(before.n_pos()));
  for (int p = 0; p < before.n_pos(); ++p) {
    const std::vector<double> lp = log_softmax(before.logits.row(p)), lq = log_softmax(after.logits.row(p));
    double kl = 0.0;
    for (size_t t = 0; t < lp.size(); ++t) kl += std::exp(lp[t]) * (lp[t] - lq[t]);
    r.kl[static_cast<size_t>(p)] = std::max(0.0, kl);  // >= 0; rounding can leave -1e-17
  }
  return r;
}

}  // namespace hs
