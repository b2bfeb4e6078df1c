// The backward pass: the gradient of a metric (metric.h) with respect to every activation of one
// forward pass, with respect to activations only (weights are constants). Read bottom to top,
// backward.cpp is forward.cpp reversed: the metric's seed at the logits (or at the hook a dot
// product reads), the unembedding, the final norm, then each block from the MLP back through
// attention to its input, then the embeddings. Each step is the backward of one of ops.h's
// kernels; the statistics it needs come from the cache (patterns, rotated q and k, v) or are
// recomputed with the forward's kernels (norm scales, the MLP's pre-activations: the cache's own
// derivations).
//
// What each key's gradient is: the total derivative of the metric at that hook point, as a
// TransformerLens backward hook sees it (docs/DESIGN.md, "The backward pass"):
//   - the residual stream at every point; hook_embed and hook_pos_embed both receive the gradient
//     of the first hook_resid_pre (their sum);
//   - attn.hook_q, hook_k (before rotation) and hook_rot_q, hook_rot_k (rotary models); hook_k and
//     hook_v with key/value heads (GQA) summed over the query heads that share each;
//   - attn.hook_attn_scores (after the scale and a soft-cap): masked entries (keys after the
//     query, and before a sliding window's first key) 0;
//   - attn.hook_pattern: d/dpattern[h, q, k] = dM/dz[q, h] . v[k, kv(h)] for every k, above the
//     diagonal too (z = pattern @ v in TransformerLens, so its autograd fills the whole matrix,
//     although those entries are constant zeros of the softmax);
//   - attn.hook_result: dM/d hook_attn_out for every head (attn_out = sum of results + b_O);
//     with a post-attention norm (Gemma) hook_attn_out is after it, and hook_result (before it)
//     has the gradient at the norm's input; ln1_post / ln2_post's hook_normalized has hook_attn_out's
//     (hook_mlp_out's) gradient and their hook_scale as the other norms';
//   - attn.q_norm.* / k_norm.* (Gemma 3, Qwen3): between hook_q (hook_k) and hook_rot_q
//     (hook_rot_k), as the other norms' keys; hook_embed of a scaled embedding (Gemma) is the
//     scaled row, so its gradient is the one at that value; logits with a final soft-cap are the
//     capped ones (the metric reads them), and the chain rule goes through the cap;
//   - the norms' hook_scale: the derivative with respect to the divisor itself (the direct use
//     x / scale), and hook_normalized (weight and bias applied, as the cache holds it);
//   - mlp.hook_pre (the gate's, gated), hook_pre_linear (gated), hook_post; logits.
// Keys the metric does not depend on (those after the hook a dot product reads, the other
// branch of a parallel block, v for a metric on the pattern, ...) have no gradient: has() is
// false and get() refuses them. A key that depends on the metric only at some positions (a metric
// at position p: later positions) is kept, with zeros there.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/cache.h"
#include "core/model/metric.h"
#include "core/tensor/tensor.h"

namespace hs {

struct GradOptions {
  // The hooks whose gradients are kept (at every layer); empty: every key. The pass computes what
  // it must to reach the earliest of them either way; this saves the copies of the others (AtP of
  // the residual stream needs only its three hooks).
  std::vector<HookPoint> keep;
  int threads = 0;  // 0: the forward pass's choice for this many tokens (auto_threads)
};

class GradientCache {
 public:
  GradientCache(std::shared_ptr<const Weights> weights, std::vector<int32_t> tokens, Metric metric);

  const ModelConfig& config() const { return weights_->config(); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int n_pos() const { return static_cast<int>(tokens_.size()); }
  const Metric& metric() const { return metric_; }
  double metric_value = 0.0;  // the metric on the run differentiated

  // Whether the metric depends on this key (and it was kept).
  bool has(HookPoint hook, int l) const;
  bool has(std::string_view key) const;
  // The keys that have a gradient, in the cache's order (ActivationCache::keys()).
  std::vector<std::string> keys() const;
  // The gradient as a tensor of the key's shape (ActivationCache::get's). Throws hs::Error for a
  // key the metric does not depend on, or that is not a key.
  Tensor get(std::string_view key) const;
  Tensor get(HookPoint hook, int l) const;
  // The gradient in place: [pos, row width] (hooks.h: hook_row_width), or [head * n_pos + query,
  // key] for attn.hook_pattern and hook_attn_scores. Throws as get() does. Cheap to read for
  // attribution patching: (a_clean - a_corrupt) . rows(hook, l), row by row.
  const RowMatrixXf& rows(HookPoint hook, int l) const;

  // For the backward pass: whether it keeps `hook`'s gradients, and storing one.
  bool keeps(HookPoint hook) const;
  void set(HookPoint hook, int l, RowMatrixXf grad);
  void set_keep(std::vector<HookPoint> keep) { keep_ = std::move(keep); }

 private:
  size_t slot(HookPoint hook, int l) const;
  std::shared_ptr<const Weights> weights_;
  std::vector<int32_t> tokens_;
  Metric metric_;
  std::vector<HookPoint> keep_;
  std::vector<RowMatrixXf> grads_;  // per (hook, layer + 1)
  std::vector<char> present_;
};

// The gradient of `metric` on the run `cache` was made by. The cache must be a full one (not
// logits-only) of a run without interventions, or with interventions at hook_embed only (what
// integrated gradients runs); throws hs::Error otherwise, or for a metric that does not fit
// (check_metric).
GradientCache backward(const ActivationCache& cache, const Metric& metric, const GradOptions& options = {});

// One layer's attention backward, for the pass and its tests. From the forward's rotated queries
// q [S, n_heads*d_head], keys k and values v [S, n_kv*d_head], and patterns [n_heads*S, S] (zeros
// above the diagonal), given d_z [S, n_heads*d_head] (nullptr: no gradient reaches z) and seeds
// of the pattern and score gradients ([n_heads*S, S] or nullptr), writes d_q, d_k, d_v (d_k and
// d_v summed over the query heads of each key/value head) and, when not null, the pattern's and
// the scores' gradients [n_heads*S, S] (scores: 0 where masked, including the keys before a
// sliding window's first). The scores are those of hook_attn_scores: after the scale and the
// soft-cap, so with a cap the gradient reaches q and k through the cap's derivative (from the
// scores recomputed as the forward pass computes them). Heads run in parallel, one key/value
// group per thread.
struct AttentionBackward {
  const RowMatrixXf* d_z = nullptr;
  const RowMatrixXf* pattern_seed = nullptr;
  const RowMatrixXf* scores_seed = nullptr;
  RowMatrixXf* d_pattern = nullptr;
  RowMatrixXf* d_scores = nullptr;
  int window = 0;         // the layer's sliding window (attention_window; 0: every earlier key)
  float softcap = 0.0f;   // the attention soft-cap (Architecture::attn_softcap; 0: none)
};
void attention_backward(RowMatrixXf& d_q, RowMatrixXf& d_k, RowMatrixXf& d_v, const RowMatrixXf& q,
                        const RowMatrixXf& k, const RowMatrixXf& v, const RowMatrixXf& pattern, const ModelConfig& c,
                        float scale, const AttentionBackward& io);

}  // namespace hs
