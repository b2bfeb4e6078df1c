#include "core/model/ops.h"

#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hs {

namespace {

// Row-wise and element-wise passes over at least this many floats share the threads (a batched
// scan's 2048 rows, a long prompt); below it a team costs more than it saves. Each row's (or
// element's) arithmetic is the same on any thread, so the bits do not depend on it.
constexpr int64_t kParallelElements = int64_t{1} << 18;

}  // namespace

void layernorm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                       float eps) {
  const Eigen::Index S = x.rows(), D = x.cols();
  out.resize(S, D);
  ConstRowVectorRef wv(w, D);
  if (scale_out) scale_out->resize(S);
#pragma omp parallel for schedule(static) if (S * D >= kParallelElements)
  for (Eigen::Index i = 0; i < S; ++i) {
    const float mean = x.row(i).mean();
    out.row(i) = x.row(i).array() - mean;  // centred, in place: no temporary per row
    const float var = out.row(i).squaredNorm() / static_cast<float>(D);
    const float scale = std::sqrt(var + eps);
    if (b) out.row(i) = (out.row(i).array() / scale) * wv.array() + ConstRowVectorRef(b, D).array();
    else out.row(i) = (out.row(i).array() / scale) * wv.array();
    if (scale_out) (*scale_out)(i) = scale;
  }
}

void rmsnorm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                     float eps) {
  const Eigen::Index S = x.rows(), D = x.cols();
  out.resize(S, D);
  ConstRowVectorRef wv(w, D);
  if (scale_out) scale_out->resize(S);
#pragma omp parallel for schedule(static) if (S * D >= kParallelElements)
  for (Eigen::Index i = 0; i < S; ++i) {
    const float scale = std::sqrt(x.row(i).squaredNorm() / static_cast<float>(D) + eps);
    if (b) out.row(i) = (x.row(i).array() / scale) * wv.array() + ConstRowVectorRef(b, D).array();
    else out.row(i) = (x.row(i).array() / scale) * wv.array();
    if (scale_out) (*scale_out)(i) = scale;
  }
}

void head_rmsnorm_forward(Eigen::Ref<RowMatrixXf, 0, Eigen::OuterStride<>> x, int n_heads, int d_head, const float* w,
                          float eps, RowMatrixXf* scales) {
  const Eigen::Index S = x.rows();
  if (scales) scales->resize(S, n_heads);
  const ConstRowVectorRef wv(w, d_head);
  RowVectorXf slice(d_head);
  for (Eigen::Index i = 0; i < S; ++i)
    for (int h = 0; h < n_heads; ++h) {
      auto dst = x.row(i).segment(Eigen::Index{h} * d_head, d_head);
      slice = dst;
      const float scale = std::sqrt(slice.squaredNorm() / static_cast<float>(d_head) + eps);
      dst = (slice.array() / scale) * wv.array();
      if (scales) (*scales)(i, h) = scale;
    }
}

void softcap_forward(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

void softcap_backward(float* d, const float* y, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) {
    const float t = y[i] / cap;
    d[i] *= (1.0f - t) * (1.0f + t);
  }
}

void head_rmsnorm_backward(RowMatrixXf& d_x, RowMatrixXf* d_scales, const RowMatrixXf& d_y, const RowMatrixXf& x,
                           int n_heads, int d_head, const float* w, float eps, const float* scale_seed) {
  // A row-major [S, n_heads * d_head] is [S * n_heads, d_head] in the same memory: one row per
  // (position, head), the layout norm_backward reads, so the maths is norm_backward's own.
  const Eigen::Index S = x.rows(), rows = S * n_heads;
  const RowMatrixXf x_rows = Eigen::Map<const RowMatrixXf>(x.data(), rows, d_head);
  RowMatrixXf d_y_rows;
  if (d_y.rows() > 0) d_y_rows = Eigen::Map<const RowMatrixXf>(d_y.data(), rows, d_head);
  RowMatrixXf d_x_rows;
  VectorXf d_scale;
  norm_backward(d_x_rows, d_scales ? &d_scale : nullptr, d_y_rows, x_rows, w, eps, NormKind::RMSNorm, scale_seed);
  d_x = Eigen::Map<const RowMatrixXf>(d_x_rows.data(), S, x.cols());
  if (d_scales) *d_scales = Eigen::Map<const RowMatrixXf>(d_scale.data(), S, n_heads);
}

void norm_backward(RowMatrixXf& d_x, VectorXf* d_scale, const RowMatrixXf& d_y, const RowMatrixXf& x, const float* w,
                   float eps, NormKind kind, const float* scale_seed) {
  const Eigen::Index S = x.rows(), D = x.cols();
  const bool has_dy = d_y.rows() > 0;
  d_x.resize(S, D);
  if (d_scale) d_scale->resize(S);
  ConstRowVectorRef wv(w, D);
  RowVectorXf xc(D);
  for (Eigen::Index i = 0; i < S; ++i) {
    // The forward's statistics, in its own operations (layernorm_forward, rmsnorm_forward).
    const float mean = kind == NormKind::LayerNorm ? x.row(i).mean() : 0.0f;
    xc = x.row(i).array() - mean;
    const float s = std::sqrt(xc.squaredNorm() / static_cast<float>(D) + eps);
    double ds = scale_seed ? scale_seed[i] : 0.0;
    if (has_dy) {
      double dot = 0;
      for (Eigen::Index j = 0; j < D; ++j) dot += double{d_y(i, j)} * wv(j) * xc(j);
      ds -= dot / (double{s} * s);
    }
    if (d_scale) (*d_scale)(i) = static_cast<float>(ds);
    const float k = static_cast<float>(ds / (double{s} * static_cast<double>(D)));
    if (has_dy) d_x.row(i) = d_y.row(i).array() * wv.array() / s + k * xc.array();
    else d_x.row(i) = k * xc;
    if (kind == NormKind::LayerNorm) d_x.row(i).array() -= d_x.row(i).mean();
  }
}

void norm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                  float eps, NormKind kind) {
  switch (kind) {
    case NormKind::LayerNorm: return layernorm_forward(out, scale_out, x, w, b, eps);
    case NormKind::RMSNorm: return rmsnorm_forward(out, scale_out, x, w, b, eps);
  }
}

void linear_forward(RowMatrixXf& out, const RowMatrixXf& x, const PackedMatrix& W, const float* b) {
  out.resize(x.rows(), W.cols());
  packed_gemm(x.rows(), x.data(), x.cols(), W, 0, W.rows(), b, out.data(), W.cols());
}

void linear_backward_input(float* dx, int64_t lddx, const float* dy, int64_t lddy, int64_t M, const PackedMatrix& W,
                           int64_t k0, int64_t k1, bool accumulate) {
  // Read straight from the forward pass's packed panels (16-bit ones stay 16-bit), each output's
  // bits independent of M, the row range and the threads (packed_gemm.h).
  packed_gemm_transposed(M, dy, lddy, W, k0, k1, dx, lddx, accumulate);
}

void linear_backward_input(RowMatrixXf& dx, const RowMatrixXf& dy, const PackedMatrix& W, int64_t k0, int64_t k1,
                           bool accumulate) {
  if (!accumulate) dx.resize(dy.rows(), k1 - k0);
  linear_backward_input(dx.data(), dx.cols(), dy.data(), dy.cols(), dy.rows(), W, k0, k1, accumulate);
}

void head_result_forward(float* out, int64_t ldo, const ConstStridedRowsRef& z, int h, int d_head, const PackedMatrix& W_O) {
  // The same kernel as W_O on the concatenated heads, over this head's rows of it: each
  // output is its own chain in k order, so a row's result is the same bits whether it was
  // computed in a run of 20 tokens, a typed extension of 1, or on request for all of them.
  const int64_t k0 = static_cast<int64_t>(h) * d_head;
  packed_gemm(z.rows(), z.data() + k0, z.outerStride(), W_O, k0, k0 + d_head, nullptr, out, ldo);
}

void activation_forward(RowMatrixXf& out, const RowMatrixXf& pre, Activation act) {
  out.resize(pre.rows(), pre.cols());
  activation_forward(out.data(), pre.data(), pre.size(), act);
}

namespace {
void activation_span(float* out_p, const float* pre_p, int64_t n, Activation act) {
  Eigen::Map<const Eigen::ArrayXf> x(pre_p, n);
  Eigen::Map<Eigen::ArrayXf> out(out_p, n);
  switch (act) {
    case Activation::GeluNew: {
      // gelu_new: the tanh approximation GPT-2 was trained with.
      constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
      out = 0.5f * x * (1.0f + (k * (x + 0.044715f * x * x * x)).tanh());
      break;
    }
    case Activation::GeluErf:
      out = x.unaryExpr([](float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); });
      break;
    case Activation::Relu:
      out = x.max(0.0f);
      break;
    case Activation::Silu:
      out = x / (1.0f + (-x).exp());
      break;
  }
}
}  // namespace

void activation_forward(float* out_p, const float* pre_p, int64_t n, Activation act) {
  // Chunks start at multiples of kChunk floats from an aligned first: Eigen then evaluates the
  // same vectors as over the whole span, and only the last n % (vector width) elements take its
  // scalar path, as they would unchunked. (From an unaligned start it peels scalars at each
  // chunk's start and end, which could change their bits: that case stays in one piece.)
  constexpr int64_t kChunk = 4096;
  if (n < kParallelElements || reinterpret_cast<uintptr_t>(out_p) % EIGEN_MAX_ALIGN_BYTES != 0)
    return activation_span(out_p, pre_p, n, act);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) activation_span(out_p + c, pre_p + c, std::min(kChunk, n - c), act);
}

void add_in_place(RowMatrixXf& y, const RowMatrixXf& x) {
  assert(x.rows() == y.rows() && x.cols() == y.cols());
  const int64_t n = y.size();
  float* out = y.data();
  const float* in = x.data();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) out[i] += in[i];
}

void activation_derivative(float* out_p, const float* x_p, int64_t n, Activation act) {
  Eigen::Map<const Eigen::ArrayXf> x(x_p, n);
  Eigen::Map<Eigen::ArrayXf> out(out_p, n);
  switch (act) {
    case Activation::GeluNew: {
      // d/dx 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3). Eigen's vectorized tanh, as the
      // forward's: a scalar std::tanh per element was a visible share of a gradient's time.
      constexpr float k = 0.7978845608028654f;
      out = (k * (x + 0.044715f * x * x * x)).tanh();  // t, then the derivative from it in place
      out = 0.5f * (1.0f + out) + (0.5f * k) * x * (1.0f - out * out) * (1.0f + 3.0f * 0.044715f * x * x);
      break;
    }
    case Activation::GeluErf:
      // Phi(x) + x phi(x)
      out = x.unaryExpr([](float v) {
        return 0.5f * (1.0f + std::erf(v * 0.70710678118654752f)) + v * 0.3989422804014327f * std::exp(-0.5f * v * v);
      });
      break;
    case Activation::Relu:
      out = (x > 0.0f).cast<float>();
      break;
    case Activation::Silu:
      out = 1.0f / (1.0f + (-x).exp());  // s, then s (1 + x (1 - s)) in place; vectorized as above
      out = out * (1.0f + x * (1.0f - out));
      break;
  }
}

void activation_backward(RowMatrixXf& d_pre, const RowMatrixXf& d_out, const RowMatrixXf& pre, Activation act) {
  d_pre.resize(pre.rows(), pre.cols());
  activation_derivative(d_pre.data(), pre.data(), pre.size(), act);
  d_pre.array() *= d_out.array();
}

void gated_activation_forward(RowMatrixXf& out, const RowMatrixXf& gate, const RowMatrixXf& up, Activation act) {
  activation_forward(out, gate, act);
  const int64_t n = out.size();
  float* o = out.data();
  const float* u = up.data();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) o[i] *= u[i];
}

void gated_activation_backward(RowMatrixXf& d_gate, RowMatrixXf& d_up, const RowMatrixXf& d_out, const RowMatrixXf& gate,
                               const RowMatrixXf& up, Activation act) {
  activation_forward(d_up, gate, act);
  d_up.array() *= d_out.array();
  activation_backward(d_gate, d_out, gate, act);
  d_gate.array() *= up.array();
}

void rotary_tables(RowMatrixXf& cos, RowMatrixXf& sin, const std::vector<double>& inv_freq, Eigen::Index p0,
                   Eigen::Index n) {
  const Eigen::Index half = static_cast<Eigen::Index>(inv_freq.size());
  cos.resize(n, half);
  sin.resize(n, half);
  for (Eigen::Index r = 0; r < n; ++r)
    for (Eigen::Index i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p0 + r) * inv_freq[static_cast<size_t>(i)];
      cos(r, i) = static_cast<float>(std::cos(angle));
      sin(r, i) = static_cast<float>(std::sin(angle));
    }
}

void rotary_forward(Eigen::Ref<RowMatrixXf> x, int n_heads, int d_head, int dim,
                    const Eigen::Ref<const RowMatrixXf>& cos, const Eigen::Ref<const RowMatrixXf>& sin) {
  const Eigen::Index half = dim / 2;
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const float* c = cos.row(r).data();
    const float* s = sin.row(r).data();
    for (int h = 0; h < n_heads; ++h) {
      float* lo = x.row(r).data() + static_cast<Eigen::Index>(h) * d_head;
      float* hi = lo + half;
      for (Eigen::Index i = 0; i < half; ++i) {
        const float a = lo[i], b = hi[i];
        lo[i] = a * c[i] - b * s[i];
        hi[i] = b * c[i] + a * s[i];
      }
    }
  }
}

void rotary_backward(Eigen::Ref<RowMatrixXf> d, int n_heads, int d_head, int dim,
                     const Eigen::Ref<const RowMatrixXf>& cos, const Eigen::Ref<const RowMatrixXf>& sin) {
  const Eigen::Index half = dim / 2;
  for (Eigen::Index r = 0; r < d.rows(); ++r) {
    const float* c = cos.row(r).data();
    const float* s = sin.row(r).data();
    for (int h = 0; h < n_heads; ++h) {
      float* lo = d.row(r).data() + static_cast<Eigen::Index>(h) * d_head;
      float* hi = lo + half;
      for (Eigen::Index i = 0; i < half; ++i) {
        const float a = lo[i], b = hi[i];
        lo[i] = a * c[i] + b * s[i];
        hi[i] = b * c[i] - a * s[i];
      }
    }
  }
}

namespace {
// The calling thread's buffer for one head's packed keys or values, at least `floats` floats.
std::vector<float>& head_panels(int64_t floats) {
  thread_local std::vector<float> panels;
  if (panels.size() < static_cast<size_t>(floats)) panels.resize(static_cast<size_t>(floats));
  return panels;
}
}  // namespace

void head_scores_forward(float* out, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t first,
                         const float* k, int64_t ldk, int64_t nk, int64_t d_head) {
  std::vector<float>& panels = head_panels(panel_floats(d_head, nk));
  pack_transposed_into(panels.data(), d_head, 0, nk, k, ldk);
  packed_gemm_lower(nq, q, ldq, panels.data(), d_head, nk, first, LowerLimit::Columns, out, ldo);
}

void head_mix_forward(float* z, int64_t ldz, const float* pattern, int64_t ldp, int64_t nq, int64_t first,
                      const float* v, int64_t ldv, int64_t nk, int64_t d_head) {
  std::vector<float>& panels = head_panels(panel_floats(nk, d_head));
  pack_rows_into(panels.data(), nk, d_head, 0, nk, v, ldv);
  packed_gemm_lower(nq, pattern, ldp, panels.data(), nk, d_head, first, LowerLimit::Depth, z, ldz);
}

void scaled_softmax_forward(float* s, int64_t n, float scale) {
  Eigen::Map<Eigen::ArrayXf> row(s, n);
  row *= scale;
  const float m = row.maxCoeff();
  row = (row - m).exp();
  row /= row.sum();
}

void softmax_backward(float* d_s, const float* p, const float* d_p, int64_t n) {
  double dot = 0;
  for (int64_t j = 0; j < n; ++j) dot += double{p[j]} * d_p[j];
  const float m = static_cast<float>(dot);
  for (int64_t j = 0; j < n; ++j) d_s[j] = p[j] * (d_p[j] - m);
}

void unembed_forward(Eigen::Ref<RowMatrixXf> out, const RowMatrixXf& x, const PackedMatrix& W_U) {
  packed_gemm(x.rows(), x.data(), x.cols(), W_U, 0, W_U.rows(), nullptr, out.data(), out.outerStride());
}

void unembed_forward(std::span<const std::pair<float*, int64_t>> out, const RowMatrixXf& x, const PackedMatrix& W_U) {
  packed_gemm(x.data(), x.cols(), W_U, 0, W_U.rows(), nullptr, out, W_U.cols());
}

}  // namespace hs
