// The slow, obviously correct forward pass: plain loops, double accumulators, no Eigen products.
// It exists so the fast path has something independent inside the project to be tested against.
#include "forward_reference.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace hs::test {
namespace {

using Rows = std::vector<std::vector<double>>;  // [rows][cols]

// LayerNorm or RMSNorm (no centring), with a bias when b is not null; the divisor of each row is
// appended to `scales`.
Rows norm(const Rows& x, const float* w, const float* b, double eps, NormKind kind,
          std::vector<double>* scales = nullptr) {
  Rows out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t D = x[i].size();
    double mean = 0, ms = 0;
    if (kind == NormKind::LayerNorm) {
      for (double v : x[i]) mean += v;
      mean /= static_cast<double>(D);
    }
    for (double v : x[i]) ms += (v - mean) * (v - mean);
    ms /= static_cast<double>(D);
    const double scale = std::sqrt(ms + eps);
    if (scales) scales->push_back(scale);
    out[i].resize(D);
    for (size_t d = 0; d < D; ++d) out[i][d] = (x[i][d] - mean) / scale * w[d] + (b ? b[d] : 0.0);
  }
  return out;
}

}  // namespace

// The angle per position of each rotated pair, from the description's parameters (written out
// here rather than taken from the core's rotary_inv_freq).
std::vector<double> inverse_frequencies(const RotaryParams& r) {
  std::vector<double> f;
  for (int i = 0; 2 * i < r.dim; ++i) {
    const double base = std::exp(-std::log(r.base) * (2.0 * i) / r.dim);
    double scaled = base;
    if (r.scaling == RopeScaling::Linear) scaled = base / r.factor;
    if (r.scaling == RopeScaling::Llama3) {
      const double period = 2 * M_PI / base;
      const double ratio = r.original_context / period;  // how many periods fit the original context
      if (ratio < r.low_freq_factor) scaled = base / r.factor;
      else if (ratio <= r.high_freq_factor) {
        const double t = (ratio - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        scaled = (1 - t) * base / r.factor + t * base;
      }
    }
    f.push_back(scaled);
  }
  return f;
}

namespace {

// Rotates the first r.dim dimensions of each head of every row (position = row index), rotate-half.
Rows rotate(const Rows& x, size_t n_heads, size_t d_head, const RotaryParams& r) {
  const std::vector<double> f = inverse_frequencies(r);
  const size_t half = f.size();
  Rows out = x;
  for (size_t p = 0; p < x.size(); ++p)
    for (size_t h = 0; h < n_heads; ++h)
      for (size_t i = 0; i < half; ++i) {
        const double c = std::cos(static_cast<double>(p) * f[i]), s = std::sin(static_cast<double>(p) * f[i]);
        const double a = x[p][h * d_head + i], b = x[p][h * d_head + half + i];
        out[p][h * d_head + i] = a * c - b * s;
        out[p][h * d_head + half + i] = b * c + a * s;
      }
  return out;
}

// y = x @ W + b with W stored [in, out] (row stride n_out); b may be null.
Rows linear(const Rows& x, const float* W, const float* b, size_t n_out) {
  Rows out(x.size(), std::vector<double>(n_out, 0.0));
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t o = 0; o < n_out; ++o) {
      double acc = b ? b[o] : 0.0;
      for (size_t k = 0; k < x[i].size(); ++k) acc += x[i][k] * W[k * n_out + o];
      out[i][o] = acc;
    }
  return out;
}

double activation(double x, Activation a) {
  switch (a) {
    case Activation::GeluNew: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::GeluErf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::Relu: return x > 0 ? x : 0.0;
    case Activation::Silu: return x / (1.0 + std::exp(-x));
  }
  return x;
}

RowMatrixXf to_matrix(const Rows& r) {
  RowMatrixXf m(static_cast<Eigen::Index>(r.size()), r.empty() ? 0 : static_cast<Eigen::Index>(r[0].size()));
  for (size_t i = 0; i < r.size(); ++i)
    for (size_t j = 0; j < r[i].size(); ++j) m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = static_cast<float>(r[i][j]);
  return m;
}

Rows add(const Rows& a, const Rows& b) {
  Rows out = a;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) out[i][j] += b[i][j];
  return out;
}

// Columns [begin, begin + n) of every row.
Rows columns(const Rows& x, size_t begin, size_t n) {
  Rows out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i].assign(x[i].begin() + static_cast<long>(begin), x[i].begin() + static_cast<long>(begin + n));
  return out;
}

// Each head's d_head slice of x [S, n_heads*d_head] through an RMSNorm of weight w (the q/k norm).
Rows head_norm(const Rows& x, size_t n_heads, size_t d_head, const float* w, double eps) {
  Rows out = x;
  for (auto& row : out)
    for (size_t h = 0; h < n_heads; ++h) {
      double ss = 0;
      for (size_t e = 0; e < d_head; ++e) ss += row[h * d_head + e] * row[h * d_head + e];
      const double scale = std::sqrt(ss / static_cast<double>(d_head) + eps);
      for (size_t e = 0; e < d_head; ++e) row[h * d_head + e] = row[h * d_head + e] / scale * w[e];
    }
  return out;
}

double softcap(double x, float cap) { return cap > 0.0f ? cap * std::tanh(x / cap) : x; }

}  // namespace

std::shared_ptr<ActivationCache> forward_reference(std::shared_ptr<const Weights> weights,
                                                   std::span<const int32_t> tokens) {
  const ModelConfig& c = weights->config();
  const Architecture& arch = c.architecture;
  if (tokens.empty() || tokens.size() > static_cast<size_t>(c.n_ctx)) throw Error("forward_reference: bad prompt length");
  for (int32_t t : tokens)
    if (t < 0 || t >= c.d_vocab) throw Error("forward_reference: token outside the vocabulary");
  auto cache = std::make_shared<ActivationCache>(weights, std::vector<int32_t>(tokens.begin(), tokens.end()));
  const size_t S = tokens.size(), D = static_cast<size_t>(c.d_model), H = static_cast<size_t>(c.n_heads),
               KV = static_cast<size_t>(c.n_key_value_heads), dh = static_cast<size_t>(c.d_head);
  const size_t group = H / KV;  // query heads per key/value head
  Rows embed(S, std::vector<double>(D)), resid;
  for (size_t i = 0; i < S; ++i)
    for (size_t d = 0; d < D; ++d)
      embed[i][d] = weights->W_E()[static_cast<size_t>(tokens[i]) * D + d] * double{weights->embedding_scale()};
  cache->embed = to_matrix(embed);
  resid = embed;
  if (arch.positions == PositionKind::LearnedAbsolute) {
    Rows pos(S, std::vector<double>(D));
    for (size_t i = 0; i < S; ++i)
      for (size_t d = 0; d < D; ++d) pos[i][d] = weights->W_pos()[i * D + d];
    cache->pos_embed = to_matrix(pos);
    resid = add(embed, pos);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& W = weights->layer(l);
    LayerActivations& a = cache->layer(l);
    a.resid_pre = to_matrix(resid);
    const size_t qkv_width = (H + 2 * KV) * dh;
    const Rows qkv = linear(norm(resid, W.norm1_w, W.norm1_b, c.norm_eps, arch.norm), weights->W_qkv(l).data(), W.b_qkv,
                            qkv_width);
    Rows q = columns(qkv, 0, H * dh), k = columns(qkv, H * dh, KV * dh);
    const Rows v = columns(qkv, (H + KV) * dh, KV * dh);
    if (arch.positions == PositionKind::Rotary) {
      a.q_pre_rotary = to_matrix(q);
      a.k_pre_rotary = to_matrix(k);
      if (arch.qk_norm) {
        q = head_norm(q, H, dh, W.q_norm_w, c.norm_eps);
        k = head_norm(k, KV, dh, W.k_norm_w, c.norm_eps);
      }
      q = rotate(q, H, dh, rotary_params(c, l));
      k = rotate(k, KV, dh, rotary_params(c, l));
    }
    Rows z(S, std::vector<double>(H * dh, 0.0));
    a.q = to_matrix(q);
    a.k = to_matrix(k);
    a.v = to_matrix(v);
    const double scale = cache->attention_scale(l);
    const int window = attention_window(c, l);
    a.pattern.extend(nullptr, 0, static_cast<Eigen::Index>(S), static_cast<int>(H));
    a.scores_hqk.assign(H * S * S, -std::numeric_limits<float>::infinity());
    for (size_t h = 0; h < H; ++h) {
      const size_t kv = h / group;
      for (size_t i = 0; i < S; ++i) {
        // Keys i - window < j <= i on a sliding layer; the others stay -inf and 0.
        const size_t first = window > 0 && i + 1 > static_cast<size_t>(window) ? i + 1 - static_cast<size_t>(window) : 0;
        std::vector<double> s(i + 1, 0.0);
        double m = -1e300;
        for (size_t j = first; j <= i; ++j) {
          double dot = 0;
          for (size_t e = 0; e < dh; ++e) dot += q[i][h * dh + e] * k[j][kv * dh + e];
          s[j] = softcap(dot * scale, arch.attn_softcap);
          a.scores_hqk[(h * S + i) * S + j] = static_cast<float>(s[j]);
          m = std::max(m, s[j]);
        }
        double total = 0;
        for (size_t j = first; j <= i; ++j) total += (s[j] = std::exp(s[j] - m));
        for (size_t j = 0; j < first; ++j) a.pattern.mutable_row(static_cast<int>(h), static_cast<Eigen::Index>(i))[j] = 0.0f;
        for (size_t j = first; j <= i; ++j) {
          const double p = s[j] / total;
          a.pattern.mutable_row(static_cast<int>(h), static_cast<Eigen::Index>(i))[j] = static_cast<float>(p);
          for (size_t e = 0; e < dh; ++e) z[i][h * dh + e] += p * v[j][kv * dh + e];
        }
      }
    }
    a.z = to_matrix(z);
    Rows attn_out = linear(z, weights->W_O_all(l).data(), W.b_O, D);
    if (arch.post_attn_norm) attn_out = norm(attn_out, W.post_attn_norm_w, nullptr, c.norm_eps, arch.norm);
    a.attn_out = to_matrix(attn_out);
    const Rows block_in = resid;
    resid = add(resid, attn_out);
    const size_t M = static_cast<size_t>(c.d_mlp);
    // Parallel blocks: the MLP reads the block's input too.
    const Rows x2 = norm(arch.parallel_blocks ? block_in : resid, W.norm2_w, W.norm2_b, c.norm_eps, arch.norm);
    Rows pre = linear(x2, weights->W_in(l).data(), W.b_in, M);
    if (arch.mlp == MlpKind::Gated) {
      // SwiGLU: the gate's activation times the up projection (which the cache calls pre_linear).
      const Rows up = pre;
      pre = linear(x2, weights->W_gate(l).data(), W.b_gate, M);
      a.mlp_pre = to_matrix(pre);
      a.mlp_pre_linear = to_matrix(up);
      for (size_t i = 0; i < pre.size(); ++i)
        for (size_t j = 0; j < M; ++j) pre[i][j] = activation(pre[i][j], c.activation) * up[i][j];
    } else {
      a.mlp_pre = to_matrix(pre);
      for (auto& row : pre)
        for (double& x : row) x = activation(x, c.activation);
    }
    Rows mlp_out = linear(pre, weights->W_out(l).data(), W.b_out, D);
    if (arch.post_mlp_norm) mlp_out = norm(mlp_out, W.post_mlp_norm_w, nullptr, c.norm_eps, arch.norm);
    a.mlp_out = to_matrix(mlp_out);
    resid = add(resid, mlp_out);
  }
  std::vector<double> scales;
  const Rows lnf = norm(resid, weights->final_norm_w(), weights->final_norm_b(), c.norm_eps, arch.norm, &scales);
  cache->ln_final_normalized = to_matrix(lnf);
  cache->ln_final_scale.resize(static_cast<Eigen::Index>(S));
  for (size_t i = 0; i < S; ++i) cache->ln_final_scale(static_cast<Eigen::Index>(i)) = static_cast<float>(scales[i]);
  RowMatrixXf logits(static_cast<Eigen::Index>(S), c.d_vocab);
  for (size_t i = 0; i < S; ++i)
    for (int t = 0; t < c.d_vocab; ++t) {
      double acc = 0;
      const float* u = weights->unembed_rows() + static_cast<size_t>(t) * D;
      for (size_t d = 0; d < D; ++d) acc += lnf[i][d] * u[d];
      logits(static_cast<Eigen::Index>(i), t) = static_cast<float>(softcap(acc, arch.final_softcap));
    }
  cache->logits = logits;
  cache->logits_finite = logits.allFinite();
  return cache;
}

}  // namespace hs::test
