// The slow, obviously correct backward pass that the fast one (core/model/backward.cpp) is tested
// against. It shares no formula with it: the model is written out once more, in double, on a
// scalar tape (every value a node that knows its inputs and the local derivative towards each),
// and the tape's reverse sweep gives the derivative of the metric at every node. Each hook point
// of the contract is its own node (an identity where TransformerLens puts a hook on a value it
// already has, as hook_resid_pre on the last block's output), so a key's adjoint is the total
// derivative a TransformerLens backward hook sees there. Only for tests: single-threaded, a node
// per scalar.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/model/metric.h"
#include "core/model/weights.h"

namespace hs::test {

struct ReferenceGradients {
  double metric = 0.0;
  // Every key the metric depends on (some element of it reaches the metric on the tape), laid out
  // as ActivationCache::get lays the key out.
  std::map<std::string, std::vector<double>> grads;
};

ReferenceGradients backward_reference(std::shared_ptr<const Weights> weights, std::span<const int32_t> tokens,
                                      const Metric& metric);

}  // namespace hs::test
