// The layer kernels of the forward pass, one function per layer kind: outputs first, then
// inputs, then sizes. Shared by the forward pass and by the cache's derived activations, so a
// value computed on request is bit-identical to one computed during the run.
#pragma once

#include <vector>

#include "core/model/config.h"
#include "core/model/packed_gemm.h"
#include "core/tensor/eigen.h"

namespace hs {

// out[S, D] = (x - mean) / sqrt(var + eps) * w + b, row by row (b may be nullptr: no bias);
// scale_out[S] = sqrt(var + eps).
void layernorm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                       float eps);
// out[S, D] = x / sqrt(mean(x^2) + eps) * w + b, row by row (b may be nullptr: no bias);
// scale_out[S] = sqrt(mean(x^2) + eps). No centring.
void rmsnorm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                     float eps);
// The architecture's norm: layernorm_forward or rmsnorm_forward by `kind`. Analyses that apply a
// model's norm (the logit lens) call this, so they follow the description rather than assume
// LayerNorm.
void norm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                  float eps, NormKind kind);
// out[S, N] = x[S, K] @ W[K, N] + b[N] (b may be nullptr); W is [in, out], packed.
void linear_forward(RowMatrixXf& out, const RowMatrixXf& x, const PackedMatrix& W, const float* b);
// The result of head h: rows of out (stride ldo floats) = z[:, h*d_head : (h+1)*d_head] @ W_O[h],
// W_O[h] being rows h*d_head .. (h+1)*d_head - 1 of the packed attention output weight. No bias:
// b_O belongs to no head.
void head_result_forward(float* out, int64_t ldo, const ConstStridedRowsRef& z, int h, int d_head, const PackedMatrix& W_O);
// out = act(pre), elementwise.
void activation_forward(RowMatrixXf& out, const RowMatrixXf& pre, Activation act);
// The same over n floats of any buffers (out may be pre): for callers that keep their own
// storage, such as the patching sweep's row blocks. The same bits as the matrix form.
void activation_forward(float* out, const float* pre, int64_t n, Activation act);
// out = act(gate) * up, elementwise: a gated MLP's hidden activation (SwiGLU with silu). The
// cache derives mlp.hook_post of a gated model with this very function.
void gated_activation_forward(RowMatrixXf& out, const RowMatrixXf& gate, const RowMatrixXf& up, Activation act);
// The rotary tables of positions [p0, p0 + n): cos[n, dim/2], sin[n, dim/2] of p * inv_freq[i]
// (rotary_inv_freq), the angles taken in double so that long positions keep their precision.
void rotary_tables(RowMatrixXf& cos, RowMatrixXf& sin, const std::vector<double>& inv_freq, Eigen::Index p0,
                   Eigen::Index n);
// Rotates, in place, the first `dim` dimensions of each of the n_heads heads (d_head wide) in every
// row of x [rows, n_heads*d_head], row r by the angles of table row r, in Hugging Face's
// rotate-half layout: dimension i < dim/2 pairs with i + dim/2,
//   x_i' = x_i cos - x_{i+dim/2} sin,   x_{i+dim/2}' = x_{i+dim/2} cos + x_i sin.
// Dimensions from `dim` to d_head (partial rotary) pass unchanged.
void rotary_forward(Eigen::Ref<RowMatrixXf> x, int n_heads, int d_head, int dim,
                    const Eigen::Ref<const RowMatrixXf>& cos, const Eigen::Ref<const RowMatrixXf>& sin);
// out[S, V] = x[S, D] @ W_U[D, V] (packed), split over vocabulary panels on all threads.
// out must already be [S, V] (a block of the cache's logits, written in place).
void unembed_forward(Eigen::Ref<RowMatrixXf> out, const RowMatrixXf& x, const PackedMatrix& W_U);
// The same, out's rows given as segments (pointer, rows) of a position-blocked activation.
void unembed_forward(std::span<const std::pair<float*, int64_t>> out, const RowMatrixXf& x, const PackedMatrix& W_U);

}  // namespace hs
