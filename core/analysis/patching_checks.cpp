#include "core/analysis/patching_checks.h"

#include <cmath>
#include <cstdio>

namespace hs {
namespace {

std::string three_digits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

double logit_spread(const ActivationCache& run) {
  const ConstRowVectorRef logits = run.logits.row(run.n_pos() - 1);
  const double mean = logits.cast<double>().mean();
  double sum = 0.0;
  for (Eigen::Index i = 0; i < logits.size(); ++i) sum += (logits(i) - mean) * (logits(i) - mean);
  return std::sqrt(sum / static_cast<double>(logits.size()));
}

std::vector<std::string> patching_warnings(const ActivationCache& clean, float metric_clean, float metric_corrupt) {
  std::vector<std::string> out;
  if (metric_clean <= 0.0f)
    out.push_back("the clean run does not prefer the answer (m_clean = " + three_digits(metric_clean) +
                  " <= 0: logit(answer) <= logit(wrong)), so restoring it restores a wrong prediction; choose an "
                  "answer the model predicts on the clean prompt.");
  if (metric_corrupt >= metric_clean)
    out.push_back("the corrupted run prefers the answer at least as much as the clean one (m_corrupt = " +
                  three_digits(metric_corrupt) + " >= m_clean = " + three_digits(metric_clean) +
                  "); the corruption does not remove what the sweep looks for.");
  const double spread = logit_spread(clean), gap = std::abs(static_cast<double>(metric_clean) - metric_corrupt);
  if (spread > 0.0 && gap < kSmallMetricGap * spread)
    out.push_back("m_clean - m_corrupt = " + three_digits(static_cast<double>(metric_clean) - metric_corrupt) +
                  " is small next to the logits' spread (" + three_digits(spread) +
                  ", their standard deviation at the last position): the normalized effect divides by it, so its "
                  "colours magnify small differences. Use prompts that differ in what the model predicts.");
  return out;
}

}  // namespace hs
