// Attribution graphs (attribution_graph.h): the frozen replacement model's backward passes, batched.
#include "core/analysis/attribution_graph.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/features/features.h"
#include "core/features/sae.h"
#include "core/model/hooks.h"
#include "core/model/ops.h"
#include "core/model/thread_scope.h"
#include "core/model/weights.h"

namespace hs {

AttributionGraph::Kind AttributionGraph::kind(int node) const {
  if (node < n_features()) return Kind::Feature;
  if (node < n_features() + n_errors()) return Kind::Error;
  if (node < n_features() + n_errors() + n_pos) return Kind::Token;
  return Kind::Logit;
}

int AttributionGraph::node_layer(int node) const {
  switch (kind(node)) {
    case Kind::Feature: return active[static_cast<size_t>(selected[static_cast<size_t>(node)])].layer;
    case Kind::Error: return (node - n_features()) / n_pos;
    case Kind::Token: return -1;
    case Kind::Logit: return n_layers;
  }
  return -1;
}

int AttributionGraph::node_pos(int node) const {
  switch (kind(node)) {
    case Kind::Feature: return active[static_cast<size_t>(selected[static_cast<size_t>(node)])].pos;
    case Kind::Error: return (node - n_features()) % n_pos;
    case Kind::Token: return node - n_features() - n_errors();
    case Kind::Logit: return n_pos - 1;
  }
  return -1;
}

std::string AttributionGraph::node_id(int node) const {
  const std::string pos = std::to_string(node_pos(node));
  switch (kind(node)) {
    case Kind::Feature: {
      const Feature& f = active[static_cast<size_t>(selected[static_cast<size_t>(node)])];
      return std::to_string(f.layer) + "_" + std::to_string(f.latent) + "_" + pos;
    }
    case Kind::Error: return std::to_string(node_layer(node)) + "_-1_" + pos;
    case Kind::Token: return "E_" + std::to_string(tokens[static_cast<size_t>(node_pos(node))]) + "_" + pos;
    case Kind::Logit:
      return std::to_string(n_layers + 1) + "_" + std::to_string(logit_tokens[static_cast<size_t>(node - logit_node(0))]) +
             "_" + pos;
  }
  return {};
}

namespace {

// A transcoder's input: the block's MLP norm output, or the residual stream before it.
enum class InputPoint : uint8_t { Ln2Normalized, ResidMid };

// Everything the backward passes read, shared by the threads.
struct Frozen {
  const ModelConfig* c = nullptr;
  int S = 0, L = 0, D = 0;
  NormKind norm = NormKind::LayerNorm;
  bool parallel = false;
  // 1 / the norms' scales per position, frozen at the run's values.
  std::vector<VectorXf> inv1, inv2, inv_post1;
  VectorXf inv_final;
  const float* final_w = nullptr;
  std::vector<const float*> w1, w2, w_post1;
  std::vector<RowMatrixXf> W_O;  // [n_heads * d_head, d_model]
  std::vector<RowMatrixXf> W_V;  // [d_model, n_kv * d_head]
  const ActivationCache* cache = nullptr;

  // Sources, per layer.
  std::vector<InputPoint> input;
  std::vector<const RowMatrixXf*> skip;  // [d_out, d_in] or nullptr
  std::vector<RowMatrixXf> error;        // [S, d_model] per layer; empty when the graph has no error nodes
  RowMatrixXf out;                       // [n_active, d_model]: each unit's vector in the residual stream
  std::vector<std::vector<int>> begin;   // [layer][pos]: the first active unit there (size S + 1)
  RowMatrixXf embed;                     // [S, d_model]: the token nodes' vectors
  int n_active = 0;
  int n_err() const { return error.empty() ? 0 : L * S; }
  int n_cols() const { return n_active + n_err() + S; }
};

// One target: the vector injected as the gradient at its input point (a transcoder's input at its
// layer, or ln_final's output: layer L) at position pos.
struct Target {
  int layer = 0, pos = 0;
  const float* vector = nullptr;
};

// A pass's buffers hold [targets x positions, d_model] floats each, a dozen of them per thread. A
// batch whose targets times positions would need more than this many floats a buffer is run as
// several passes; the rows do not depend on which targets share a pass.
constexpr Eigen::Index kPassFloats = Eigen::Index{1} << 22;
// Keys per block of the attention's backward product (BatchPass::run).
constexpr Eigen::Index kKeyBlock = 128;

// The columns a target at (layer, pos) can reach (logits: layer L, the last position), as runs of
// consecutive columns in column order: the features and error nodes of the layers below it, at
// its position or before, and the token nodes up to its position (a layer's sources are the MLPs
// below it, and attention is causal). Every other column of its row is exactly zero.
// fn(first_column, count, offset): the run's place in the row and in the row's reachable values.
template <class Fn>
void for_reach(const Frozen& f, int layer, int pos, Fn&& fn) {
  const int top = std::min(layer, f.L);
  size_t at = 0;
  for (int l = 0; l < top; ++l) {
    const std::vector<int>& begin = f.begin[static_cast<size_t>(l)];
    const int b = begin[0], e = begin[static_cast<size_t>(pos) + 1];
    if (e > b) fn(b, e - b, at);
    at += static_cast<size_t>(e - b);
  }
  if (f.n_err() > 0)
    for (int l = 0; l < top; ++l) {
      fn(f.n_active + l * f.S, pos + 1, at);
      at += static_cast<size_t>(pos) + 1;
    }
  fn(f.n_active + f.n_err(), pos + 1, at);
}

// A computed row kept over the columns its target reaches only (for_reach). When rows are chosen
// by influence, the rows are kept until the chosen features are known; dense, they would be
// [rows, every active unit], which for a long prompt is most of the graph's memory.
struct ReachRow {
  int layer = 0, pos = 0;
  std::vector<float> values;

  void store(const Frozen& f, const Target& t, const float* full) {
    layer = t.layer;
    pos = t.pos;
    size_t n = 0;
    for_reach(f, layer, pos, [&](int, int len, size_t) { n += static_cast<size_t>(len); });
    values.resize(n);
    for_reach(f, layer, pos, [&](int col, int len, size_t at) { std::copy_n(full + col, len, values.data() + at); });
  }
  // Where each layer's feature run starts in `values` (layers below this row's only).
  std::vector<size_t> feature_offsets(const Frozen& f) const {
    std::vector<size_t> off;
    size_t at = 0;
    for (int l = 0; l < std::min(layer, f.L); ++l) {
      off.push_back(at);
      const std::vector<int>& begin = f.begin[static_cast<size_t>(l)];
      at += static_cast<size_t>(begin[static_cast<size_t>(pos) + 1] - begin[0]);
    }
    return off;
  }
};

// d_x = J^T d_y for a norm with its scale frozen: y = xc * w / s (+ b), xc = x - mean(x) for
// LayerNorm. Rows r of d_y are position r % S_b.
void frozen_norm_backward(Eigen::Ref<RowMatrixXf> d_x, const Eigen::Ref<const RowMatrixXf>& d_y, const VectorXf& inv_scale,
                          const float* w, NormKind kind, Eigen::Index S_b) {
  const Eigen::Index D = d_y.cols();
  const Eigen::Map<const RowVectorXf> weight(w, D);
  for (Eigen::Index r = 0; r < d_y.rows(); ++r) {
    auto out = d_x.row(r);
    out = d_y.row(r).cwiseProduct(weight) * inv_scale(r % S_b);
    if (kind == NormKind::LayerNorm) out.array() -= out.mean();
  }
}

// A row-major scratch matrix that keeps its memory from one pass to the next. The passes differ in
// size (each is cut to the positions its targets reach), and a block this large, freed and
// allocated again, goes back to the kernel and is faulted in again, zeroed, on every pass.
// Aligned as Eigen aligns its own matrices: a reduction's partial sums depend on where its data
// starts, and a row must come out the same in whichever pass computes it.
class Scratch {
 public:
  using View = Eigen::Map<RowMatrixXf, Eigen::AlignedMax>;
  View get(Eigen::Index rows, Eigen::Index cols) {
    const size_t n = static_cast<size_t>(rows * cols);
    if (n > data_.size()) {
      data_ = {};  // freed before the larger one is taken
      data_.resize(n);
    }
    return {data_.data(), rows, cols};
  }

 private:
  std::vector<float, Eigen::aligned_allocator<float>> data_;
};

class BatchPass {
 public:
  explicit BatchPass(const Frozen& f) : f_(f) {}

  // The rows of `targets` (out: [targets, n_cols], every column written).
  void run(const std::vector<Target>& targets, Eigen::Ref<RowMatrixXf> out) {
    const ModelConfig& c = *f_.c;
    const Eigen::Index B = static_cast<Eigen::Index>(targets.size());
    int top = 0, max_pos = 0;
    for (const Target& t : targets) {
      top = std::max(top, t.layer);
      max_pos = std::max(max_pos, t.pos);
    }
    // Attention is causal: a target at position p has no gradient past p.
    const Eigen::Index Sb = max_pos + 1, D = f_.D, R = B * Sb;
    const Eigen::Index H = c.n_heads, dh = c.d_head, group = c.n_heads / c.n_key_value_heads;
    const Eigen::Index kv_width = Eigen::Index{c.n_key_value_heads} * dh;
    out.setZero();
    Scratch::View G = G_.get(R, D), d_in = d_in_.get(R, D), d_x2 = d_x2_.get(R, D), d_mid = d_mid_.get(R, D),
                  d_z = d_z_.get(R, H * dh), d_v = d_v_.get(R, kv_width), d_ln1 = d_ln1_.get(R, D),
                  d_x1 = d_x1_.get(R, D), pattern = pattern_.get(Sb, Sb), gather = gather_.get(Sb, B * dh),
                  mixed = mixed_.get(Sb, B * dh);
    G.setZero();
    if (top == f_.L) {
      Scratch::View y = tmp_.get(R, D);
      y.setZero();
      for (Eigen::Index b = 0; b < B; ++b)
        if (targets[static_cast<size_t>(b)].layer == f_.L)
          y.row(b * Sb + targets[static_cast<size_t>(b)].pos) = Eigen::Map<const RowVectorXf>(targets[static_cast<size_t>(b)].vector, D);
      frozen_norm_backward(G, y, f_.inv_final, f_.final_w, f_.norm, Sb);
    }
    for (int l = std::min(top, f_.L - 1); l >= 0; --l) {
      // G is the gradient at resid_post(l), which is hook_mlp_out(l)'s: the layer's sources read it.
      if (l < top) read_sources(G, l, B, Sb, out);
      // The MLP's input: the targets of this layer and a skip transcoder's linear path.
      bool any = false;
      d_in.setZero();
      for (Eigen::Index b = 0; b < B; ++b) {
        const Target& t = targets[static_cast<size_t>(b)];
        if (t.layer != l) continue;
        d_in.row(b * Sb + t.pos) += Eigen::Map<const RowVectorXf>(t.vector, D);
        any = true;
      }
      if (f_.skip[static_cast<size_t>(l)] && l < top) {
        d_in.noalias() += G * *f_.skip[static_cast<size_t>(l)];
        any = true;
      }
      if (any && f_.input[static_cast<size_t>(l)] == InputPoint::Ln2Normalized)
        frozen_norm_backward(d_x2, d_in, f_.inv2[static_cast<size_t>(l)], f_.w2[static_cast<size_t>(l)], f_.norm, Sb);
      else if (any)
        d_x2 = d_in;
      // resid_mid = resid_pre + attn_out; a sequential block's MLP reads resid_mid.
      d_mid = G;
      if (any && !f_.parallel) d_mid += d_x2;
      // Attention with its patterns frozen: only the values carry a gradient.
      if (c.architecture.post_attn_norm) {
        Scratch::View post = tmp_.get(R, D);
        frozen_norm_backward(post, d_mid, f_.inv_post1[static_cast<size_t>(l)], f_.w_post1[static_cast<size_t>(l)],
                             NormKind::RMSNorm, Sb);
        d_z.noalias() = post * f_.W_O[static_cast<size_t>(l)].transpose();
      } else {
        d_z.noalias() = d_mid * f_.W_O[static_cast<size_t>(l)].transpose();
      }
      d_v.setZero();
      const LayerActivations& a = f_.cache->layer(l);
      pattern.setZero();
      for (Eigen::Index h = 0; h < H; ++h) {
        for (Eigen::Index q = 0; q < Sb; ++q) pattern.row(q).head(q + 1) = a.pattern.row(static_cast<int>(h), q);
        for (Eigen::Index b = 0; b < B; ++b) gather.middleCols(b * dh, dh) = d_z.block(b * Sb, h * dh, Sb, dh);
        // mixed[k] = sum over queries q >= k of pattern[q, k] gather[q]. The pattern is causal, so
        // a block of keys takes only the queries from its first key on: about half the product.
        for (Eigen::Index k0 = 0; k0 < Sb; k0 += kKeyBlock) {
          const Eigen::Index n = std::min(kKeyBlock, Sb - k0);
          mixed.middleRows(k0, n).noalias() = pattern.block(k0, k0, Sb - k0, n).transpose() * gather.middleRows(k0, Sb - k0);
        }
        const Eigen::Index g = h / group;
        for (Eigen::Index b = 0; b < B; ++b) d_v.block(b * Sb, g * dh, Sb, dh) += mixed.middleCols(b * dh, dh);
      }
      d_ln1.noalias() = d_v * f_.W_V[static_cast<size_t>(l)].transpose();
      frozen_norm_backward(d_x1, d_ln1, f_.inv1[static_cast<size_t>(l)], f_.w1[static_cast<size_t>(l)], f_.norm, Sb);
      G = d_mid + d_x1;
      if (any && f_.parallel) G += d_x2;
    }
    // G is the gradient at resid_pre(0): hook_embed's (and the position embedding's).
    const Eigen::Index tok0 = f_.n_active + Eigen::Index{f_.n_err()};
    for (Eigen::Index p = 0; p < Sb; ++p) out.col(tok0 + p).noalias() = rows_at(G, p, B, Sb) * f_.embed.row(p).transpose();
  }

 private:
  // The rows of G at position p, one per target: [B, D] with a stride of Sb rows.
  static Eigen::Map<const RowMatrixXf, 0, Eigen::OuterStride<>> rows_at(const Scratch::View& G, Eigen::Index p, Eigen::Index B,
                                                                        Eigen::Index Sb) {
    return {G.data() + p * G.cols(), B, G.cols(), Eigen::OuterStride<>(Sb * G.cols())};
  }

  void read_sources(const Scratch::View& G, int l, Eigen::Index B, Eigen::Index Sb, Eigen::Ref<RowMatrixXf> out) {
    const std::vector<int>& begin = f_.begin[static_cast<size_t>(l)];
    const RowMatrixXf* error = f_.error.empty() ? nullptr : &f_.error[static_cast<size_t>(l)];
    const Eigen::Index err0 = f_.n_active + Eigen::Index{l} * f_.S;
    for (Eigen::Index p = 0; p < Sb; ++p) {
      const auto g = rows_at(G, p, B, Sb);
      const int fb = begin[static_cast<size_t>(p)], fe = begin[static_cast<size_t>(p) + 1];
      if (fe > fb) out.middleCols(fb, fe - fb).noalias() = g * f_.out.middleRows(fb, fe - fb).transpose();
      if (error) out.col(err0 + p).noalias() = g * error->row(p).transpose();
    }
  }

  const Frozen& f_;
  Scratch G_, d_in_, d_x2_, d_mid_, tmp_, d_z_, d_v_, d_ln1_, d_x1_, pattern_, gather_, mixed_;
};

InputPoint transcoder_input(const Sae& t, const ModelConfig& c, int l) {
  const auto in = parse_hook_key(c, t.hook_in);
  const auto out = parse_hook_key(c, t.hook_out);
  const std::string name = "the transcoder of layer " + std::to_string(l) + " (" + t.name + ")";
  if (!t.is_transcoder())
    throw Error(name + " is an SAE (it reads and writes " + t.hook_in +
                "); an attribution graph needs transcoders, which read an MLP's input and write its output.");
  if (!in || in->layer != l || (in->hook != HookPoint::Ln2Normalized && in->hook != HookPoint::ResidMid))
    throw Error(name + " reads " + t.hook_in + "; an attribution graph needs blocks." + std::to_string(l) +
                ".ln2.hook_normalized or blocks." + std::to_string(l) + ".hook_resid_mid.");
  if (!out || out->layer != l || out->hook != HookPoint::MlpOut || t.hook_out_before_post_norm)
    throw Error(name + " writes " + t.hook_out + "; an attribution graph needs blocks." + std::to_string(l) + ".hook_mlp_out.");
  if (in->hook == HookPoint::ResidMid && c.architecture.parallel_blocks)
    throw Error(name + " reads hook_resid_mid, which a parallel block's MLP does not read; use ln2.hook_normalized.");
  if (t.norm != SaeNorm::None || t.rescale_acts_by_decoder_norm || t.activation == SaeActivation::Gated)
    throw Error(name + " normalises its activations, rescales them by the decoder's norm or is gated; attribution "
                       "graphs take transcoders whose pre-activation is linear in their input, as circuit-tracer's are.");
  if (t.d_in != c.d_model || t.d_out != c.d_model)
    throw Error(name + " is " + std::to_string(t.d_in) + " -> " + std::to_string(t.d_out) + " wide; the model's d_model is " +
                std::to_string(c.d_model) + ".");
  return in->hook == HookPoint::Ln2Normalized ? InputPoint::Ln2Normalized : InputPoint::ResidMid;
}

VectorXf inverse(const VectorXf& scale) { return scale.cwiseInverse(); }

bool is_sae_folder(const std::filesystem::path& d) {
  return std::filesystem::exists(d / "cfg.json") || std::filesystem::exists(d / "config.yaml") ||
         std::filesystem::exists(d / "params.npz");
}

}  // namespace

std::vector<std::shared_ptr<const Sae>> load_graph_transcoders(const std::vector<std::filesystem::path>& dirs,
                                                               const ModelConfig& config) {
  namespace fs = std::filesystem;
  std::vector<std::shared_ptr<const Sae>> by_layer(static_cast<size_t>(config.n_layers));
  std::vector<fs::path> from(static_cast<size_t>(config.n_layers));
  auto take = [&](const fs::path& folder, bool only_transcoders) {
    SaeSet set = load_sae_folder(folder);
    for (Sae& s : set.saes) {
      if (!s.is_transcoder()) {
        if (only_transcoders) continue;
        throw Error(folder.string() + " is an SAE reading " + s.hook_in + ", not a transcoder; an attribution graph needs "
                    "transcoders (an MLP's input to its output).");
      }
      check_sae_fits(s, config);
      if (s.layer < 0 || s.layer >= config.n_layers)
        throw Error(folder.string() + " reads " + s.hook_in + ", which is not in one of the model's blocks.");
      const size_t l = static_cast<size_t>(s.layer);
      if (by_layer[l])
        throw Error("two transcoders read layer " + std::to_string(s.layer) + ": " + from[l].string() + " and " +
                    folder.string() + "; give one per layer.");
      from[l] = folder;
      by_layer[l] = std::make_shared<const Sae>(std::move(s));
    }
  };
  for (const fs::path& d : dirs) {
    if (!fs::is_directory(d)) throw Error(d.string() + " is not a folder; give a transcoder folder or a folder of them.");
    if (is_sae_folder(d)) {
      take(d, false);
      continue;
    }
    std::vector<fs::path> subs;
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_directory() && is_sae_folder(e.path())) subs.push_back(e.path());
    std::sort(subs.begin(), subs.end());
    if (subs.empty())
      throw Error(d.string() + " holds no transcoder: no cfg.json (SAELens), config.yaml (circuit-tracer) or params.npz "
                  "(Gemma Scope), in it or in its sub-folders.");
    for (const fs::path& s : subs) take(s, true);
  }
  std::string missing;
  for (int l = 0; l < config.n_layers; ++l)
    if (!by_layer[static_cast<size_t>(l)]) missing += (missing.empty() ? "" : ", ") + std::to_string(l);
  if (!missing.empty())
    throw Error("an attribution graph needs a transcoder for every layer, and none was given for layer" +
                std::string(missing.find(',') == std::string::npos ? " " : "s ") + missing + ".");
  return by_layer;
}

namespace {

// The checks both kinds of graph make, and the frozen model's dimensions.
Frozen start(const ActivationCache& cache, AttributionGraph& g) {
  const ModelConfig& c = cache.config();
  const int S = cache.n_pos(), L = c.n_layers;
  if (!cache.interventions.empty())
    throw Error("an attribution graph explains a plain run, and this run was made with edits; run the prompt without them.");
  if (cache.n_layer() != L || S == 0 || cache.layer(0).resid_pre.rows() != S)
    throw Error("an attribution graph needs every activation of the run, and this run kept only the logits.");
  g.tokens = cache.tokens();
  g.n_layers = L;
  g.n_pos = S;
  g.zero_first = true;
  Frozen f;
  f.c = &c;
  f.cache = &cache;
  f.S = S;
  f.L = L;
  f.D = c.d_model;
  f.norm = c.architecture.norm;
  f.parallel = c.architecture.parallel_blocks;
  f.final_w = cache.weights()->final_norm_w();
  f.inv_final = inverse(cache.ln_final_scale);
  f.begin.assign(static_cast<size_t>(L), std::vector<int>(static_cast<size_t>(S) + 1, 0));
  return f;
}

// What both kinds of graph share once their units are known (f's sources, `target` [n_active,
// d_model] each unit's injected vector, `input` each unit's input in the real run): the frozen
// norms and attention, the logits, the rows (logits first, then units, possibly chosen by
// influence) and the adjacency. `default_limit` stands for max_feature_nodes < 0.
AttributionGraph finish(const ActivationCache& cache, Frozen& f, AttributionGraph g, const RowMatrixXf& target,
                        const std::vector<float>& input, const GraphOptions& options, int default_limit) {
  const ModelConfig& c = cache.config();
  const Weights& W = *cache.weights();
  const int S = f.S, L = f.L, D = f.D;
  const Eigen::Index q_width = Eigen::Index{c.n_heads} * c.d_head, kv_width = Eigen::Index{c.n_key_value_heads} * c.d_head;
  // The frozen norms and the attention's value and output matrices.
  for (int l = 0; l < L; ++l) {
    const LayerWeights& lw = W.layer(l);
    VectorXf scale;
    cache.block_norm(l, 1, &scale);
    f.inv1.push_back(inverse(scale));
    cache.block_norm(l, 2, &scale);
    f.inv2.push_back(inverse(scale));
    f.w1.push_back(lw.norm1_w);
    f.w2.push_back(lw.norm2_w);
    f.inv_post1.push_back(c.architecture.post_attn_norm ? inverse(cache.post_norm_scale(l, 1)) : VectorXf());
    f.w_post1.push_back(lw.post_attn_norm_w);
    f.W_O.emplace_back(W.W_O_all(l));
    f.W_V.emplace_back(W.W_qkv(l).middleCols(q_width + kv_width, kv_width));
  }
  f.embed.resize(S, D);
  for (int p = 0; p < S; ++p) W.embedding_row(cache.tokens()[static_cast<size_t>(p)], f.embed.row(p).data());

  // The logits: the smallest set of top tokens reaching the probability, at most max_logits.
  const RowVectorXf last = cache.logits.row(S - 1);
  {
    const double top = last.maxCoeff();
    std::vector<double> prob(static_cast<size_t>(c.d_vocab));
    double sum = 0.0;
    for (int v = 0; v < c.d_vocab; ++v) sum += prob[static_cast<size_t>(v)] = std::exp(double{last(v)} - top);
    std::vector<int> order(static_cast<size_t>(c.d_vocab));
    std::iota(order.begin(), order.end(), 0);
    const int k = std::min(options.max_logits, c.d_vocab);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return prob[static_cast<size_t>(a)] != prob[static_cast<size_t>(b)] ? prob[static_cast<size_t>(a)] > prob[static_cast<size_t>(b)]
                                                                          : a < b;
    });
    double cum = 0.0;
    for (int i = 0; i < k; ++i) {
      const int v = order[static_cast<size_t>(i)];
      g.logit_tokens.push_back(v);
      g.logit_probs.push_back(static_cast<float>(prob[static_cast<size_t>(v)] / sum));
      cum += prob[static_cast<size_t>(v)] / sum;
      if (cum >= options.logit_probability) break;  // searchsorted(cumsum, p) + 1
    }
  }
  const int n_logits = static_cast<int>(g.logit_tokens.size());
  RowMatrixXf logit_dirs(n_logits, D);
  {
    // The mean unembedding column, summed in double.
    // Row by row: unembed_rows() would materialise the whole matrix (2.4 GB on Gemma 2).
    Eigen::Matrix<double, 1, Eigen::Dynamic> mean = Eigen::Matrix<double, 1, Eigen::Dynamic>::Zero(D);
    RowVectorXf row(D);
    for (int v = 0; v < c.d_vocab; ++v) {
      W.unembed_row(v, row.data());
      mean += row.cast<double>();
    }
    mean /= c.d_vocab;
    for (int i = 0; i < n_logits; ++i) {
      W.unembed_row(g.logit_tokens[static_cast<size_t>(i)], logit_dirs.row(i).data());
      logit_dirs.row(i) = (logit_dirs.row(i).cast<double>() - mean).cast<float>();
    }
  }

  // The rows: logits first, then features (circuit-tracer's phases 3 and 4).
  const int total = f.n_active;
  const int limit = options.max_feature_nodes < 0 ? default_limit : options.max_feature_nodes;
  const int max_features = limit > 0 ? std::min(limit, total) : total;
  g.max_feature_nodes = limit;
  const int batch = std::max(1, options.batch);
  // Every feature a row: the rows are the adjacency's own (features in order, then the logits
  // last, as the graph orders its nodes), written in place, so that the graph never holds two
  // [nodes, nodes] matrices at once. Otherwise each row is kept over the columns it can reach
  // (ReachRow) until the chosen features are known. Not zeroed for the rows: BatchPass::run writes
  // each in full.
  const bool direct = max_features == total;
  const int n_direct = f.n_cols() + n_logits;  // features, errors, tokens, logits
  std::vector<ReachRow> rows;
  if (direct) {
    g.adjacency = RowMatrixXf::Zero(n_direct, n_direct);
  } else {
    rows.resize(static_cast<size_t>(n_logits + max_features));
  }
  std::vector<int> row_feature(static_cast<size_t>(max_features), -1);  // which feature each feature row is
  std::vector<Target> logit_targets;
  for (int i = 0; i < n_logits; ++i) logit_targets.push_back({L, S - 1, logit_dirs.row(i).data()});
  // Progress and cancellation, asked on the calling thread (OpenMP's thread 0) between its batches.
  const double all_rows = static_cast<double>(n_logits + max_features);
  const Eigen::Index pass_width = std::max<Eigen::Index>(D, std::max(q_width, kv_width));
  std::atomic<long> rows_done{0};
  std::atomic<bool> stop{false};
  // One pass per thread, its buffers kept from one round of batches to the next.
  std::vector<BatchPass> passes;
  std::vector<Scratch> full_rows(static_cast<size_t>(omp_get_max_threads()));  // a pass's rows at full width
  for (int t = 0; t < omp_get_max_threads(); ++t) passes.emplace_back(f);
  // Computes batch i's rows (row first_row[i] on: logits first, then features in the order chosen).
  auto run_batches = [&](const std::vector<std::vector<Target>>& batches, const std::vector<int>& first_row) {
#pragma omp parallel
    {
      BatchPass& pass = passes[static_cast<size_t>(omp_get_thread_num())];
      Scratch& full_scratch = full_rows[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
      for (int i = 0; i < static_cast<int>(batches.size()); ++i) {
        if (stop.load(std::memory_order_relaxed)) continue;
        const auto& b = batches[static_cast<size_t>(i)];
        for (size_t j = 0; j < b.size();) {
          // As many of the batch's targets as one pass's buffers hold (at least one), all of one
          // layer: a pass runs from its highest target's layer down, and a lower target's rows
          // would be carried through the layers above it for nothing.
          size_t n = 1;
          int max_pos = b[j].pos;
          while (j + n < b.size() && b[j + n].layer == b[j].layer) {
            const int mp = std::max(max_pos, b[j + n].pos);
            if (static_cast<Eigen::Index>(n + 1) * (mp + 1) * pass_width > kPassFloats) break;
            max_pos = mp;
            ++n;
          }
          const std::vector<Target> chunk(b.begin() + static_cast<std::ptrdiff_t>(j), b.begin() + static_cast<std::ptrdiff_t>(j + n));
          const int r0 = first_row[static_cast<size_t>(i)] + static_cast<int>(j);
          const Eigen::Index rn = static_cast<Eigen::Index>(n);
          if (direct) {
            const int r = r0 < n_logits ? n_direct - n_logits + r0 : r0 - n_logits;
            pass.run(chunk, g.adjacency.block(r, 0, rn, f.n_cols()));
          } else {
            Scratch::View full = full_scratch.get(rn, f.n_cols());
            pass.run(chunk, full);
            for (size_t k = 0; k < n; ++k)
              rows[static_cast<size_t>(r0) + k].store(f, chunk[k], full.row(static_cast<Eigen::Index>(k)).data());
          }
          j += n;
        }
        rows_done += static_cast<long>(b.size());
        if (omp_get_thread_num() == 0) {
          if (options.progress) options.progress(static_cast<double>(rows_done.load()) / all_rows);
          if (options.cancelled && options.cancelled()) stop = true;
        }
      }
    }
    if (stop) throw Cancelled();
  };
  {
    std::vector<std::vector<Target>> batches;
    std::vector<int> first;
    for (int i = 0; i < n_logits; i += batch) {
      batches.emplace_back(logit_targets.begin() + i, logit_targets.begin() + std::min(n_logits, i + batch));
      first.push_back(i);
    }
    run_batches(batches, first);
  }
  std::vector<char> visited(static_cast<size_t>(total), 0);
  std::vector<double> inv_sum;  // 1 / each computed row's sum of |edges|
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> sub_all;
  int sub_rows = 0, sub_cols = 0;  // the part of sub_all filled
  int n_visited = 0;
  while (n_visited < max_features) {
    std::vector<int> pending;
    if (max_features == total) {
      pending.resize(static_cast<size_t>(total));
      std::iota(pending.begin(), pending.end(), 0);
    } else {
      // compute_partial_influences over the rows so far: |rows| normalised by row, propagated
      // from the logits' probabilities through the rows' nodes. The propagation is linear, so it
      // runs on the rows' own columns ([st, st - n_logits], small), and the influence on every
      // column is one pass over the rows with each row's summed weight. A row's columns it cannot
      // reach are zero, and adding them changes no sum.
      const int st = n_logits + n_visited;
      for (int r = static_cast<int>(inv_sum.size()); r < st; ++r) {
        double sum = 0.0;
        for (float v : rows[static_cast<size_t>(r)].values) sum += std::abs(double{v});
        inv_sum.push_back(1.0 / std::max(sum, 1e-8));
      }
      const int sf = st - n_logits;
      // sub(r, k): row r's normalised |edge| from the node of feature row k. Rows and their sums
      // do not change once computed, so only the new rows and the new columns are filled.
      if (sub_all.size() == 0) sub_all.resize(n_logits + max_features, max_features);
#pragma omp parallel for schedule(dynamic, 16)
      for (int r = 0; r < st; ++r) {
        const ReachRow& row = rows[static_cast<size_t>(r)];
        const std::vector<size_t> off = row.feature_offsets(f);
        for (int k = r < sub_rows ? sub_cols : 0; k < sf; ++k) {
          const int id = row_feature[static_cast<size_t>(k)];
          const AttributionGraph::Feature& ft = g.active[static_cast<size_t>(id)];
          const bool reached = ft.layer < static_cast<int>(off.size()) && ft.pos <= row.pos;
          sub_all(r, k) = reached ? inv_sum[static_cast<size_t>(r)] *
                                    std::abs(double{row.values[off[static_cast<size_t>(ft.layer)] +
                                                               static_cast<size_t>(id - f.begin[static_cast<size_t>(ft.layer)][0])]})
                              : 0.0;
        }
      }
      sub_rows = st;
      sub_cols = sf;
      const auto sub = sub_all.topLeftCorner(st, sf);
      Eigen::VectorXd weight = Eigen::VectorXd::Zero(st), total_weight;
      for (int i = 0; i < n_logits; ++i) weight(i) = g.logit_probs[static_cast<size_t>(i)];
      total_weight = weight;
      for (int it = 1; it < 128; ++it) {
        Eigen::VectorXd next = Eigen::VectorXd::Zero(st);  // logits are nobody's source
        next.tail(sf) = sub.transpose() * weight;
        if (!next.any()) break;
        total_weight += next;
        weight = std::move(next);
      }
      // Over a block of columns per thread, the rows in order (each column's sum in row order).
      std::vector<double> influence(static_cast<size_t>(total), 0.0);
      constexpr int kBlock = 2048;
#pragma omp parallel for schedule(dynamic, 1)
      for (int c0 = 0; c0 < total; c0 += kBlock) {
        const int c1 = std::min(total, c0 + kBlock);
        double* acc = influence.data() + c0;
        for (int r = 0; r < st; ++r) {
          const double w = total_weight(r) * inv_sum[static_cast<size_t>(r)];
          if (w == 0.0) continue;
          const ReachRow& row = rows[static_cast<size_t>(r)];
          for_reach(f, row.layer, row.pos, [&](int col, int len, size_t at) {
            const int from = std::max(col, c0), to = std::min(col + len, c1);
            for (int k = from; k < to; ++k)
              acc[k - c0] += w * std::abs(double{row.values[at + static_cast<size_t>(k - col)]});
          });
        }
      }
      std::vector<int> rank(static_cast<size_t>(total));
      std::iota(rank.begin(), rank.end(), 0);
      std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) {
        return influence[static_cast<size_t>(a)] > influence[static_cast<size_t>(b)];
      });
      const int queue = std::min(options.update_interval * batch, max_features - n_visited);
      for (int i : rank) {
        if (static_cast<int>(pending.size()) >= queue) break;
        if (!visited[static_cast<size_t>(i)]) pending.push_back(i);
      }
      // In feature order (layer, then position), as when every feature is a row: a batch's pass
      // reaches its highest target's layer and its last target's position, so targets alike in
      // both make the passes short. The rows do not depend on the order.
      std::sort(pending.begin(), pending.end());
    }
    std::vector<std::vector<Target>> batches;
    std::vector<int> first;
    for (size_t i = 0; i < pending.size(); i += static_cast<size_t>(batch)) {
      std::vector<Target> b;
      for (size_t j = i; j < std::min(pending.size(), i + static_cast<size_t>(batch)); ++j) {
        const int id = pending[j];
        const AttributionGraph::Feature& ft = g.active[static_cast<size_t>(id)];
        b.push_back({ft.layer, ft.pos, target.row(id).data()});
        row_feature[static_cast<size_t>(n_visited) + j] = id;
        visited[static_cast<size_t>(id)] = 1;
      }
      batches.push_back(std::move(b));
      first.push_back(n_logits + n_visited + static_cast<int>(i));
    }
    run_batches(batches, first);
    n_visited += static_cast<int>(pending.size());
  }

  // What only the rows needed, given back before the graph is assembled.
  passes.clear();
  full_rows.clear();
  sub_all = {};

  // The graph: the selected features' rows in feature order, the logits' last; the columns of
  // the features not selected dropped.
  for (int i = 0; i < total; ++i)
    if (visited[static_cast<size_t>(i)]) g.selected.push_back(i);
  const int n_sel = static_cast<int>(g.selected.size());
  const int N = g.n_nodes();
  if (!direct) {
    // The node each of the rows' columns is (-1: a feature not selected).
    std::vector<int> node_of(static_cast<size_t>(f.n_cols()), -1);
    for (int i = 0; i < n_sel; ++i) node_of[static_cast<size_t>(g.selected[static_cast<size_t>(i)])] = i;
    for (int j = total; j < f.n_cols(); ++j) node_of[static_cast<size_t>(j)] = n_sel + (j - total);
    std::vector<int> feature_row(static_cast<size_t>(total), -1);
    for (int r = 0; r < max_features; ++r) feature_row[static_cast<size_t>(row_feature[static_cast<size_t>(r)])] = n_logits + r;
    g.adjacency = RowMatrixXf::Zero(N, N);
    auto copy_row = [&](int node, ReachRow& row) {
      for_reach(f, row.layer, row.pos, [&](int col, int len, size_t at) {
        for (int k = 0; k < len; ++k) {
          const int to = node_of[static_cast<size_t>(col + k)];
          if (to >= 0) g.adjacency(node, to) = row.values[at + static_cast<size_t>(k)];
        }
      });
      row.values = std::vector<float>();  // given back as the adjacency fills
    };
    for (int i = 0; i < n_sel; ++i)
      copy_row(i, rows[static_cast<size_t>(feature_row[static_cast<size_t>(g.selected[static_cast<size_t>(i)])])]);
    for (int i = 0; i < n_logits; ++i) copy_row(g.logit_node(i), rows[static_cast<size_t>(i)]);
    rows = std::vector<ReachRow>();
  } else if (N != n_direct) {
    throw Error("internal: the attribution graph's node count changed while its rows were written.");
  }

  g.node_input.assign(static_cast<size_t>(N), 0.0f);
  for (int i = 0; i < n_sel; ++i) g.node_input[static_cast<size_t>(i)] = input[static_cast<size_t>(g.selected[static_cast<size_t>(i)])];
  {
    const RowVectorXf raw = cache.logits_before_softcap(S - 1);
    const double mean = raw.cast<double>().mean();
    for (int i = 0; i < n_logits; ++i)
      g.node_input[static_cast<size_t>(g.logit_node(i))] = static_cast<float>(double{raw(g.logit_tokens[static_cast<size_t>(i)])} - mean);
  }
  return g;
}

}  // namespace

AttributionGraph attribution_graph(const ActivationCache& cache, const std::vector<std::shared_ptr<const Sae>>& transcoders,
                                   const GraphOptions& options) {
  const ModelConfig& c = cache.config();
  const int L = c.n_layers;
  if (static_cast<int>(transcoders.size()) != L)
    throw Error("an attribution graph needs one transcoder for each of the model's " + std::to_string(L) + " layers; " +
                std::to_string(transcoders.size()) + " were given.");
  AttributionGraph g;
  g.unit = AttributionGraph::Unit::TranscoderFeature;
  Frozen f = start(cache, g);
  const int S = f.S, D = f.D;
  const ThreadScope threads(options.threads > 0 ? options.threads : omp_get_num_procs());

  // The transcoders on the run: active features, decoder rows, errors, encoder columns.
  std::vector<float> pre;            // per active feature: its encoder pre-activation
  RowMatrixXf encoder;               // [n_active, d_model]: the encoder column of each
  std::vector<RowMatrixXf> enc_parts, out_parts;
  for (int l = 0; l < L; ++l) {
    const Sae& t = *transcoders[static_cast<size_t>(l)];
    f.input.push_back(transcoder_input(t, c, l));
    g.d_transcoder = std::max(g.d_transcoder, t.d_sae);
    const RowMatrixXf x = hook_rows(cache, t.hook_in);
    SaeRun run = run_sae(t, x);
    RowMatrixXf error = cache.rows(HookPoint::MlpOut, l) - run.sae_out;
    if (g.zero_first) {
      run.feature_acts.row(0).setZero();
      error.row(0).setZero();
    }
    f.error.push_back(std::move(error));
    f.skip.push_back(t.W_skip.size() > 0 ? &t.W_skip : nullptr);
    std::vector<int>& begin = f.begin[static_cast<size_t>(l)];
    std::vector<std::pair<int, int>> here;  // (pos, latent)
    for (int p = 0; p < S; ++p) {
      begin[static_cast<size_t>(p)] = static_cast<int>(g.active.size());
      for (int u = 0; u < t.d_sae; ++u) {
        const float a = run.feature_acts(p, u);
        if (a == 0.0f) continue;
        g.active.push_back({l, p, u, a});
        here.emplace_back(p, u);
      }
    }
    begin[static_cast<size_t>(S)] = static_cast<int>(g.active.size());
    RowMatrixXf enc(static_cast<Eigen::Index>(here.size()), D), out(static_cast<Eigen::Index>(here.size()), D);
    for (size_t i = 0; i < here.size(); ++i) {
      const auto [p, u] = here[i];
      const Eigen::Index r = static_cast<Eigen::Index>(i);
      enc.row(r) = t.W_enc.col(u).transpose();
      out.row(r) = run.feature_acts(p, u) * t.W_dec.row(u);
      // SAELens's encode: (x - b_dec if apply_b_dec_to_input) @ W_enc + b_enc, summed in double.
      double s = t.b_enc.size() > 0 ? double{t.b_enc(u)} : 0.0;
      for (int d = 0; d < D; ++d)
        s += (double{x(p, d)} - (t.apply_b_dec_to_input ? double{t.b_dec(d)} : 0.0)) * double{t.W_enc(d, u)};
      pre.push_back(static_cast<float>(s));
    }
    enc_parts.push_back(std::move(enc));
    out_parts.push_back(std::move(out));
  }
  f.n_active = static_cast<int>(g.active.size());
  encoder.resize(f.n_active, D);
  f.out.resize(f.n_active, D);
  for (Eigen::Index r = 0; const auto& e : enc_parts) {
    encoder.middleRows(r, e.rows()) = e;
    r += e.rows();
  }
  for (Eigen::Index r = 0; const auto& o : out_parts) {
    f.out.middleRows(r, o.rows()) = o;
    r += o.rows();
  }
  enc_parts.clear();
  out_parts.clear();

  return finish(cache, f, std::move(g), encoder, pre, options, kTranscoderGraphMaxNodes);
}

AttributionGraph neuron_attribution_graph(const ActivationCache& cache, const GraphOptions& options) {
  const ModelConfig& c = cache.config();
  const Weights& W = *cache.weights();
  AttributionGraph g;
  g.unit = AttributionGraph::Unit::Neuron;
  Frozen f = start(cache, g);
  const int S = f.S, L = f.L, D = f.D, M = c.d_mlp;
  const bool gated = cache.has_gated_mlp();
  const ThreadScope threads(options.threads > 0 ? options.threads : omp_get_num_procs());
  g.d_transcoder = M;

  // The MLPs on the run. A neuron's vector is what it writes: hook_post x its W_out row, through
  // the post-MLP norm with its scale frozen (Gemma); hook_mlp_out is the sum of every neuron's
  // vector and b_out's, so no error node is needed. Its input is hook_pre, the gate's
  // pre-activation in a gated MLP, injected at ln2's output as W_in's (W_gate's) column.
  std::vector<float> input;
  std::vector<RowMatrixXf> target_parts, out_parts;
  for (int l = 0; l < L; ++l) {
    f.input.push_back(InputPoint::Ln2Normalized);
    f.skip.push_back(nullptr);
    const RowMatrixXf pre = cache.mlp_pre(l), post = cache.mlp_post(l);  // [S, d_mlp]
    const RowMatrixXf up = gated ? cache.mlp_pre_linear(l) : RowMatrixXf();
    const ConstMatrixRef W_in = gated ? W.W_gate(l) : W.W_in(l);          // [d_model, d_mlp]
    const ConstMatrixRef W_out = W.W_out(l);                               // [d_mlp, d_model]
    VectorXf inv_post;
    if (cache.has_post_norm(2)) inv_post = inverse(cache.post_norm_scale(l, 2));
    const float* w_post = W.layer(l).post_mlp_norm_w;
    std::vector<int>& begin = f.begin[static_cast<size_t>(l)];
    std::vector<std::pair<int, int>> here;  // (pos, neuron)
    for (int p = 0; p < S; ++p) {
      begin[static_cast<size_t>(p)] = static_cast<int>(g.active.size());
      if (p == 0) continue;  // position 0's MLP output is a constant, as in transcoder graphs
      for (int n = 0; n < M; ++n) {
        const float a = post(p, n);
        if (!is_neuron_node(a, gated ? up(p, n) : 0.0f, gated)) continue;
        g.active.push_back({l, p, n, a});
        here.emplace_back(p, n);
      }
    }
    begin[static_cast<size_t>(S)] = static_cast<int>(g.active.size());
    RowMatrixXf tgt(static_cast<Eigen::Index>(here.size()), D), out(static_cast<Eigen::Index>(here.size()), D);
    for (size_t i = 0; i < here.size(); ++i) {
      const auto [p, n] = here[i];
      const Eigen::Index r = static_cast<Eigen::Index>(i);
      tgt.row(r) = W_in.col(n).transpose();
      out.row(r) = post(p, n) * W_out.row(n);
      if (inv_post.size() > 0)
        out.row(r) = (out.row(r).array() * Eigen::Map<const RowVectorXf>(w_post, D).array() * inv_post(p)).matrix();
      input.push_back(pre(p, n));
    }
    target_parts.push_back(std::move(tgt));
    out_parts.push_back(std::move(out));
  }
  f.n_active = static_cast<int>(g.active.size());
  RowMatrixXf target(f.n_active, D);
  f.out.resize(f.n_active, D);
  for (Eigen::Index r = 0; const auto& e : target_parts) {
    target.middleRows(r, e.rows()) = e;
    r += e.rows();
  }
  for (Eigen::Index r = 0; const auto& o : out_parts) {
    f.out.middleRows(r, o.rows()) = o;
    r += o.rows();
  }
  target_parts.clear();
  out_parts.clear();
  return finish(cache, f, std::move(g), target, input, options, kNeuronGraphMaxNodes);
}

bool is_neuron_node(float post, float up, bool gated) {
  if (post == 0.0f) return false;
  // Gated: hook_post = act(gate) x up, and the gate is open (act(gate) > 0) when post and up
  // have one sign.
  return gated ? (post > 0.0f) == (up > 0.0f) : post > 0.0f;
}

}  // namespace hs
