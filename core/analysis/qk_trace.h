// Why a head attends (QK tracing, issue 26 item 4): one attention score split into pairwise terms
// between what the query's residual stream is made of and what the key's is made of.
//
// circuit-tracer (decoderesearch/circuit-tracer main, 2026-04) has no QK attribution yet (its
// issue #53 asks for it), so the definition is ours, the frozen residual decomposition:
//   The residual stream entering layer L at position p is a sum of components: the token embedding
//   (hook_embed), the position embedding (hook_pos_embed, learned positions only), and for every
//   earlier layer l < L each head's output z_h W_O[h] at p, the attention output bias b_O, and the
//   MLP's output in units: with transcoders, each active feature's activation x decoder row, the
//   skip path W_skip x (skip transcoders), the decoder bias b_dec and the error node (the real
//   hook_mlp_out minus the sum of those); without, each neuron's hook_post x its W_out row and
//   b_out. A component added through a post-norm (Gemma) is scaled by that norm's frozen scale.
//   With ln1's scale frozen at the run's value ln1 is linear (LayerNorm's centring is linear), as
//   are the q/k norms over d_head (Qwen3, Gemma 3) with their scales frozen, and rotary is a fixed
//   rotation per position. So q_rot = sum_i u_i + u_const and k_rot = sum_j v_j + v_const, and the
//   score before any soft-cap, s = scale * q_rot . k_rot, is exactly sum_{i,j} scale * u_i . v_j,
//   the constant rows and columns (ln1's bias through W_Q plus b_Q, likewise for keys) included.
// Soft-capping (Gemma 2) is applied after the score: the decomposition is of the score before the
// cap. Grouped-query attention: the key side is read by the query head's key/value head.
//
// Cost: everything is per position (the query's and the key's), never quadratic in positions.
// Each component is projected to d_head on its way in (the residual vectors are dropped), so
// memory is components x d_head floats; the top pairs are found without the full pair matrix (the
// pairs are visited by decreasing |u_i| |v_j|, a bound on |term|, and the search stops when the
// bound falls below the n-th best term).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/model/cache.h"

namespace hs {

struct Sae;

struct QkComponent {
  enum class Kind : uint8_t {
    Embed,     // the token embedding at pos
    PosEmbed,  // the learned position embedding at pos
    Head,      // head `index` of `layer`: z_h W_O[h] at pos
    AttnBias,  // b_O of `layer`
    Feature,   // transcoder latent `index` of `layer`, activation x decoder row
    Skip,      // a skip transcoder's W_skip x of `layer`
    Error,     // hook_mlp_out minus the transcoder's parts, of `layer`
    Neuron,    // neuron `index` of `layer`: hook_post x W_out row
    MlpBias,   // b_out (neurons) or the transcoder's b_dec (features) of `layer`
    Constant,  // ln1's bias through W_Q (W_K) plus b_Q (b_K) of the traced layer: no position
  };
  Kind kind = Kind::Embed;
  int layer = -1;  // -1 for the embeddings
  int index = -1;  // the head, latent or neuron; -1 otherwise
  int pos = -1;    // -1 for Constant
  float activation = 0.0f;  // a feature's activation, a neuron's hook_post; 0 for the others
  double marginal = 0.0;    // its row (column) sum of the term matrix: its share of the score
};

struct QkPair {
  int query = 0, key = 0;  // indices into QkTrace::query and QkTrace::key
  double term = 0.0;
};

struct QkTrace {
  int layer = 0, head = 0, kv_head = 0, query_pos = 0, key_pos = 0;
  bool transcoders = false;  // components are transcoder features (else MLP neurons)
  std::vector<int32_t> tokens;
  float softcap = 0.0f;      // Architecture::attn_softcap; 0 without
  float attention_scale = 0.0f;
  // hook_attn_scores[head, query_pos, key_pos] as the run has it (after a soft-cap).
  float score = 0.0f;
  // The run's score before the soft-cap: scale * q_rot . k_rot from the cache's rotated q and k,
  // summed in double. Without a cap it equals `score` to float rounding.
  double score_before_softcap = 0.0;
  // The sum of every term (scale * (sum u) . (sum v)), in double: score_before_softcap to rounding.
  double total = 0.0;
  std::vector<QkComponent> query, key;  // each side's components, in the order of the stream
  std::vector<QkPair> pairs;            // the top pairs by |term|, largest first
  // total - sum(pairs): the terms not in `pairs`, summed (to the float rounding of the projected
  // rows the listed terms are computed from), so that sum(pairs) + remainder is the total exactly.
  double remainder = 0.0;
  // How far each side's components, summed, are from the run's hook_resid_pre at its position
  // (max over d_model of the absolute difference): a check that nothing is missing.
  double query_resid_error = 0.0, key_resid_error = 0.0;
};

struct QkOptions {
  int top = 50;  // pairs listed; 0: every pair (n_query x n_key terms)
};

// The QK trace of head `head` of `layer` at (query_pos, key_pos) in the run `cache` holds (a plain
// full run: no interventions, every activation). `transcoders`: one per layer of the model (as
// load_graph_transcoders gives them) for features, or empty for MLP neurons. Each must read its
// layer and write its blocks.L.hook_mlp_out (or the MLP's output before a post-norm), without an
// output normalisation. Throws hs::Error naming what is wrong: a layer, head or position out of
// range, a key after the query, a key outside a sliding window, a run with edits or without its
// activations, a transcoder that does not fit.
QkTrace qk_trace(const ActivationCache& cache, int layer, int head, int query_pos, int key_pos,
                 const std::vector<std::shared_ptr<const Sae>>& transcoders, const QkOptions& options = {});

// A component's label for views and files: "emb 'the' @ 3" (token_text: each position's text; the
// token id when empty), "pos @ 3", "L1H3 @ 5", "b_O L1 @ 5", "F2:117 @ 4", "skip L2 @ 4",
// "err L2 @ 4", "N1:530 @ 3", "b_out L1 @ 3" ("b_dec L1 @ 3" with transcoders), "b_Q L2H3" /
// "b_K L2H1" (the constant: ln1's bias and the projection's).
std::string qk_component_label(const QkTrace& trace, const QkComponent& c, bool query_side,
                               std::span<const std::string> token_text = {});
// The kind's name in files: "embed", "pos_embed", "head", "attn_bias", "feature", "skip", "error",
// "neuron", "mlp_bias", "constant".
std::string_view to_string(QkComponent::Kind kind);

}  // namespace hs
