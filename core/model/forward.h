// The forward pass, filling an ActivationCache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/model/cache.h"
#include "core/model/intervention.h"
#include "core/model/weights.h"

namespace hs {

struct RunOptions {
  bool store_scores = false;   // keep hook_attn_scores (otherwise derived on request)
  bool store_results = false;  // keep hook_result (otherwise derived on request)
  // Keep mlp.hook_pre (and hook_pre_linear, gated) rather than derive them on request: what the
  // backward pass reads, so a run made for a gradient saves re-running every layer's widest
  // product (docs/benchmarks.md, "Measurements behind the code").
  bool store_mlp_pre = false;
  bool logits_only = false;    // keep only logits (benchmarks, generation): no per-layer cache
  // Threads for this run (0: choose from the size of the work). Applies to the calling thread
  // only, so concurrent runs (the GUI's worker, a benchmark) do not disturb each other.
  int threads = 0;
  // Edits of activations during the run (ablations, patches, steering, callables;
  // intervention.h), applied in order at their hook. Empty: a plain run, bit for bit.
  Interventions interventions;
};

// Whether an earlier run's cache holds everything a run with `options` keeps: its layers (it was
// not a logits-only run), the extras the options store (scores, per-head results), and the same
// interventions. Only such a cache may lend its prefix to a new run, or stand in for it.
bool cache_covers(const ActivationCache& cache, const RunOptions& options);

// The automatic choice: one thread when the run is small enough that forking costs more than it
// saves (and a busy machine would make every fork-join wait for a descheduled thread), else all;
// and all whenever the weights outgrow the caches, since one token then streams every weight
// from memory and each core adds bandwidth.
int auto_threads(const ModelConfig& config, int n_tokens);

// Runs the model on `tokens` (used exactly as given). Throws hs::Error for an architecture option
// the pass does not implement (require_implemented), an empty prompt, a prompt longer than n_ctx,
// or an id outside [0, d_vocab).
//
// With `previous` (an earlier full-cache run of the same weights), the positions of the longest
// common token prefix are copied from it instead of recomputed: causal attention means their
// activations cannot depend on what follows. Only the new positions are computed; the result is
// identical to a full run (tested). At least the last position is always recomputed. A run with
// interventions reuses only a run with the same ones, and only when they keep positions
// independent of later ones (prefix_stable: zeros, added vectors, position-local callables): a
// mean ablation changes every position when the prompt grows, and a patch depends on its source
// run.
//
// Interventions are checked first (check_interventions); a bad one throws hs::Error.
std::shared_ptr<ActivationCache> forward(std::shared_ptr<const Weights> weights, std::span<const int32_t> tokens,
                                         const RunOptions& options = {},
                                         std::shared_ptr<const ActivationCache> previous = nullptr);

// What a batched pass (forward_batch) keeps of each prompt.
struct BatchRunOptions {
  // The patterns of blocks 0 .. layers - 1 (-1: every block). The pass stops after the last of
  // them needs: its queries and keys, and its z when keep_z; nothing after it unless logits.
  int layers = -1;
  bool keep_z = false;   // z [pos, n_heads*d_head] of those blocks
  bool logits = false;   // every block, the final norm's scales and the logits
  int threads = 0;       // 0: chosen from the work, as forward()
};

// The batched pass's temporaries, kept by a caller that runs many batches (the scan): matrices of
// tens of megabytes, which malloc would map and unmap on every pass, and the kernel zero again
// page by page (a fifth of a scan's time before they were kept).
struct BatchScratch {
  // One matrix per shape: a matrix that changed shape between products would be allocated anew
  // each time (Eigen reallocates on any change of size).
  RowMatrixXf resid, normalized, qkv, z, attn_out, mlp_pre, mlp_gate, mlp_post, mlp_out;
  std::vector<RowMatrixXf> attention, q_new, z_new;
};

// Several prompts through the model in one pass: each block's matrix products take the rows of
// every prompt stacked (one product of sum(T_b) rows instead of B small ones), attention runs per
// prompt and head. Returns one cache per prompt with its tokens and what `options` keeps: the
// patterns of the blocks asked for, z, ln_final's scales and the logits; every other key of those
// caches is empty and must not be read (they are for the data-set scan, which reads only these).
// Each value is the same bits as forward() gives for that prompt alone: the products' outputs do
// not depend on the rows beside them (packed_gemm.h) and attention runs the same code per prompt.
// Throws hs::Error as forward() does for a bad prompt; no interventions.
std::vector<std::shared_ptr<ActivationCache>> forward_batch(std::shared_ptr<const Weights> weights,
                                                            std::span<const std::vector<int32_t>> prompts,
                                                            const BatchRunOptions& options,
                                                            BatchScratch* scratch = nullptr);

}  // namespace hs
