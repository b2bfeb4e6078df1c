// Activation patching: which activation carries the answer from a clean prompt to a corrupted
// one. Each patched run is the corrupted run with one activation copied from the clean run —
// the residual stream entering a layer at one position, an attention or MLP block's output at
// one position, or one head's z at every position — and is scored by the metric
//   m = logit(answer) - logit(wrong) at the last position,
// shown as the normalized effect (m - m_corrupt) / (m_clean - m_corrupt): 0 where the patch
// changes nothing, 1 where it restores the clean answer.
//
// The sweep does not re-run the model for each cell. A patch at layer l and position p leaves
// every layer before l untouched, and in layer l every position before p (attention is causal):
// a patched run takes the corrupted run's cache up to there, its keys and values of the earlier
// positions included, and recomputes only rows p.. of the layers from l on. All patched runs go
// through each layer together, so every weight matrix is streamed once per layer for the whole
// sweep instead of once per run, and only the last position's metric is computed at the end (two
// unembedding rows through the final norm, not the whole vocabulary). A patch that copies a
// value equal, bit for bit, to the corrupted one is the corrupted run, and is not recomputed.
// patching_sweep_full_runs is the definition — one full forward pass per cell, forward()'s Patch
// intervention — that the tests hold the fast sweep to.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/model/cache.h"
#include "core/model/intervention.h"
#include "core/tensor/eigen.h"

namespace hs {

class Model;

// The two prompts and the two answers of a sweep, as token ids.
struct PatchingInputs {
  std::vector<int32_t> clean, corrupt;  // the same length
  int32_t answer = 0, wrong = 0;        // different tokens
};

// The id of `text`, which must encode (without BOS) to exactly one token; `role` names it in the
// message ("the answer"). Throws hs::Error saying how many tokens it is and which.
int32_t single_token(const Model& model, std::string_view text, std::string_view role);

// Tokenizes the prompts (BOS first when asked) and the answers, and checks what a sweep needs:
// prompts of the same number of tokens, answers of one token each, two different answers.
// Throws hs::Error with a message for a person; the CLI and the GUI show it as it is.
PatchingInputs patching_inputs(const Model& model, std::string_view clean, std::string_view corrupt,
                               std::string_view answer, std::string_view wrong, bool prepend_bos = true);

// The checks of every sweep between two runs (the exact one and attribution patching's estimate):
// one model, the same number of tokens, full caches, no interventions. Throws hs::Error.
void check_patching_runs(const ActivationCache& clean, const ActivationCache& corrupt);
// The two runs' metrics are finite and differ (the normalization divides by their difference);
// `metric` names it in the message.
void check_patching_metrics(float m_clean, float m_corrupt,
                            std::string_view metric = "logit(answer) - logit(wrong)");

// logit(answer) - logit(wrong) at the last position of a run.
float logit_difference(const ActivationCache& cache, int32_t answer, int32_t wrong);

struct PatchingResult {
  HookPoint what = HookPoint::ResidPre;
  float metric_clean = 0.0f, metric_corrupt = 0.0f;
  RowMatrixXf raw;         // [n_layers, pos]; for Z [n_layers, n_heads]: the metric of each patched run
  RowMatrixXf normalized;  // (raw - metric_corrupt) / (metric_clean - metric_corrupt)
  int recomputed_runs = 0; // cells that were computed (the others equal the corrupted run)
  bool batched = true;     // false: the architecture needed one full run per cell
};

// How a long sweep reports and stops. Both are called on the sweep's own thread, between steps.
struct SweepControl {
  int threads = 0;                               // OpenMP threads for the sweep; 0: every core
  std::function<void(double fraction)> progress;  // 0 .. 1
  std::function<bool()> cancelled;               // true: stop now, throwing hs::Cancelled
  // The batched sweep's working set: at most this many rows go through the layers together
  // (memory grows with rows x d_mlp); a larger sweep runs in groups. Tests lower it.
  int64_t max_group_rows = 4096;
  // Cells whose patched value equals the corrupted run's, bit for bit, are the corrupted run and
  // get its metric without a computation. Tests turn this off to compute them anyway.
  bool skip_unchanged = true;
};

// The sweep over every layer and position (every layer and head for Z) of `what`, from `clean`
// into `corrupt` (two full-cache runs of the same weights and length). Throws hs::Error for runs
// that do not fit together, a token id outside the vocabulary, or a metric that is the same on
// both prompts (nothing to normalize by); hs::Cancelled when control.cancelled() says so.
PatchingResult patching_sweep(const ActivationCache& clean, const ActivationCache& corrupt, int32_t answer,
                              int32_t wrong, HookPoint what, const SweepControl& control = {});

// The same sweep by definition: one full forward pass of the corrupted tokens per cell, with a
// Patch intervention from `clean`. The reference of the tests, and the path for architectures
// whose layers the batched sweep does not know (it says so in PatchingResult::batched).
PatchingResult patching_sweep_full_runs(std::shared_ptr<const ActivationCache> clean,
                                        std::shared_ptr<const ActivationCache> corrupt, int32_t answer, int32_t wrong,
                                        HookPoint what, const SweepControl& control = {});

}  // namespace hs
