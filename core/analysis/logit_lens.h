// The logit lens (nostalgebraist, 2020): what the model would predict if the residual stream
// stopped early. Each layer's resid_pre, and the final resid_post, goes through the final norm
// (its own statistics per vector, its learned weight and bias, of the architecture's norm kind),
// the unembedding and a log-softmax over the vocabulary.
//
// Streams are indexed i = 0 .. n_layers: i < n_layers is blocks.{i}.hook_resid_pre, i == n_layers
// is blocks.{n_layers-1}.hook_resid_post, whose lens is the run's own log-softmaxed logits (the
// same kernels on the same values; tested). One product per stream, through the packed
// unembedding kernel of the forward pass (unembed_forward).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

// "blocks.2.hook_resid_pre", ..., "blocks.3.hook_resid_post" for stream i (TransformerLens names).
std::string lens_stream_name(const ModelConfig& config, int stream);
// Short row labels for a grid: "L2 pre", ..., "L3 post".
std::string lens_stream_label(const ModelConfig& config, int stream);

// Every stream's log-probabilities: logprobs [stream * n_pos + pos, d_vocab], i.e. the rows of
// stream i are block i of n_pos rows. Large ((n_layers + 1) * pos * d_vocab floats): for the CLI
// and tests; views use logit_lens_summary. Throws hs::Error for a logits-only run.
struct LogitLens {
  int n_streams = 0;     // n_layers + 1
  int n_pos = 0;
  int d_vocab = 0;
  RowMatrixXf logprobs;  // [n_streams * n_pos, d_vocab]
  // Stream i's [pos, d_vocab] block.
  ConstMatrixRef stream(int i) const {
    return ConstMatrixRef(logprobs.data() + static_cast<Eigen::Index>(i) * n_pos * d_vocab, n_pos, d_vocab);
  }
};
LogitLens logit_lens(const ActivationCache& cache);

// What the lens view shows: per cell (stream, pos) the top_k tokens with their probabilities, and
// the probability and rank of a target token when one is given. Computed stream by stream
// without keeping the [pos, d_vocab] log-probs. Everything [stream, pos, ...] is row-major.
struct LogitLensSummary {
  int n_streams = 0;                   // rows: n_layers + 1
  int n_pos = 0;                       // columns
  int top_k = 0;
  std::optional<int32_t> target;
  std::vector<std::string> stream_labels;  // [stream] lens_stream_label
  std::vector<int32_t> top_ids;        // [stream, pos, top_k], most likely first
  std::vector<float> top_probs;        // [stream, pos, top_k]
  std::vector<float> target_probs;     // [stream, pos]; empty without a target
  std::vector<int32_t> target_ranks;   // [stream, pos]; 0 = the most likely token; empty without a target
  // What the grid is coloured by, in [0, 1]: the target's probability when there is a target,
  // else the top token's. NaN where the logits were not finite.
  std::vector<float> colour_values;    // [stream, pos]

  // Bookkeeping for reuse (see logit_lens_summary's `previous`).
  std::weak_ptr<const Weights> weights;
  std::vector<int32_t> tokens;

  size_t cell(int stream, int pos) const { return static_cast<size_t>(stream) * n_pos + pos; }
  int32_t top_id(int stream, int pos, int k) const { return top_ids[cell(stream, pos) * top_k + k]; }
  float top_prob(int stream, int pos, int k) const { return top_probs[cell(stream, pos) * top_k + k]; }
};

// The lens summary of `cache`. `target` must be a token id of the model (throws hs::Error
// otherwise); top_k is clamped to [1, d_vocab]. With `previous` (a summary of an earlier run of
// the same weights, for the same target and top_k), the columns of the tokens both runs share
// as a prefix are copied instead of recomputed: by causality a position's residual stream
// depends only on the tokens up to it, so typing at the end computes one column. The copies are
// the very bits a fresh summary would hold when the run reused the earlier run's cache prefix
// (as typing does: forward() copies those rows); otherwise they differ by float32 rounding, as
// the two runs' residual streams do.
LogitLensSummary logit_lens_summary(const ActivationCache& cache, std::optional<int32_t> target, int top_k = 5,
                                    const LogitLensSummary* previous = nullptr);

}  // namespace hs
