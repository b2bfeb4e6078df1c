// Pruning an attribution graph by influence, as circuit-tracer's prune_graph does
// (circuit_tracer/graph.py: normalize_matrix, compute_influence, compute_node_influence,
// compute_edge_influence, find_threshold, prune_graph):
//   - A_n = |A| with each row divided by its sum (clamped at 1e-10);
//   - influence = w A_n + w A_n^2 + ... (the graph is acyclic, so the series ends), w the logit
//     nodes' probabilities;
//   - nodes whose influence reaches the threshold that keeps `node_threshold` of the total are kept,
//     and every token and logit;
//   - on the matrix of the kept nodes, edge scores = A'_n[i, j] x (influence'_i + w_i), and the edges
//     whose score reaches the threshold that keeps `edge_threshold` of their total are kept;
//   - then, until nothing changes, features and errors without a kept outgoing edge, and features
//     without a kept incoming edge, are dropped with their edges.
// Influences, scores and the cumulative sums that place the thresholds are in double: a float32 sum
// over millions of edge scores is not exact enough to place them.
//
// The thresholds are meant to be moved live: GraphPruner computes the node influence once, the edge
// scores once per node threshold, and an edge threshold alone costs a binary search and the mask.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/analysis/attribution_graph.h"

namespace hs {

struct PrunedGraph {
  double node_threshold = 0.8, edge_threshold = 0.98;
  std::vector<char> node_mask;            // [n_nodes]
  std::vector<std::pair<int, int>> edges;  // the kept (target, source) pairs, row by row
  // circuit-tracer's cumulative_scores: for each node, the share of the total influence held by
  // the nodes at least as influential (what its JSON writes as a node's "influence").
  std::vector<double> cumulative_scores;
  std::vector<double> node_influence;     // compute_node_influence
  bool kept(int node) const { return node_mask[static_cast<size_t>(node)] != 0; }
};

// find_threshold: the score at which the scores sorted from the largest first reach `fraction` of
// their sum (searchsorted of the cumulative share; the last score when none does). `sorted` is
// descending; zeros may be left out of it (n_zeros counts them): they add nothing to the sum.
double find_threshold(const std::vector<double>& sorted, double fraction, size_t n_zeros = 0);

class GraphPruner {
 public:
  explicit GraphPruner(const AttributionGraph& graph);
  PrunedGraph prune(double node_threshold, double edge_threshold);
  const std::vector<double>& node_influence() const { return influence_; }

 private:
  // w A_n + w A_n^2 + ... for the matrix A with rows/columns of `alive` nodes only.
  std::vector<double> influence(const std::vector<char>& alive, const std::vector<double>& inv_row_sum) const;
  const AttributionGraph& g_;
  std::vector<double> logit_weights_;
  std::vector<double> influence_;
  std::vector<double> cumulative_;
  std::vector<double> sorted_influence_;
  // The edge scores of the last node threshold, and their positive values sorted descending.
  double scores_for_ = -1.0;
  std::vector<char> scored_nodes_;
  std::vector<double> row_factor_;  // [n_nodes] a scored row's 1/sum x (influence + logit weight)
  std::vector<double> sorted_scores_;
  size_t zero_scores_ = 0;
};

// prune_graph with one threshold pair.
PrunedGraph prune_graph(const AttributionGraph& graph, double node_threshold = 0.8, double edge_threshold = 0.98);

}  // namespace hs
