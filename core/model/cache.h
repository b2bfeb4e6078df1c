// The activation cache: every intermediate activation of one forward pass, with TransformerLens
// names (see DESIGN.md, "The activation cache"). There is no batch dimension.
//
// Storage is typed (one struct per layer) so analyses read matrices directly. What is stored is
// what cannot be recomputed cheaply; everything else in the contract is derived on request, with
// the same operations in the same order, so get() returns identical values either way (hooks.h's
// table says which is which; a run that edits a derived key stores it, intervention.h):
//   blocks.{l}.hook_resid_mid        = resid_pre + attn_out
//   blocks.{l}.hook_resid_post       = resid_mid + mlp_out
//   blocks.{l}.mlp.hook_pre          = ln2(resid_mid) @ W_in + b_in (a gated MLP: the gate's W_gate)
//   blocks.{l}.mlp.hook_pre_linear   = ln2(resid_mid) @ W_in + b_in (gated MLPs: the up projection)
//   blocks.{l}.mlp.hook_post         = act(mlp_pre), or act(mlp_pre) * mlp_pre_linear when gated
//   blocks.{l}.ln1.hook_scale, ln1.hook_normalized (RMSNorm models) = the norm of resid_pre,
//   blocks.{l}.ln2.* likewise of resid_mid, with the forward pass's kernel
//   blocks.{l}.attn.hook_result      [pos, head, d_model] = z_h @ W_O[h]
//   blocks.{l}.attn.hook_attn_scores [head, query_pos, key_pos] = q.k * scale, masked -inf
// Attention patterns are causal, so only their lower triangle is kept (row i holds keys 0..i):
// at long context the patterns are most of the cache.
//
// Activations indexed by position are stored in blocks of positions (position_rows.h) that a run
// extending an earlier prompt shares with the earlier run's cache, so a typed key costs only its
// new positions. Read a row at a time (row(i)), or copy out a matrix (to_matrix()).
//
// The layout follows the architecture: k and v hold n_key_value_heads heads (query head h reads
// key/value head config().kv_head(h)), and hook_pos_embed exists only with learned positions.
// With rotary positions q and k hold the rotated values attention reads (hook_rot_q, hook_rot_k);
// the projections before rotation (hook_q, hook_k) are derived on request from resid_pre.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/model/hooks.h"
#include "core/model/intervention.h"
#include "core/model/position_rows.h"
#include "core/model/weights.h"
#include "core/tensor/eigen.h"
#include "core/tensor/tensor.h"

namespace hs {

struct LayerActivations {
  PositionRows resid_pre;     // [pos, d_model]
  PositionRows q;             // [pos, n_heads*d_head]  (= [pos, head, d_head]); rotated with rotary
  PositionRows k;             // [pos, n_kv*d_head]     (= [pos, kv_head, d_head]); rotated with rotary
  // Before rotation, only when stored (the forward pass derives them on request; the tests'
  // reference forward stores its own): [pos, n_heads*d_head], [pos, n_kv*d_head].
  PositionRows q_pre_rotary;
  PositionRows k_pre_rotary;
  PositionRows v;             // [pos, n_kv*d_head]
  std::vector<float> scores_hqk;   // [head, query_pos, key_pos] only when stored; masked = -inf
  PatternRows pattern;        // the patterns' lower triangles: row q of head h holds keys 0..q
  PositionRows z;             // [pos, n_heads*d_head]
  std::vector<float> result_phd;   // [pos, head, d_model] only when stored
  PositionRows attn_out;      // [pos, d_model]  concat(z) @ W_O + b_O
  // The MLP's pre-activations, only when stored (the forward pass derives them on request; the
  // tests' reference forward stores its own): [pos, d_mlp], the gate's for a gated MLP, and its
  // up projection.
  PositionRows mlp_pre;
  PositionRows mlp_pre_linear;
  PositionRows mlp_out;       // [pos, d_model]
  // Keys a plain run derives, stored only by a run that edits them (an edit breaks the
  // derivation from the stored keys): [pos, d_model], [pos, d_mlp], [pos, d_model].
  PositionRows resid_mid;
  PositionRows mlp_post;
  PositionRows resid_post;
};

class ActivationCache {
 public:
  ActivationCache(std::shared_ptr<const Weights> weights, std::vector<int32_t> tokens);

  const std::shared_ptr<const Weights>& weights() const { return weights_; }
  const ModelConfig& config() const { return weights_->config(); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int n_pos() const { return static_cast<int>(tokens_.size()); }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  // Whether the model adds a learned position embedding (and the cache has hook_pos_embed).
  bool has_pos_embed() const { return config().architecture.positions == PositionKind::LearnedAbsolute; }
  // Whether queries and keys are rotated (hook_rot_q, hook_rot_k).
  bool has_rotary() const { return config().architecture.positions == PositionKind::Rotary; }
  // Whether the norms' scales are keys (RMSNorm: ln1/ln2/ln_final.hook_scale, ln1/ln2.hook_normalized).
  bool has_norm_scales() const { return config().architecture.norm == NormKind::RMSNorm; }
  bool has_gated_mlp() const { return config().architecture.mlp == MlpKind::Gated; }

  // Every key of the contract, in a fixed order (layer by layer, as the forward pass runs): the
  // rows of hooks.h's table that this model has.
  std::vector<std::string> keys() const;
  bool has(std::string_view key) const;
  // The activation by contract name; derived keys are computed here. Throws hs::Error for an
  // unknown key (the message lists the key families).
  Tensor get(std::string_view key) const;
  Tensor get(HookPoint hook, int l) const;
  // A per-position hook's values [pos, row width] (hooks.h: hook_row_width), stored or derived,
  // as get() has them; l is ignored for model-wide hooks. Not for attn.hook_pattern and
  // attn.hook_attn_scores (indexed by head first).
  RowMatrixXf rows(HookPoint hook, int l) const;
  // The stored rows of a hook (nullptr when it is derived, or stored otherwise than by position).
  const PositionRows* stored_rows(HookPoint hook, int l) const;

  // Typed access for analyses.
  const LayerActivations& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  LayerActivations& layer(int l) { return layers_[static_cast<size_t>(l)]; }
  PositionRows embed;                // [pos, d_model]
  PositionRows pos_embed;            // [pos, d_model]; empty without learned positions
  PositionRows ln_final_normalized;  // [pos, d_model]
  VectorXf ln_final_scale;          // [pos]  what the final norm divided by (sqrt(var + eps)), for DLA
  PositionRows logits;               // [pos, d_vocab]

  // Derived on request (also used by get()).
  // One head's result z_h @ W_O[h] at every position: [pos, d_model]. With a post-attention norm
  // (Gemma) this is before it; head_contribution is what the head adds to the stream.
  RowMatrixXf head_result(int l, int h) const;
  // What head h adds to the residual stream: its result, through the post-attention norm with
  // the norm's scale frozen at this run's value (result_h * w / scale(pos)), so that the heads'
  // contributions (and the bias's) sum to hook_attn_out. Without the norm, head_result.
  RowMatrixXf head_contribution(int l, int h) const;
  // Whether layer l's attention output (which 1) or MLP output (2) passes a norm before it joins
  // the stream (Architecture::post_attn_norm, post_mlp_norm).
  bool has_post_norm(int which) const;
  // That norm's input, [pos, d_model]: z @ W_O + b_O (which 1) or mlp_post @ W_out + b_out (2),
  // with the forward pass's kernels.
  RowMatrixXf post_norm_input(int l, int which) const;
  // Its scale per position, sqrt(mean(input^2) + eps) [pos], and `rows` through the norm with
  // that scale frozen: rows.row(p) * w / scale(p) (a linear map of rows, for decompositions).
  VectorXf post_norm_scale(int l, int which) const;
  void apply_frozen_post_norm(int l, int which, RowMatrixXf& rows) const;
  // With a q/k norm (Gemma 3, Qwen3): the queries (keys) after it, before the rotation,
  // [pos, n_heads*d_head] ([pos, n_kv*d_head]), and the scales [pos, heads] when not null.
  RowMatrixXf qk_normalized(int l, bool keys, RowMatrixXf* scales) const;
  // The logits before the final soft-cap (Gemma 2), where direct logit attribution is exact;
  // without a cap, the logits. One position.
  RowVectorXf logits_before_softcap(int pos) const;
  // One token's logit before the cap: ln_final's row dotted with the token's unembedding row,
  // summed in double, without the whole vocabulary's product (on Gemma 2, 256000 x 2304 for one
  // number); it agrees with logits_before_softcap(pos)(token) to float rounding.
  float logit_before_softcap(int pos, int32_t token) const;
  // One head's scaled scores [query_pos, key_pos] (masked -inf).
  RowMatrixXf head_scores(int l, int h) const;
  // One head's pattern as a matrix [query_pos, key_pos] (zeros above the diagonal).
  RowMatrixXf head_pattern(int l, int h) const;
  // One row of it: the attention of query `q` over keys 0..q.
  ConstRowVectorRef pattern_row(int l, int h, int q) const;
  // Derived per-layer activations (see the file comment).
  RowMatrixXf resid_mid(int l) const;   // [pos, d_model]
  RowMatrixXf resid_post(int l) const;  // [pos, d_model]
  // With rotary positions, the queries (keys: the keys) before rotation: [pos, n_heads*d_head]
  // ([pos, n_kv*d_head]).
  RowMatrixXf pre_rotary(int l, bool keys) const;
  RowMatrixXf mlp_pre(int l) const;         // [pos, d_mlp]
  RowMatrixXf mlp_pre_linear(int l) const;  // [pos, d_mlp], gated MLPs
  RowMatrixXf mlp_post(int l) const;        // [pos, d_mlp]
  // A block's norm (1: before attention, 2: before the MLP) of its input, weight applied, and its
  // scale per position: [pos, d_model] and [pos].
  RowMatrixXf block_norm(int l, int which, VectorXf* scale) const;
  // The residual stream after the last layer, at one position.
  RowVectorXf final_residual(int pos) const;
  // How many tokens at the start were reused from an earlier run instead of recomputed.
  int reused_prefix = 0;
  // The ablations and patches this run was made with (RunOptions::interventions); empty for a
  // plain run. The stored activations are the edited ones.
  Interventions interventions;
  // Whether every logit is a finite number (set by the forward pass; a run that reuses a prefix
  // checks only its new rows and carries the prefix's answer over).
  bool logits_finite = true;
  // The attention scale applied to q.k for layer l (1/sqrt(d_head), and 1/(l+1) when configured;
  // Architecture::attn_scale when the model gives one).
  float attention_scale(int l) const;
  // Layer l's scores for query q from the raw q.k products of keys 0..q (`row`, q + 1 floats,
  // in place): times the scale, soft-capped when the model caps, and -inf before the window's
  // first key. The forward pass's operations, for the derivations and the analyses that rebuild
  // scores (patching, attribution).
  void finish_scores(int l, int q, float* row) const;

  // Bytes held by the stored activations.
  size_t stored_bytes() const;
  std::vector<LayerActivations>& layers() { return layers_; }

 private:
  std::shared_ptr<const Weights> weights_;
  std::vector<int32_t> tokens_;
  std::vector<LayerActivations> layers_;
};

}  // namespace hs
