#include "core/analysis/info_routes.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace hs {
namespace {

// contributions.get_contributions: a part's share of a whole is max(||whole||_1 - ||part - whole||_1,
// kFloor) over the sum of these; torch's pairwise_distance adds its eps to the difference first.
constexpr double kFloor = 1e-5;
constexpr double kPairwiseEps = 1e-6;

// ||part - whole + eps||_1 in double, part = scale * row * factor (factor: the frozen post-norm's
// w / scale per column, or none).
double l1_distance(const float* row, double scale, const float* factor, const float* whole, int D) {
  double s = 0.0;
  if (factor) {
    for (int i = 0; i < D; ++i) s += std::abs(scale * row[i] * factor[i] - whole[i] + kPairwiseEps);
  } else {
    for (int i = 0; i < D; ++i) s += std::abs(scale * row[i] - whole[i] + kPairwiseEps);
  }
  return s;
}

double l1_norm(const float* whole, int D) {
  double s = 0.0;
  for (int i = 0; i < D; ++i) s += std::abs(static_cast<double>(whole[i]));
  return s;
}

double floored(double whole_norm, double distance) { return std::max(whole_norm - distance, kFloor); }

int thread_count(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

void check_cache(const ActivationCache& cache) {
  if (cache.n_pos() == 0) throw Error("the prompt is empty: routes need at least one token.");
  if (cache.n_layer() == 0) throw Error("this run kept only the logits; run again with the full cache.");
}

}  // namespace

int InfoRoutes::node_index(RouteNodeKind kind, int layer, int pos) const {
  if (kind == RouteNodeKind::Embedding) return pos;
  const int block = kind == RouteNodeKind::AfterAttn ? 0 : kind == RouteNodeKind::Mlp ? 1 : 2;
  return n_pos + (layer * 3 + block) * n_pos + pos;
}

std::string InfoRoutes::node_name(int index) const {
  const RouteNode& n = nodes.at(static_cast<size_t>(index));
  const char* letter = n.kind == RouteNodeKind::Embedding ? "X"
                       : n.kind == RouteNodeKind::AfterAttn ? "A"
                       : n.kind == RouteNodeKind::Mlp       ? "M"
                                                            : "I";
  return letter + std::to_string(n.layer) + "_" + std::to_string(n.pos);
}

LayerShares layer_shares(const ActivationCache& cache, int l, int threads) {
  check_cache(cache);
  if (l < 0 || l >= cache.n_layer())
    throw Error("layer " + std::to_string(l) + " is outside the model (0.." + std::to_string(cache.n_layer() - 1) + ").");
  const ModelConfig& c = cache.config();
  const int n = cache.n_pos(), H = c.n_heads, D = c.d_model, dh = c.d_head;
  const LayerActivations& act = cache.layer(l);
  const LayerWeights& w = cache.weights()->layer(l);
  LayerShares s;
  s.n_pos = n;
  s.n_heads = H;
  s.attn.assign(s.attn_offset(n), 0.0);
  s.attn_later_key.assign(static_cast<size_t>(n), 0.0);
  s.attn_resid.assign(static_cast<size_t>(n), 0.0);
  s.mlp.assign(static_cast<size_t>(n), 0.0);
  s.mlp_resid.assign(static_cast<size_t>(n), 0.0);

  const RowMatrixXf resid_mid = cache.resid_mid(l);    // [pos, d_model]: the whole of the attention step
  const RowMatrixXf resid_post = cache.resid_post(l);  // [pos, d_model]: the whole of the MLP step
  std::vector<double> mid_norm(static_cast<size_t>(n));  // [pos]  ||resid_mid||_1
  for (int q = 0; q < n; ++q) mid_norm[static_cast<size_t>(q)] = l1_norm(resid_mid.row(q).data(), D);

  // With a post-attention norm (Gemma) a head's part goes through it with the run's scale frozen:
  // part * w / scale(q), so that the parts and the biases sum to hook_attn_out (docs/graph.md).
  RowMatrixXf post_factor;  // [pos, d_model]; empty without the norm
  if (cache.has_post_norm(1)) {
    const VectorXf scale = cache.post_norm_scale(l, 1);
    const ConstRowVectorRef post_w(w.post_attn_norm_w, D);
    post_factor.resize(n, D);
    for (int q = 0; q < n; ++q) post_factor.row(q) = post_w / scale(q);
  }

  // models/tlens_model.py decomposed_attn: part[q, k, h] = pattern[h, q, k] * v[k, h] @ W_O[h]. Its
  // hook_v carries no value bias: TransformerLens's from_pretrained folds b_V into b_O
  // (fold_value_biases), and neither b_O nor the folded bias is a part. So b_V is taken out of v.
  const int n_kv = c.n_key_value_heads;
  const int threads_used = thread_count(threads);
  // Heads go in groups whose moved values fit in kGroupBytes, each group one parallel loop over
  // queries: few parallel regions, so that a busy machine does not stall the threads at barriers.
  // Small prompts stay on one thread.
  constexpr size_t kGroupBytes = size_t{64} << 20;
  const size_t head_bytes = static_cast<size_t>(n) * D * sizeof(float);
  const int group = std::clamp(static_cast<int>(kGroupBytes / std::max<size_t>(head_bytes, 1)), 1, H);
  const bool parallel = static_cast<double>(n) * n * H * D > 1e7;
  std::vector<RowMatrixXf> moved(static_cast<size_t>(group));  // [head in group][key_pos, d_model]
  for (int h0 = 0; h0 < H; h0 += group) {
    const int h1 = std::min(H, h0 + group);
    for (int h = h0; h < h1; ++h) {
      const int kv = c.kv_head(h);
      RowMatrixXf v_h = act.v.middle_cols(static_cast<Eigen::Index>(kv) * dh, dh);  // [pos, d_head]
      if (w.b_qkv) v_h.rowwise() -= ConstRowVectorRef(w.b_qkv + static_cast<size_t>(H + n_kv + kv) * dh, dh);
      RowMatrixXf& m = moved[static_cast<size_t>(h - h0)];  // (v[k, h] - b_V) @ W_O[h]
      m.resize(n, D);
      m.noalias() = v_h * cache.weights()->W_O(l, h);
    }
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads_used) if (parallel)
    for (int q = 0; q < n; ++q) {
      const float* factor = post_factor.size() ? post_factor.row(q).data() : nullptr;
      const float* whole = resid_mid.row(q).data();
      for (int h = h0; h < h1; ++h) {
        const ConstRowVectorRef pattern = cache.pattern_row(l, h, q);  // [key_pos <= q]
        const RowMatrixXf& m = moved[static_cast<size_t>(h - h0)];
        double* out = s.attn.data() + s.attn_offset(q) + h;
        for (int k = 0; k <= q; ++k)
          out[static_cast<size_t>(k) * H] =
              floored(mid_norm[static_cast<size_t>(q)], l1_distance(m.row(k).data(), pattern(k), factor, whole, D));
      }
    }
  }

#pragma omp parallel for schedule(static) num_threads(threads_used) if (parallel)
  for (int q = 0; q < n; ++q) {
    const size_t qs = static_cast<size_t>(q);
    const float* whole = resid_mid.row(q).data();
    // get_attention_contributions's parts are every (key_pos, head) of the prompt: later keys have
    // zero vectors and still take the floor's share of the sum.
    double later = 0.0;
    for (int i = 0; i < D; ++i) later += std::abs(kPairwiseEps - whole[i]);
    later = floored(mid_norm[qs], later);
    const double resid = floored(mid_norm[qs], l1_distance(act.resid_pre.row_data(q), 1.0, nullptr, whole, D));
    double sum = resid + later * static_cast<double>(n - 1 - q) * H;
    double* row = s.attn.data() + s.attn_offset(q);
    const size_t count = static_cast<size_t>(q + 1) * H;
    for (size_t i = 0; i < count; ++i) sum += row[i];
    for (size_t i = 0; i < count; ++i) row[i] /= sum;
    s.attn_later_key[qs] = later / sum;
    s.attn_resid[qs] = resid / sum;

    // get_mlp_contributions: parts mlp_out and resid_mid, whole resid_post.
    const float* post = resid_post.row(q).data();
    const double post_norm = l1_norm(post, D);
    const double mlp = floored(post_norm, l1_distance(act.mlp_out.row_data(q), 1.0, nullptr, post, D));
    const double carried = floored(post_norm, l1_distance(whole, 1.0, nullptr, post, D));
    s.mlp[qs] = mlp / (mlp + carried);
    s.mlp_resid[qs] = carried / (mlp + carried);
  }
  return s;
}

InfoRoutes info_routes(const ActivationCache& cache, const RouteOptions& options) {
  if (!(options.threshold > 0.0 && options.threshold < 1.0))
    throw Error("the routes' threshold is a share of a residual stream, between 0 and 1 (exclusive), such as 0.04; got " +
                std::to_string(options.threshold) + ".");
  check_cache(cache);
  const int n = cache.n_pos();
  if (options.position < -1 || options.position >= n)
    throw Error("position " + std::to_string(options.position) + " is outside the prompt (0.." + std::to_string(n - 1) +
                ", or -1 for the last).");
  const ModelConfig& c = cache.config();
  const int L = cache.n_layer(), H = c.n_heads;
  const double thr = options.threshold;
  InfoRoutes r;
  r.n_layers = L;
  r.n_pos = n;
  r.n_heads = H;
  r.threshold = thr;
  r.position = options.position < 0 ? n - 1 : options.position;
  for (int p = 0; p < n; ++p) r.nodes.push_back({0, p, RouteNodeKind::Embedding});
  for (int l = 0; l < L; ++l)
    for (RouteNodeKind kind : {RouteNodeKind::AfterAttn, RouteNodeKind::Mlp, RouteNodeKind::AfterMlp})
      for (int p = 0; p < n; ++p) r.nodes.push_back({l, p, kind});

  // With parallel blocks (GPT-J, GPT-NeoX) the MLP reads resid_pre, not resid_mid: its input edge
  // comes from the stream before the layer (docs/graph.md).
  const bool parallel = c.architecture.parallel_blocks;
  for (int l = 0; l < L; ++l) {
    const LayerShares s = layer_shares(cache, l, options.threads);
    auto before = [&](int p) {
      return l == 0 ? r.node_index(RouteNodeKind::Embedding, 0, p) : r.node_index(RouteNodeKind::AfterMlp, l - 1, p);
    };
    for (int q = 0; q < n; ++q) {
      const size_t qs = static_cast<size_t>(q);
      // apply_threshold_and_renormalize: shares at or under the threshold become 0, the rest are
      // divided by their sum. Later keys' floor shares count when they pass (they never get an edge:
      // no information moves backwards). When nothing passes LM-TT divides 0 by 0 and its routes
      // skip the NaN edges: no edges here.
      const int A = r.node_index(RouteNodeKind::AfterAttn, l, q);
      double kept = s.attn_resid[qs] > thr ? s.attn_resid[qs] : 0.0;
      if (s.attn_later_key[qs] > thr) kept += s.attn_later_key[qs] * static_cast<double>(n - 1 - q) * H;
      for (int k = 0; k <= q; ++k)
        for (int h = 0; h < H; ++h)
          if (s.attn_at(q, k, h) > thr) kept += s.attn_at(q, k, h);
      if (kept > 0.0) {
        for (int k = 0; k <= q; ++k)
          for (int h = 0; h < H; ++h)
            if (s.attn_at(q, k, h) > thr)
              r.edges.push_back({before(k), A, static_cast<float>(s.attn_at(q, k, h) / kept), RouteEdgeKind::Attention, l, h});
        if (s.attn_resid[qs] > thr)
          r.edges.push_back({before(q), A, static_cast<float>(s.attn_resid[qs] / kept), RouteEdgeKind::Residual, l, -1});
      }
      const int M = r.node_index(RouteNodeKind::Mlp, l, q), I = r.node_index(RouteNodeKind::AfterMlp, l, q);
      const double mlp = s.mlp[qs] > thr ? s.mlp[qs] : 0.0, carried = s.mlp_resid[qs] > thr ? s.mlp_resid[qs] : 0.0;
      if (mlp + carried > 0.0) {
        if (mlp > 0.0) {
          const float weight = static_cast<float>(mlp / (mlp + carried));
          r.edges.push_back({parallel ? before(q) : A, M, weight, RouteEdgeKind::Mlp, l, -1});
          r.edges.push_back({M, I, weight, RouteEdgeKind::Mlp, l, -1});
        }
        if (carried > 0.0)
          r.edges.push_back({A, I, static_cast<float>(carried / (mlp + carried)), RouteEdgeKind::Residual, l, -1});
      }
    }
  }

  // build_paths_to_predictions: networkx.edge_dfs over the reversed graph from the start node visits
  // every edge into a node it reaches, so the routes are the edges into the reached nodes.
  std::vector<std::vector<int>> into(r.nodes.size());  // [node] edges ending there
  for (size_t e = 0; e < r.edges.size(); ++e) into[static_cast<size_t>(r.edges[e].to)].push_back(static_cast<int>(e));
  std::vector<char> reached(r.nodes.size(), 0);
  std::vector<int> todo = {r.start_node()};
  reached[static_cast<size_t>(r.start_node())] = 1;
  while (!todo.empty()) {
    const int v = todo.back();
    todo.pop_back();
    for (int e : into[static_cast<size_t>(v)]) {
      const int u = r.edges[static_cast<size_t>(e)].from;
      if (!reached[static_cast<size_t>(u)]) {
        reached[static_cast<size_t>(u)] = 1;
        todo.push_back(u);
      }
    }
  }
  for (size_t e = 0; e < r.edges.size(); ++e)
    if (reached[static_cast<size_t>(r.edges[e].to)]) r.route_edges.push_back(static_cast<int>(e));
  return r;
}

}  // namespace hs
