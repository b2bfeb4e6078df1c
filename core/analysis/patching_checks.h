// Whether a patching sweep's two prompts make a measurement worth reading. The normalized effect
// (m - m_corrupt) / (m_clean - m_corrupt) divides by the gap between the two runs' metrics: when
// that gap is small next to how much logits differ anyway, every cell's colour is noise magnified;
// when the clean run does not even prefer the answer, "restoring the clean run" restores a wrong
// prediction. Neither is an error (the sweep still runs); both must be said beside the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/cache.h"

namespace hs {

// The metric's natural spread: the standard deviation, over the vocabulary, of the clean run's
// logits at the last position. A logit difference of one spread is a large preference.
double logit_spread(const ActivationCache& run);

// The gap m_clean - m_corrupt is "small" below this fraction of the spread: a quarter of the logits'
// standard deviation is a weak preference, and dividing by it saturates the normalized colours.
inline constexpr double kSmallMetricGap = 0.25;

// One sentence per problem, for a person (empty: nothing to warn about):
//  - the clean run does not prefer the answer (m_clean <= 0: logit(answer) <= logit(wrong));
//  - the corrupted run prefers the answer at least as much as the clean one (m_corrupt >= m_clean);
//  - |m_clean - m_corrupt| is under kSmallMetricGap spreads, so the normalized colours saturate.
// The metrics are the sweep's (logit_difference at the last position of each run).
std::vector<std::string> patching_warnings(const ActivationCache& clean, float metric_clean, float metric_corrupt);

}  // namespace hs
