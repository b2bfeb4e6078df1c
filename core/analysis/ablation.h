// What an ablation did: a run with ablations (RunOptions::interventions) beside the plain run of
// the same tokens. The GUI's before/after panel and `headscope-cli run --ablate` read this.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/analysis/top_k.h"
#include "core/model/cache.h"

namespace hs {

struct RunComparison {
  int pos = 0;                        // the last position, where the next token is predicted
  std::vector<Prediction> before;     // top_k predictions after pos, plain run
  std::vector<Prediction> after;      // the same, ablated run
  int32_t target = 0;                 // the token followed: given, else the plain run's top prediction
  float logit_before = 0.0f, logit_after = 0.0f;
  float logit_change() const { return logit_after - logit_before; }
  // [pos] KL(plain || ablated) of the next-token distributions at each position, in nats:
  // sum_t p(t) (log p(t) - log q(t)), p from the plain run, q from the ablated one; computed in
  // double from the logits.
  std::vector<double> kl;
};

// Throws hs::Error when the runs are not of the same model and tokens, or the target is not a
// token of the vocabulary.
RunComparison compare_runs(const ActivationCache& before, const ActivationCache& after, int top_k,
                           std::optional<int32_t> target = std::nullopt);

}  // namespace hs
