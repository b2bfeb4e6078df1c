// Pruning an attribution graph (graph_prune.h).
#include "core/analysis/graph_prune.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "core/error.h"

namespace hs {

double find_threshold(const std::vector<double>& sorted, double fraction, size_t n_zeros) {
  const size_t n = sorted.size() + n_zeros;
  if (n == 0) return 0.0;
  double total = 0.0;
  for (double s : sorted) total += s;
  // searchsorted(cumulative / total, fraction): the first index whose cumulative share reaches it.
  double cum = 0.0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    cum += sorted[i];
    if (cum / total >= fraction) return sorted[i];
  }
  // Only the zeros are left (the share never reached it among the positive scores): the index
  // lands in them, or past the end, which circuit-tracer clamps to the last score.
  return n_zeros > 0 ? 0.0 : sorted.back();
}

namespace {

// The reciprocal of each row's sum of |A|, clamped as normalize_matrix clamps, over the columns
// of alive nodes only (rows of dead nodes: 0).
std::vector<double> inverse_row_sums(const RowMatrixXf& A, const std::vector<char>& alive) {
  const Eigen::Index N = A.rows();
  std::vector<double> inv(static_cast<size_t>(N), 0.0);
  for (Eigen::Index i = 0; i < N; ++i) {
    if (!alive[static_cast<size_t>(i)]) continue;
    double s = 0.0;
    for (Eigen::Index j = 0; j < N; ++j)
      if (alive[static_cast<size_t>(j)]) s += std::abs(double{A(i, j)});
    inv[static_cast<size_t>(i)] = 1.0 / std::max(s, 1e-10);
  }
  return inv;
}

}  // namespace

GraphPruner::GraphPruner(const AttributionGraph& graph) : g_(graph) {
  const int N = g_.n_nodes();
  if (g_.adjacency.rows() != N || g_.adjacency.cols() != N) throw Error("the graph's adjacency does not match its nodes.");
  logit_weights_.assign(static_cast<size_t>(N), 0.0);
  for (int i = 0; i < g_.n_logits(); ++i) logit_weights_[static_cast<size_t>(g_.logit_node(i))] = g_.logit_probs[static_cast<size_t>(i)];
  const std::vector<char> all(static_cast<size_t>(N), 1);
  influence_ = influence(all, inverse_row_sums(g_.adjacency, all));
  // cumulative_scores: sort descending, cumulative sum over the total, back in node order.
  std::vector<int> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return influence_[static_cast<size_t>(a)] > influence_[static_cast<size_t>(b)]; });
  double total = 0.0;
  for (double v : influence_) total += v;
  cumulative_.assign(static_cast<size_t>(N), 0.0);
  sorted_influence_.clear();
  double cum = 0.0;
  for (int i : order) {
    cum += influence_[static_cast<size_t>(i)];
    cumulative_[static_cast<size_t>(i)] = total > 0.0 ? cum / total : 0.0;
    sorted_influence_.push_back(influence_[static_cast<size_t>(i)]);
  }
}

std::vector<double> GraphPruner::influence(const std::vector<char>& alive, const std::vector<double>& inv_row_sum) const {
  const int N = g_.n_nodes();
  const RowMatrixXf& A = g_.adjacency;
  std::vector<double> current(static_cast<size_t>(N), 0.0), next(static_cast<size_t>(N)), total(static_cast<size_t>(N), 0.0);
  // current = w A_n, then current A_n, ... while anything is left.
  std::vector<double> weight = logit_weights_;
  for (int it = 0;; ++it) {
    if (it > 1000) throw Error("the graph's influence did not converge: its adjacency has a cycle.");
    std::fill(next.begin(), next.end(), 0.0);
    bool any = false;
    for (int i = 0; i < N; ++i) {
      const double w = weight[static_cast<size_t>(i)] * inv_row_sum[static_cast<size_t>(i)];
      if (w == 0.0 || !alive[static_cast<size_t>(i)]) continue;
      const float* row = A.row(i).data();
      for (int j = 0; j < N; ++j)
        if (alive[static_cast<size_t>(j)]) next[static_cast<size_t>(j)] += w * std::abs(double{row[j]});
    }
    for (int j = 0; j < N; ++j) {
      total[static_cast<size_t>(j)] += next[static_cast<size_t>(j)];
      any = any || next[static_cast<size_t>(j)] != 0.0;
    }
    if (!any) break;
    weight.swap(next);
  }
  return total;
}

PrunedGraph GraphPruner::prune(double node_threshold, double edge_threshold) {
  if (!(node_threshold >= 0.0 && node_threshold <= 1.0) || !(edge_threshold >= 0.0 && edge_threshold <= 1.0))
    throw Error("the node and edge thresholds are shares of the total influence, between 0 and 1.");
  const int N = g_.n_nodes(), n_keep_always = g_.n_pos + g_.n_logits(), n_feat = g_.n_features();
  PrunedGraph out;
  out.node_threshold = node_threshold;
  out.edge_threshold = edge_threshold;
  out.node_influence = influence_;
  out.cumulative_scores = cumulative_;
  const double node_cut = find_threshold(sorted_influence_, node_threshold);
  std::vector<char> mask(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) mask[static_cast<size_t>(i)] = influence_[static_cast<size_t>(i)] >= node_cut;
  for (int i = N - n_keep_always; i < N; ++i) mask[static_cast<size_t>(i)] = 1;

  // The edge scores on the pruned matrix, once per node mask: score(i, j) = |A(i, j)| x row_factor_[i]
  // (computed again where needed, the same double each time, instead of kept as [nodes, nodes]
  // doubles), and the positive ones sorted for the threshold.
  if (scores_for_ != node_threshold || scored_nodes_ != mask) {
    const std::vector<double> inv = inverse_row_sums(g_.adjacency, mask);
    std::vector<double> infl = influence(mask, inv);
    row_factor_.assign(static_cast<size_t>(N), 0.0);
    sorted_scores_.clear();
    for (int i = 0; i < N; ++i) {
      if (!mask[static_cast<size_t>(i)]) continue;
      const double f = inv[static_cast<size_t>(i)] * (infl[static_cast<size_t>(i)] + logit_weights_[static_cast<size_t>(i)]);
      row_factor_[static_cast<size_t>(i)] = f;
      for (int j = 0; j < N; ++j) {
        if (!mask[static_cast<size_t>(j)]) continue;
        const double s = std::abs(double{g_.adjacency(i, j)}) * f;
        if (s > 0.0) sorted_scores_.push_back(s);
      }
    }
    std::sort(sorted_scores_.begin(), sorted_scores_.end(), std::greater<>());
    zero_scores_ = static_cast<size_t>(N) * static_cast<size_t>(N) - sorted_scores_.size();
    scores_for_ = node_threshold;
    scored_nodes_ = mask;
  }
  const double edge_cut = find_threshold(sorted_scores_, edge_threshold, zero_scores_);
  const std::vector<char>& scored = scored_nodes_;
  auto edge = [&](int i, int j) {
    if (!scored[static_cast<size_t>(i)] || !scored[static_cast<size_t>(j)]) return 0.0 >= edge_cut;
    return std::abs(double{g_.adjacency(i, j)}) * row_factor_[static_cast<size_t>(i)] >= edge_cut;
  };
  // Rows and columns of the nodes dropped so far lose their edges (after the first round, as in
  // prune_graph: the first reads the mask of the scores as they are).
  std::vector<char> row_alive(static_cast<size_t>(N), 1), col_alive(static_cast<size_t>(N), 1);
  auto keep = [&](int i, int j) { return row_alive[static_cast<size_t>(i)] && col_alive[static_cast<size_t>(j)] && edge(i, j); };
  auto prune_round = [&] {
    // Feature and error nodes need a kept outgoing edge (a kept column entry); features an incoming one.
    for (int j = 0; j < N - n_keep_always; ++j) {
      if (!mask[static_cast<size_t>(j)]) continue;
      bool out_edge = false;
      for (int i = 0; i < N && !out_edge; ++i) out_edge = keep(i, j);
      if (!out_edge) mask[static_cast<size_t>(j)] = 0;
    }
    for (int i = 0; i < n_feat; ++i) {
      if (!mask[static_cast<size_t>(i)]) continue;
      bool in_edge = false;
      for (int j = 0; j < N && !in_edge; ++j) in_edge = keep(i, j);
      if (!in_edge) mask[static_cast<size_t>(i)] = 0;
    }
  };
  std::vector<char> old = mask;
  prune_round();
  while (mask != old) {
    old = mask;
    for (int i = 0; i < N; ++i) row_alive[static_cast<size_t>(i)] = col_alive[static_cast<size_t>(i)] = mask[static_cast<size_t>(i)];
    prune_round();
  }
  // The final edge mask had its dead rows and columns cleared in the last round that changed the
  // mask; a round that changed nothing leaves it as it was.
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j)
      if (keep(i, j)) out.edges.emplace_back(i, j);
  out.node_mask = std::move(mask);
  return out;
}

PrunedGraph prune_graph(const AttributionGraph& graph, double node_threshold, double edge_threshold) {
  GraphPruner pruner(graph);
  return pruner.prune(node_threshold, edge_threshold);
}

}  // namespace hs
