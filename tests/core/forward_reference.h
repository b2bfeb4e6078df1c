// The slow, obviously correct forward pass (plain loops, double accumulators) that the fast one
// is tested against. Only for tests: it is O(everything) and single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/model/cache.h"
#include "core/model/weights.h"

namespace hs::test {

// Runs the weights' architecture as its description says, independently of core/model/forward.cpp
// and ops.cpp.
std::shared_ptr<ActivationCache> forward_reference(std::shared_ptr<const Weights> weights,
                                                   std::span<const int32_t> tokens);

}  // namespace hs::test
