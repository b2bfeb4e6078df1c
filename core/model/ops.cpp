#include "core/model/ops.h"

#include "core/model/small_gemm.h"

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
  out.resize(x.rows(), N);
  if (use_small_gemm(x.rows(), K)) {
    small_gemm(x.rows(), N, K, x.data(), K, W, N, b, out.data(), N);
    return;
  }
  // Many rows: Eigen's packed GEMM, one contiguous column range per thread. Eigen's own
  // threading synchronizes its threads inside every product and spins while it waits, which cost
  // several times the product's time whenever the other core was busy (bench_kernels, 2 threads
  // under load); single-threaded products side by side share nothing but x.
  ConstMatrixRef Wm(W, K, N);
  const int T = omp_get_max_threads();
  if (T == 1 || N < 128) {
    out.noalias() = x * Wm;
  } else {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; ++t) {
      const Eigen::Index j0 = N * t / T / 16 * 16, j1 = t + 1 == T ? N : N * (t + 1) / T / 16 * 16;
      out.middleCols(j0, j1 - j0).noalias() = x * Wm.middleCols(j0, j1 - j0);
    }
  }
  out.rowwise() += ConstRowVectorRef(b, N);
}

void head_result_forward(float* out, int64_t ldo, const RowMatrixXf& z, int h, int d_head, const float* W_O_h,
                         Eigen::Index d_model) {
  // Always small_gemm, whatever the row count: a row's result is then the same bits whether it
  // was computed in a run of 20 tokens, a typed extension of 1, or on request for all of them.
  small_gemm(z.rows(), d_model, d_head, z.data() + static_cast<int64_t>(h) * d_head, z.cols(), W_O_h, d_model,
             nullptr, out, ldo);
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

void unembed_forward(Eigen::Ref<RowMatrixXf> out, const RowMatrixXf& x, const float* rows, Eigen::Index V) {
  const Eigen::Index S = x.rows(), D = x.cols();
  if (S <= 64) {  // measured up to 64 rows (hs_bench_row at 20 tokens); longer prompts keep Eigen
    // Eigen packed every block of the unembedding before using it: a fifth of a 20-token
    // GPT-2-small pass went to gemm_pack_lhs here (perf). small_gemm_bt reads the rows in place.
    small_gemm_bt(S, V, D, x.data(), D, rows, D, out.data(), out.outerStride());
    return;
  }
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
