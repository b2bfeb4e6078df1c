// Attribution graphs (issue 26): the direct linear effects between transcoder features, error
// nodes, token embeddings and the top next-token logits of one prompt, computed as circuit-tracer
// computes them (safety-research/circuit-tracer, circuit_tracer/attribution.py, _run_attribution
// and AttributionContext; replacement_model.py, _configure_gradient_flow and setup_attribution).
//
// The local replacement model. The real run is taken once; then every attention pattern and every
// norm's scale (ln1, ln2, the post-attention and post-MLP norms, ln_final) is frozen at the run's
// value, and each MLP's output is a constant for gradients (its transcoder's features and an error
// node stand in for it; only a skip transcoder's linear W_skip x carries a gradient through). What
// is left is linear in the residual stream, and reproduces the real run exactly.
//
// Nodes, in circuit-tracer's order (Graph's docstring, graph.py):
//   features  every active transcoder latent (layer, pos, latent), sorted by layer, then position,
//             then latent (torch's coalesced sparse order);
//   errors    one per (layer, pos), layer-major: the real hook_mlp_out minus the transcoder's output;
//   tokens    one per position: the token's embedding as the residual stream receives it;
//   logits    the last position's most probable tokens until their probabilities sum to 0.95, at
//             most 10 (compute_salient_logits).
// The features and error vectors at position 0 are zeroed, as circuit-tracer's main branch always
// does (its ensure_tokenized puts a special token first; the June 2025 release did so only when the
// first token was special): no feature node there, and its error nodes carry 0. What position 0's
// MLP wrote is then a constant, as biases are.
//
// An edge A[target, source] (rows targets, columns sources) is the source's vector (a feature's
// activation times its decoder row, an error vector, a token embedding) dotted with the gradient,
// at the source's output point, of the target's input through the frozen model: a feature's
// encoder pre-activation (its encoder column injected at its transcoder's input hook), a logit's
// demeaned logit (the unembedding column minus the mean column, injected after ln_final). Each
// target's row is one backward pass; the passes are batched (circuit-tracer's compute_batch), each
// batch cut to the positions and layers its targets can reach.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

struct Sae;

struct GraphOptions {
  int max_logits = 10;             // circuit-tracer's max_n_logits
  double logit_probability = 0.95; // desired_logit_prob
  int batch = 64;                  // targets per backward pass
  // Rows computed for at most this many features, chosen by their influence on the logits as
  // circuit-tracer's max_feature_nodes does (the partial influences of the rows so far, updated
  // every update_interval batches); 0: every active feature; < 0: the graph kind's default
  // (transcoders: kTranscoderGraphMaxNodes; neurons: kNeuronGraphMaxNodes).
  int max_feature_nodes = -1;
  int update_interval = 4;
  int threads = 0;                 // 0: every core
  // For a long graph in an app: the share of the rows computed so far, and whether to stop (the
  // graph then throws hs::Cancelled). Both are called on the calling thread only, between batches.
  std::function<void(double fraction)> progress;
  std::function<bool()> cancelled;
};

// Transcoder graphs' default max_feature_nodes: circuit-tracer's command line's
// (circuit_tracer/__main__.py, `attribute --max_feature_nodes`, default 7500). A prompt with fewer
// active features gives every one of them a row. With more, the rows are chosen by influence and
// kept over the columns they can reach only (a layer's sources are the layers below, attention is
// causal) until the graph is assembled; the adjacency is then [chosen + errors + tokens + logits]
// squared. That is what keeps a long prompt's graph in memory: every feature a row would be the
// active features squared.
inline constexpr int kTranscoderGraphMaxNodes = 7500;

// Neuron graphs' default max_feature_nodes. At 32 tokens the built-in model has tens of thousands
// of active neurons, so a row is tens of thousands of columns, and every active neuron's row would
// take gigabytes. The most influential neurons' rows are computed instead; pruning keeps far fewer
// nodes than this.
inline constexpr int kNeuronGraphMaxNodes = 2048;

struct AttributionGraph {
  // What the feature nodes are. Transcoder latents come with error nodes; MLP neurons add up to
  // the MLP's output exactly, so a neuron graph has none (n_errors() is 0).
  enum class Unit : uint8_t { TranscoderFeature, Neuron };
  Unit unit = Unit::TranscoderFeature;
  std::vector<int32_t> tokens;
  int n_layers = 0;
  int n_pos = 0;
  int d_transcoder = 0;    // the widest transcoder (neurons: d_mlp)
  bool zero_first = true;  // position 0's features and error vectors were zeroed
  int max_feature_nodes = 0;  // the limit the rows were chosen under (0: none)

  // Every active feature (circuit-tracer's active_features and activation_values). For neurons,
  // `latent` is the neuron's index in the layer's d_mlp and `activation` its hook_post.
  struct Feature {
    int layer = 0, pos = 0, latent = 0;
    float activation = 0.0f;
  };
  std::vector<Feature> active;
  // The features that are nodes (all of them unless max_feature_nodes chose), indices into
  // `active`, ascending (circuit-tracer's selected_features).
  std::vector<int> selected;

  std::vector<int32_t> logit_tokens;
  std::vector<float> logit_probs;

  // [n_nodes, n_nodes], rows targets, columns sources, nodes ordered selected features, errors,
  // tokens, logits. Rows of errors and tokens are zero (they have no inputs), as are the columns
  // of logits.
  RowMatrixXf adjacency;
  // Each node's input in the real run: a feature's encoder pre-activation (a neuron's hook_pre), a logit's demeaned
  // logit (before a final soft-cap); 0 for errors and tokens. The row sum of adjacency plus the
  // bias terms (biases, position embeddings, position 0's MLP output) is this.
  std::vector<float> node_input;

  int n_features() const { return static_cast<int>(selected.size()); }
  int n_errors() const { return unit == Unit::Neuron ? 0 : n_layers * n_pos; }
  int n_logits() const { return static_cast<int>(logit_tokens.size()); }
  int n_nodes() const { return n_features() + n_errors() + n_pos + n_logits(); }
  // Only when n_errors() > 0.
  int error_node(int layer, int pos) const { return n_features() + layer * n_pos + pos; }
  int token_node(int pos) const { return n_features() + n_errors() + pos; }
  int logit_node(int i) const { return n_features() + n_errors() + n_pos + i; }
  enum class Kind : uint8_t { Feature, Error, Token, Logit };
  Kind kind(int node) const;
  // Neuronpedia's node id, as circuit-tracer's frontend/graph_models.py writes it: features
  // "{layer}_{latent}_{pos}", errors "{layer}_-1_{pos}" (its later releases: the older "0_{layer}_{pos}"
  // collides with layer-0 features), tokens "E_{token}_{pos}", logits "{n_layers + 1}_{token}_{pos}".
  std::string node_id(int node) const;
  // The node's layer and position (tokens: layer -1; logits: n_layers, the last position).
  int node_layer(int node) const;
  int node_pos(int node) const;
};

// The transcoders of `dirs`, one per layer of the model, in layer order. Each folder is a
// transcoder (a SAELens folder, a circuit-tracer set, a Gemma Scope folder), or a folder of such
// folders (a model's saes/), whose SAEs that are not transcoders are passed over. Throws hs::Error
// naming a layer with none or two, or a transcoder that does not fit the model.
std::vector<std::shared_ptr<const Sae>> load_graph_transcoders(const std::vector<std::filesystem::path>& dirs,
                                                               const ModelConfig& config);

// The graph of the run `cache` holds (a plain full run: no interventions, every activation) with
// one transcoder per layer, in layer order. Each must read blocks.L.ln2.hook_normalized or
// blocks.L.hook_resid_mid of its layer and write blocks.L.hook_mlp_out, without an activation
// normalisation or decoder-norm rescaling (circuit-tracer's transcoders have neither); throws
// hs::Error naming what does not fit.
AttributionGraph attribution_graph(const ActivationCache& cache, const std::vector<std::shared_ptr<const Sae>>& transcoders,
                                   const GraphOptions& options = {});

// The graph of the run with the MLPs' neurons as feature nodes (issue 26, item 3a), for any model:
// no transcoders and no error nodes, since the MLP's output is exactly the sum of its neurons'
// vectors and b_out. The frozen model is the transcoder graph's, with every MLP's output a
// constant for gradients and its node neurons standing in for it.
//   A neuron (layer, pos, index) is a node when pos >= 1 and is_neuron_node(hook_post, ...): its
//   activation is hook_post, its vector hook_post x W_out's row (through the post-MLP norm with
//   its scale frozen, Gemma), its input hook_pre (W_in's column at ln2's output; a gated MLP's
//   gate W_gate). The other neurons and position 0's are constants, as biases are.
// Position 0 is left out as in transcoder graphs (its MLP output is a constant). The rows are
// chosen by influence as max_feature_nodes says (default kNeuronGraphMaxNodes).
AttributionGraph neuron_attribution_graph(const ActivationCache& cache, const GraphOptions& options = {});

// Whether a neuron is a node. Plain MLPs: hook_post > 0 (GELU, ReLU, SiLU are positive exactly
// where hook_pre is). Gated MLPs (hook_post = act(gate) x up): the gate is open, act(gate) > 0,
// and hook_post != 0: hook_post and up have one sign. Such a neuron's hook_post is negative when
// up is, and it writes W_out's row negated; leaving it a constant would hide half of what an open
// gate passes, so the rule for gated MLPs is the open gate rather than a positive hook_post.
bool is_neuron_node(float hook_post, float up, bool gated);

}  // namespace hs
