// Information-flow routes (issue 26 item 3b) as Meta's LM Transparency Tool (LM-TT) computes them:
// how much each attention edge (head, key position) and each MLP contributes to each residual
// stream, shares under a threshold dropped, and the routes back from one position's final residual.
//
// The source read: facebookresearch/llm-transparency-tool, llm_transparency_tool/routes/
// contributions.py (get_contributions, get_attention_contributions, get_mlp_contributions,
// apply_threshold_and_renormalize), routes/graph.py (GraphBuilder, build_full_graph,
// build_paths_to_predictions), models/tlens_model.py (decomposed_attn) and server/app.py (the
// defaults: threshold 0.04, "Renormalize after threshold" on). docs/graph.md says what is computed,
// and the decisions for architectures LM-TT does not run (parallel blocks, Gemma's post-norms).
// The float64 reference is tools/reference/routesref.py.
#pragma once

#include <string>
#include <vector>

#include "core/model/cache.h"

namespace hs {

// A residual-stream state or an MLP, at one position (LM-TT's node names in comments).
enum class RouteNodeKind {
  Embedding,  // X0_{pos}: blocks.0.hook_resid_pre, the stream before the first layer (layer 0)
  AfterAttn,  // A{layer}_{pos}: blocks.{layer}.hook_resid_mid
  Mlp,        // M{layer}_{pos}: the MLP block, blocks.{layer}.hook_mlp_out
  AfterMlp,   // I{layer}_{pos}: blocks.{layer}.hook_resid_post
};

struct RouteNode {
  int layer = 0;
  int pos = 0;
  RouteNodeKind kind = RouteNodeKind::Embedding;
};

enum class RouteEdgeKind {
  Attention,  // head `head` of `layer` moving key position from.pos into query position to.pos
  Residual,   // the stream carried past a block: X0/I{l-1} -> A{l}, or A{l} -> I{l}
  Mlp,        // into the MLP (A{l} -> M{l}; I{l-1} -> M{l} with parallel blocks) and out (M{l} -> I{l})
};

struct RouteEdge {
  int from = 0;  // node index (InfoRoutes::node_index)
  int to = 0;
  // The share after the threshold and the renormalisation: the kept shares into one residual
  // state (an A or I node) sum to 1. An MLP's two edges both carry the MLP's share, as in LM-TT.
  float weight = 0.0f;
  RouteEdgeKind kind = RouteEdgeKind::Residual;
  int layer = 0;
  int head = -1;  // Attention only
};

struct RouteOptions {
  // Shares at or under it are dropped before renormalising (apply_threshold_and_renormalize's
  // strict `>`); LM-TT's slider offers 0.01..0.1 and starts at 0.04. Must be in (0, 1).
  double threshold = 0.04;
  // The routes start at I{L-1}_{position}; -1: the last position.
  int position = -1;
  int threads = 0;  // 0: all cores
};

// The contribution graph of one run with its threshold applied, and the routes.
//
// Nodes are in a fixed order: X0_0..X0_{n-1}, then per layer l the A, M and I nodes of every
// position (node_index). Edges hold only weights > 0 (LM-TT adds zero-weight edges too, which its
// routes then skip), grouped by layer and target: the edges into A{l}_q (attention per head and
// key position ascending, then the residual), then M{l}_q's and I{l}_q's.
//
// LM-TT's own graph is a networkx DiGraph, one edge per node pair: it sums the heads of an
// attention edge, and adds the residual I{l-1}_q -> A{l}_q onto the self-attention edge k = q. Sum
// the edges with the same (from, to) to get its weights; per head is kept here for the Graph view.
struct InfoRoutes {
  int n_layers = 0;
  int n_pos = 0;
  int n_heads = 0;
  double threshold = 0.04;
  int position = 0;  // where the routes start: I{n_layers-1}_{position}
  std::vector<RouteNode> nodes;
  std::vector<RouteEdge> edges;
  // The routes (build_paths_to_predictions): indices into `edges`, ascending, of every edge that
  // reaches the start node backwards through edges of weight > 0.
  std::vector<int> route_edges;

  int node_index(RouteNodeKind kind, int layer, int pos) const;
  // LM-TT's name of a node: "X0_3", "A1_3", "M1_3", "I1_3".
  std::string node_name(int index) const;
  int start_node() const { return node_index(RouteNodeKind::AfterMlp, n_layers - 1, position); }
};

// The graph and the routes of a plain run (hs::Session's cache). Throws hs::Error for a threshold
// outside (0, 1), a position outside the prompt, an empty prompt, or a cache without layers.
// Memory: one layer's raw shares at a time ([query_pos, key_pos, head] doubles, lower triangle)
// and one head's [pos, d_model] value products; never [layer, head, query, key, d_model].
InfoRoutes info_routes(const ActivationCache& cache, const RouteOptions& options = {});

// Layer l's shares before the threshold (get_attention_contributions, get_mlp_contributions): what
// info_routes thresholds. Exposed for the tests and for a view that shows the raw shares.
struct LayerShares {
  int n_pos = 0, n_heads = 0;
  // [query_pos, key_pos <= query_pos, head], lower triangle row by row: row q starts at
  // attn_offset(q) and holds (q + 1) * n_heads values, key-major.
  std::vector<double> attn;
  // The share LM-TT gives each (head, later key) of query q: their vectors are zero, so each gets
  // the floor max(1e-5, ||resid_mid||_1 - ||1e-6 - resid_mid||_1) over the sum. [query_pos]
  std::vector<double> attn_later_key;
  std::vector<double> attn_resid;  // resid_pre's share of resid_mid [query_pos]
  std::vector<double> mlp;         // mlp_out's share of resid_post [pos]
  std::vector<double> mlp_resid;   // resid_mid's share of resid_post [pos]
  size_t attn_offset(int q) const { return static_cast<size_t>(q) * static_cast<size_t>(q + 1) / 2 * static_cast<size_t>(n_heads); }
  double attn_at(int q, int k, int h) const { return attn[attn_offset(q) + static_cast<size_t>(k) * n_heads + h]; }
};
LayerShares layer_shares(const ActivationCache& cache, int l, int threads = 0);

}  // namespace hs
