// The slow, obviously correct forward pass (plain loops, double accumulators) that the fast one
// is tested against. Only for tests: it is O(everything) and single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/model/cache.h"
#include "core/model/weights.h"

namespace hs::test {

// Runs the weights' architecture as its description says, independently of core/model/forward.cpp
// and ops.cpp.
std::shared_ptr<ActivationCache> forward_reference(std::shared_ptr<const Weights> weights,
                                                   std::span<const int32_t> tokens);

// The rotary inverse frequency of each rotated pair, written out from the description's
// parameters (not the core's rotary_inv_freq).
std::vector<double> inverse_frequencies(const RotaryParams& r);

}  // namespace hs::test
