// The reference backward (backward_reference.h): the model on a scalar tape, in double.
#include "backward_reference.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "core/model/config.h"
#include "core/model/hooks.h"
#include "forward_reference.h"

namespace hs::test {
namespace {

// A node is a value and its inputs, each with the local derivative d node / d input.
class Tape {
 public:
  int constant(double v) { return add(v, {}); }
  int add(double v, const std::vector<std::pair<int, double>>& inputs) {
    value_.push_back(v);
    begin_.push_back(inputs_.size());
    inputs_.insert(inputs_.end(), inputs.begin(), inputs.end());
    return static_cast<int>(value_.size()) - 1;
  }
  double value(int n) const { return value_[static_cast<size_t>(n)]; }
  // Reverse sweep from `out`: adjoints, and whether a path from each node reaches `out`.
  void backward(int out) {
    const size_t N = value_.size();
    adjoint_.assign(N, 0.0);
    reached_.assign(N, 0);
    adjoint_[static_cast<size_t>(out)] = 1.0;
    reached_[static_cast<size_t>(out)] = 1;
    for (size_t n = N; n-- > 0;) {
      if (!reached_[n]) continue;
      const size_t end = n + 1 < N ? begin_[n + 1] : inputs_.size();
      for (size_t i = begin_[n]; i < end; ++i) {
        const auto [in, d] = inputs_[i];
        adjoint_[static_cast<size_t>(in)] += d * adjoint_[n];
        reached_[static_cast<size_t>(in)] = 1;
      }
    }
  }
  double adjoint(int n) const { return adjoint_[static_cast<size_t>(n)]; }
  bool reached(int n) const { return reached_[static_cast<size_t>(n)] != 0; }

 private:
  std::vector<double> value_;
  std::vector<size_t> begin_;
  std::vector<std::pair<int, double>> inputs_;
  std::vector<double> adjoint_;
  std::vector<char> reached_;
};

using Rows = std::vector<std::vector<int>>;  // node ids [rows][cols]

struct Model {
  Tape t;
  // Node ids of every key, in ActivationCache::get's layout (-1: a masked score, no node).
  std::map<std::string, std::vector<int>> keys;

  void keep(const std::string& key, const Rows& r) {
    std::vector<int>& k = keys[key];
    for (const auto& row : r) k.insert(k.end(), row.begin(), row.end());
  }
  double v(int n) const { return t.value(n); }

  Rows identity(const Rows& x) {
    Rows out(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      for (int n : x[i]) out[i].push_back(t.add(v(n), {{n, 1.0}}));
    return out;
  }
  Rows sum(const Rows& a, const Rows& b) {
    Rows out(a.size());
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t j = 0; j < a[i].size(); ++j) out[i].push_back(t.add(v(a[i][j]) + v(b[i][j]), {{a[i][j], 1.0}, {b[i][j], 1.0}}));
    return out;
  }
  // x @ W + b, W stored [in, out] with row stride n_out (b may be null).
  Rows linear(const Rows& x, const float* W, const float* b, size_t n_out) {
    Rows out(x.size());
    std::vector<std::pair<int, double>> in;
    for (size_t i = 0; i < x.size(); ++i)
      for (size_t o = 0; o < n_out; ++o) {
        in.clear();
        double acc = b ? b[o] : 0.0;
        for (size_t k = 0; k < x[i].size(); ++k) {
          const double w = W[k * n_out + o];
          acc += v(x[i][k]) * w;
          in.emplace_back(x[i][k], w);
        }
        out[i].push_back(t.add(acc, in));
      }
    return out;
  }
  // The norm from its definition: (LayerNorm: centre,) the mean square, its root, the division;
  // the scale nodes go to `scales` ([rows][1]).
  Rows norm(const Rows& x, const float* w, const float* b, double eps, NormKind kind, Rows* scales) {
    Rows out(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t D = x[i].size();
      std::vector<int> xc = x[i];
      if (kind == NormKind::LayerNorm) {
        double m = 0;
        std::vector<std::pair<int, double>> in;
        for (int n : x[i]) {
          m += v(n);
          in.emplace_back(n, 1.0 / static_cast<double>(D));
        }
        const int mean = t.add(m / static_cast<double>(D), in);
        for (size_t d = 0; d < D; ++d) xc[d] = t.add(v(x[i][d]) - v(mean), {{x[i][d], 1.0}, {mean, -1.0}});
      }
      double ms = 0;
      std::vector<std::pair<int, double>> in;
      for (int n : xc) {
        ms += v(n) * v(n);
        in.emplace_back(n, 2.0 * v(n) / static_cast<double>(D));
      }
      const int var = t.add(ms / static_cast<double>(D), in);
      const double sv = std::sqrt(v(var) + eps);
      const int s = t.add(sv, {{var, 0.5 / sv}});
      if (scales) scales->push_back({s});
      for (size_t d = 0; d < D; ++d) {
        const double xv = v(xc[d]);
        out[i].push_back(t.add(xv / sv * w[d] + (b ? b[d] : 0.0), {{xc[d], w[d] / sv}, {s, -xv * w[d] / (sv * sv)}}));
      }
    }
    return out;
  }
  int activation(int x, Activation a) {
    const double xv = v(x);
    switch (a) {
      case Activation::GeluNew: {
        const double k = std::sqrt(2.0 / M_PI);
        const int x3 = t.add(xv * xv * xv, {{x, 3.0 * xv * xv}});
        const int u = t.add(k * (xv + 0.044715 * v(x3)), {{x, k}, {x3, k * 0.044715}});
        const double th = std::tanh(v(u));
        const int tn = t.add(th, {{u, 1.0 - th * th}});
        return t.add(0.5 * xv * (1.0 + th), {{x, 0.5 * (1.0 + th)}, {tn, 0.5 * xv}});
      }
      case Activation::GeluErf: {
        const int e = t.add(std::erf(xv / std::sqrt(2.0)), {{x, std::sqrt(2.0 / M_PI) * std::exp(-xv * xv / 2.0)}});
        return t.add(0.5 * xv * (1.0 + v(e)), {{x, 0.5 * (1.0 + v(e))}, {e, 0.5 * xv}});
      }
      case Activation::Relu: return t.add(xv > 0 ? xv : 0.0, {{x, xv > 0 ? 1.0 : 0.0}});
      case Activation::Silu: {
        const int ex = t.add(std::exp(-xv), {{x, -std::exp(-xv)}});
        const double den = 1.0 + v(ex);
        const int sg = t.add(1.0 / den, {{ex, -1.0 / (den * den)}});
        return t.add(xv * v(sg), {{x, v(sg)}, {sg, xv}});
      }
    }
    throw std::logic_error("activation");
  }
  int product(int a, int b) { return t.add(v(a) * v(b), {{a, v(b)}, {b, v(a)}}); }
  // log(sum(exp(row)))
  int log_sum_exp(const std::vector<int>& row) {
    double m = -1e300;
    for (int n : row) m = std::max(m, v(n));
    std::vector<std::pair<int, double>> in;
    double total = 0;
    for (int n : row) {
      const int e = t.add(std::exp(v(n) - m), {{n, std::exp(v(n) - m)}});
      total += v(e);
      in.emplace_back(e, 1.0);
    }
    const int T = t.add(total, in);
    return t.add(std::log(total) + m, {{T, 1.0 / total}});
  }
};

}  // namespace

ReferenceGradients backward_reference(std::shared_ptr<const Weights> weights, std::span<const int32_t> tokens,
                                      const Metric& metric) {
  const ModelConfig& c = weights->config();
  const Architecture& arch = c.architecture;
  const size_t S = tokens.size(), D = static_cast<size_t>(c.d_model), H = static_cast<size_t>(c.n_heads),
               KV = static_cast<size_t>(c.n_key_value_heads), dh = static_cast<size_t>(c.d_head),
               M = static_cast<size_t>(c.d_mlp), V = static_cast<size_t>(c.d_vocab);
  const size_t group = H / KV;
  Model m;
  Tape& t = m.t;
  auto key = [&](HookPoint h, int l) { return hook_key(h, l); };
  auto leaves = [&](const float* rows, size_t n, size_t width, const int32_t* index) {
    Rows out(n);
    for (size_t i = 0; i < n; ++i)
      for (size_t d = 0; d < width; ++d)
        out[i].push_back(t.constant(rows[(index ? static_cast<size_t>(index[i]) : i) * width + d]));
    return out;
  };
  Rows resid = leaves(weights->W_E(), S, D, tokens.data());
  m.keep(key(HookPoint::Embed, -1), resid);
  if (arch.positions == PositionKind::LearnedAbsolute) {
    const Rows pos = leaves(weights->W_pos(), S, D, nullptr);
    m.keep(key(HookPoint::PosEmbed, -1), pos);
    resid = m.sum(resid, pos);
  }
  const std::vector<double> inv_freq =
      arch.positions == PositionKind::Rotary ? inverse_frequencies(arch.rotary) : std::vector<double>();
  auto rotate = [&](const Rows& x, size_t n_heads) {
    const size_t half = inv_freq.size();
    Rows out = x;
    for (size_t p = 0; p < S; ++p)
      for (size_t h = 0; h < n_heads; ++h)
        for (size_t i = 0; i < half; ++i) {
          const double co = std::cos(static_cast<double>(p) * inv_freq[i]), si = std::sin(static_cast<double>(p) * inv_freq[i]);
          const int a = x[p][h * dh + i], b = x[p][h * dh + half + i];
          out[p][h * dh + i] = t.add(m.v(a) * co - m.v(b) * si, {{a, co}, {b, -si}});
          out[p][h * dh + half + i] = t.add(m.v(b) * co + m.v(a) * si, {{b, co}, {a, si}});
        }
    // Dimensions past the rotated ones pass unchanged, but hook_rot_q is its own hook point.
    for (size_t p = 0; p < S; ++p)
      for (size_t h = 0; h < n_heads; ++h)
        for (size_t i = 2 * half; i < dh; ++i) out[p][h * dh + i] = t.add(m.v(x[p][h * dh + i]), {{x[p][h * dh + i], 1.0}});
    return out;
  };
  auto columns = [](const Rows& x, size_t begin, size_t n) {
    Rows out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i].assign(x[i].begin() + static_cast<long>(begin), x[i].begin() + static_cast<long>(begin + n));
    return out;
  };
  const bool rms = arch.norm == NormKind::RMSNorm;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& W = weights->layer(l);
    resid = m.identity(resid);  // hook_resid_pre: its own point after the previous hook_resid_post
    m.keep(key(HookPoint::ResidPre, l), resid);
    Rows scale1;
    const Rows ln1 = m.norm(resid, W.norm1_w, W.norm1_b, c.norm_eps, arch.norm, &scale1);
    if (rms) {
      m.keep(key(HookPoint::Ln1Scale, l), scale1);
      m.keep(key(HookPoint::Ln1Normalized, l), ln1);
    }
    const Rows qkv = m.linear(ln1, weights->W_qkv(l).data(), W.b_qkv, (H + 2 * KV) * dh);
    Rows q = columns(qkv, 0, H * dh), k = columns(qkv, H * dh, KV * dh);
    const Rows vv = columns(qkv, (H + KV) * dh, KV * dh);
    m.keep(key(HookPoint::Q, l), q);
    m.keep(key(HookPoint::K, l), k);
    m.keep(key(HookPoint::V, l), vv);
    if (arch.positions == PositionKind::Rotary) {
      q = rotate(q, H);
      k = rotate(k, KV);
      m.keep(key(HookPoint::RotQ, l), q);
      m.keep(key(HookPoint::RotK, l), k);
    }
    const double scale = (c.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(dh)) : 1.0) /
                         (c.scale_attn_by_inverse_layer_idx ? l + 1.0 : 1.0);
    std::vector<int> scores_key(H * S * S, -1), pattern_key(H * S * S);
    Rows z(S, std::vector<int>(H * dh));
    for (size_t h = 0; h < H; ++h) {
      const size_t kv = h / group;
      for (size_t i = 0; i < S; ++i) {
        std::vector<int> s(i + 1);
        for (size_t j = 0; j <= i; ++j) {
          std::vector<std::pair<int, double>> in;
          double dot = 0;
          for (size_t e = 0; e < dh; ++e) {
            const int a = q[i][h * dh + e], b = k[j][kv * dh + e];
            dot += m.v(a) * m.v(b);
            in.emplace_back(a, m.v(b) * scale);
            in.emplace_back(b, m.v(a) * scale);
          }
          s[j] = scores_key[(h * S + i) * S + j] = t.add(dot * scale, in);
        }
        // softmax over keys 0..i: e_j = exp(s_j - max) (the max a constant: softmax ignores it)
        double mx = -1e300;
        for (int n : s) mx = std::max(mx, m.v(n));
        std::vector<int> e(i + 1);
        std::vector<std::pair<int, double>> in;
        double total = 0;
        for (size_t j = 0; j <= i; ++j) {
          const double ev = std::exp(m.v(s[j]) - mx);
          e[j] = t.add(ev, {{s[j], ev}});
          total += ev;
          in.emplace_back(e[j], 1.0);
        }
        const int T = t.add(total, in);
        for (size_t j = 0; j < S; ++j) {
          // Above the diagonal the pattern is a constant 0 that z still multiplies (z = pattern @ v).
          pattern_key[(h * S + i) * S + j] =
              j <= i ? t.add(m.v(e[j]) / total, {{e[j], 1.0 / total}, {T, -m.v(e[j]) / (total * total)}}) : t.constant(0.0);
        }
        for (size_t d = 0; d < dh; ++d) {
          std::vector<std::pair<int, double>> zin;
          double acc = 0;
          for (size_t j = 0; j < S; ++j) {
            const int p = pattern_key[(h * S + i) * S + j], x = vv[j][kv * dh + d];
            acc += m.v(p) * m.v(x);
            zin.emplace_back(p, m.v(x));
            zin.emplace_back(x, m.v(p));
          }
          z[i][h * dh + d] = t.add(acc, zin);
        }
      }
    }
    m.keys[key(HookPoint::AttnScores, l)] = scores_key;
    m.keys[key(HookPoint::Pattern, l)] = pattern_key;
    m.keep(key(HookPoint::Z, l), z);
    // Each head's result z_h @ W_O[h], and attn_out = their sum + b_O (TransformerLens with
    // use_attn_result).
    const float* WO = weights->W_O_all(l).data();
    Rows result(S), attn_out(S);
    for (size_t i = 0; i < S; ++i) {
      for (size_t h = 0; h < H; ++h)
        for (size_t d = 0; d < D; ++d) {
          std::vector<std::pair<int, double>> in;
          double acc = 0;
          for (size_t e = 0; e < dh; ++e) {
            const double w = WO[(h * dh + e) * D + d];
            acc += m.v(z[i][h * dh + e]) * w;
            in.emplace_back(z[i][h * dh + e], w);
          }
          result[i].push_back(t.add(acc, in));
        }
      for (size_t d = 0; d < D; ++d) {
        std::vector<std::pair<int, double>> in;
        double acc = W.b_O ? W.b_O[d] : 0.0;
        for (size_t h = 0; h < H; ++h) {
          acc += m.v(result[i][h * D + d]);
          in.emplace_back(result[i][h * D + d], 1.0);
        }
        attn_out[i].push_back(t.add(acc, in));
      }
    }
    m.keep(key(HookPoint::Result, l), result);
    m.keep(key(HookPoint::AttnOut, l), attn_out);
    const Rows block_in = resid;
    const Rows mid = m.sum(resid, attn_out);
    m.keep(key(HookPoint::ResidMid, l), mid);
    Rows scale2;
    const Rows ln2 = m.norm(arch.parallel_blocks ? block_in : mid, W.norm2_w, W.norm2_b, c.norm_eps, arch.norm, &scale2);
    if (rms) {
      m.keep(key(HookPoint::Ln2Scale, l), scale2);
      m.keep(key(HookPoint::Ln2Normalized, l), ln2);
    }
    Rows post(S);
    if (arch.mlp == MlpKind::Gated) {
      const Rows up = m.linear(ln2, weights->W_in(l).data(), W.b_in, M);
      const Rows gate = m.linear(ln2, weights->W_gate(l).data(), W.b_gate, M);
      m.keep(key(HookPoint::MlpPre, l), gate);
      m.keep(key(HookPoint::MlpPreLinear, l), up);
      for (size_t i = 0; i < S; ++i)
        for (size_t j = 0; j < M; ++j) post[i].push_back(m.product(m.activation(gate[i][j], c.activation), up[i][j]));
    } else {
      const Rows pre = m.linear(ln2, weights->W_in(l).data(), W.b_in, M);
      m.keep(key(HookPoint::MlpPre, l), pre);
      for (size_t i = 0; i < S; ++i)
        for (size_t j = 0; j < M; ++j) post[i].push_back(m.activation(pre[i][j], c.activation));
    }
    m.keep(key(HookPoint::MlpPost, l), post);
    const Rows mlp_out = m.linear(post, weights->W_out(l).data(), W.b_out, D);
    m.keep(key(HookPoint::MlpOut, l), mlp_out);
    resid = m.sum(mid, mlp_out);
    m.keep(key(HookPoint::ResidPost, l), resid);
  }
  Rows scale_f;
  const Rows lnf = m.norm(resid, weights->final_norm_w(), weights->final_norm_b(), c.norm_eps, arch.norm, &scale_f);
  if (rms) m.keep(key(HookPoint::LnFinalScale, -1), scale_f);
  m.keep(key(HookPoint::LnFinalNormalized, -1), lnf);
  Rows logits(S);  // lnf @ W_U, W_U read as the unembedding's rows [d_vocab, d_model]
  for (size_t i = 0; i < S; ++i)
    for (size_t tok = 0; tok < V; ++tok) {
      const float* u = weights->unembed_rows() + tok * D;
      std::vector<std::pair<int, double>> in;
      double acc = 0;
      for (size_t d = 0; d < D; ++d) {
        acc += m.v(lnf[i][d]) * u[d];
        in.emplace_back(lnf[i][d], u[d]);
      }
      logits[i].push_back(t.add(acc, in));
    }
  m.keep(key(HookPoint::Logits, -1), logits);

  // The metric, from its definition.
  const int p = metric_position(metric, static_cast<int>(S));
  int out = -1;
  switch (metric.kind) {
    case MetricKind::LogitDiff: {
      const int a = logits[static_cast<size_t>(p)][static_cast<size_t>(metric.token)];
      const int b = logits[static_cast<size_t>(p)][static_cast<size_t>(metric.wrong)];
      out = t.add(m.v(a) - m.v(b), {{a, 1.0}, {b, -1.0}});
      break;
    }
    case MetricKind::Logit: {
      const int a = logits[static_cast<size_t>(p)][static_cast<size_t>(metric.token)];
      out = t.add(m.v(a), {{a, 1.0}});
      break;
    }
    case MetricKind::LogProb: {
      const int a = logits[static_cast<size_t>(p)][static_cast<size_t>(metric.token)];
      const int lse = m.log_sum_exp(logits[static_cast<size_t>(p)]);
      out = t.add(m.v(a) - m.v(lse), {{a, 1.0}, {lse, -1.0}});
      break;
    }
    case MetricKind::Loss: {
      std::vector<std::pair<int, double>> in;
      double total = 0;
      const double w = 1.0 / static_cast<double>(S - 1);
      for (size_t i = 0; i + 1 < S; ++i) {
        const int lse = m.log_sum_exp(logits[i]);
        const int a = logits[i][static_cast<size_t>(tokens[i + 1])];
        total += m.v(lse) - m.v(a);
        in.emplace_back(lse, w);
        in.emplace_back(a, -w);
      }
      out = t.add(total * w, in);
      break;
    }
    case MetricKind::Dot: {
      const std::vector<int>& act = m.keys.at(hook_key(metric.hook, metric.layer));
      const bool head_first = metric.hook == HookPoint::Pattern || metric.hook == HookPoint::AttnScores;
      const int64_t unit_w = metric_unit_width(c, metric.hook, static_cast<int>(S));
      const int64_t row_w = head_first ? 0 : hook_row_width(c, metric.hook, static_cast<int64_t>(S));
      const int64_t first = metric.unit >= 0 ? metric.unit * unit_w : 0;
      std::vector<std::pair<int, double>> in;
      double total = 0;
      for (size_t e = 0; e < metric.vector.size(); ++e) {
        const int64_t f = first + static_cast<int64_t>(e);
        int node;
        if (head_first) {
          const int64_t h = f / static_cast<int64_t>(S), kpos = f % static_cast<int64_t>(S);
          node = act[static_cast<size_t>((h * static_cast<int64_t>(S) + p) * static_cast<int64_t>(S) + kpos)];
          if (node < 0) continue;  // a masked score
        } else {
          node = act[static_cast<size_t>(p * row_w + f)];
        }
        total += m.v(node) * metric.vector[e];
        in.emplace_back(node, metric.vector[e]);
      }
      out = t.add(total, in);
      break;
    }
  }
  t.backward(out);
  ReferenceGradients r;
  r.metric = t.value(out);
  for (const auto& [name, nodes] : m.keys) {
    bool any = false;
    std::vector<double> g(nodes.size(), 0.0);
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i] >= 0 && t.reached(nodes[i])) {
        any = true;
        g[i] = t.adjoint(nodes[i]);
      }
    if (any) r.grads[name] = std::move(g);
  }
  return r;
}

}  // namespace hs::test
