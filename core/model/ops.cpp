#include "core/model/ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace hs {

void layernorm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                       float eps) {
  const Eigen::Index S = x.rows(), D = x.cols();
  out.resize(S, D);
  ConstRowVectorRef wv(w, D), bv(b, D);
  if (scale_out) scale_out->resize(S);
  for (Eigen::Index i = 0; i < S; ++i) {
    const float mean = x.row(i).mean();
    out.row(i) = x.row(i).array() - mean;  // centred, in place: no temporary per row
    const float var = out.row(i).squaredNorm() / static_cast<float>(D);
    const float scale = std::sqrt(var + eps);
    out.row(i) = (out.row(i).array() / scale) * wv.array() + bv.array();
    if (scale_out) (*scale_out)(i) = scale;
  }
}

void linear_forward(RowMatrixXf& out, const RowMatrixXf& x, const float* W, const float* b, Eigen::Index N) {
  const Eigen::Index K = x.cols();
  ConstMatrixRef Wm(W, K, N);
  out.resize(x.rows(), N);
  out.noalias() = x * Wm;
  out.rowwise() += ConstRowVectorRef(b, N);
}

void activation_forward(RowMatrixXf& out, const RowMatrixXf& pre, Activation act) {
  out.resize(pre.rows(), pre.cols());
  auto x = pre.array();
  switch (act) {
    case Activation::GeluNew: {
      // gelu_new: the tanh approximation GPT-2 was trained with.
      constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
      out.array() = 0.5f * x * (1.0f + (k * (x + 0.044715f * x * x * x)).tanh());
      break;
    }
    case Activation::GeluErf:
      out = pre.unaryExpr([](float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); });
      break;
    case Activation::Relu:
      out.array() = x.max(0.0f);
      break;
    case Activation::Silu:
      out.array() = x / (1.0f + (-x).exp());
      break;
  }
}

void unembed_forward(RowMatrixXf& out, const RowMatrixXf& x, const float* rows, Eigen::Index V) {
  const Eigen::Index S = x.rows(), D = x.cols();
  out.resize(S, V);
  ConstMatrixRef U(rows, V, D);
  // Eigen's own threading splits this wide, short product badly (20 x 768 x 50257 ran at about a
  // third of the layer products' rate); blocks of the vocabulary, one thread each, stream the
  // unembedding once and keep each block's rows in cache.
  constexpr Eigen::Index kBlock = 1024;
  const Eigen::Index blocks = (V + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && S * V >= (1 << 16))
  for (Eigen::Index b = 0; b < blocks; ++b) {
    const Eigen::Index v0 = b * kBlock, n = std::min(kBlock, V - v0);
    out.middleCols(v0, n).noalias() = x * U.middleRows(v0, n).transpose();
  }
}

}  // namespace hs
