// The layer kernels of the forward pass, one function per layer kind: outputs first, then
// inputs, then sizes. Shared by the forward pass and by the cache's derived activations, so a
// value computed on request is bit-identical to one computed during the run.
//
// Each kernel's backward (the gradient with respect to its inputs, not its weights) sits beside
// it, llm.c's shape: given the gradient of the output (d_out) and what the forward read, the
// gradient of the input. The backward pass (backward.h) is built from these.
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
// The backward of both norms, recomputing the row's mean and scale from x as the forward did.
// With y = xc / s * w + b, xc = x - mean(x) (LayerNorm) or x (RMSNorm), s = sqrt(mean(xc^2) + eps):
//   d_s  = -sum_j d_y[j] w[j] xc[j] / s^2 (+ scale_seed[i]: a gradient arriving at hook_scale)
//   d_xc = d_y w / s + d_s xc / (D s);   d_x = d_xc (RMSNorm), d_xc - mean(d_xc) (LayerNorm).
// d_x [S, D] is written; d_scale [S], when not null, receives d_s: the total derivative at the
// norm's hook_scale (TransformerLens's LayerNorm/RMSNorm hook_scale). d_y may be empty (0 rows):
// only the scale's seed flows. scale_seed may be nullptr.
void norm_backward(RowMatrixXf& d_x, VectorXf* d_scale, const RowMatrixXf& d_y, const RowMatrixXf& x, const float* w,
                   float eps, NormKind kind, const float* scale_seed);
// The architecture's norm: layernorm_forward or rmsnorm_forward by `kind`. Analyses that apply a
// model's norm (the logit lens) call this, so they follow the description rather than assume
// LayerNorm.
void norm_forward(RowMatrixXf& out, VectorXf* scale_out, const RowMatrixXf& x, const float* w, const float* b,
                  float eps, NormKind kind);
// An RMSNorm of each head: every d_head slice of the first n_heads * d_head columns of x becomes
// slice / sqrt(mean(slice^2) + eps) * w (w [d_head], shared by the heads), in place; scales
// [S, n_heads] receives the divisors when not null. Each slice is computed in an aligned copy,
// so the same values come out whatever the columns' stride (the forward pass normalizes a block
// of its fused QKV, the cache a matrix of its own: ActivationCache::qk_norm).
void head_rmsnorm_forward(Eigen::Ref<RowMatrixXf, 0, Eigen::OuterStride<>> x, int n_heads, int d_head, const float* w,
                          float eps, RowMatrixXf* scales);
// Its backward: norm_backward's RMSNorm on every d_head slice, x [S, n_heads * d_head] being the
// norm's input (hook_q or hook_k) and d_y the gradient at its output (may be empty: only the
// scales' seed flows). d_x [S, n_heads * d_head] is written; d_scales [S, n_heads], when not null,
// receives the gradient at hook_scale; scale_seed [S, n_heads] (row-major) may be nullptr.
void head_rmsnorm_backward(RowMatrixXf& d_x, RowMatrixXf* d_scales, const RowMatrixXf& d_y, const RowMatrixXf& x,
                           int n_heads, int d_head, const float* w, float eps, const float* scale_seed);
// Soft-capping in place: x = cap * tanh(x / cap) over n floats (Gemma2's attention scores and
// final logits: divide, tanh, multiply, in that order). cap > 0.
void softcap_forward(float* x, int64_t n, float cap);
// Its backward from the capped values y = cap * tanh(x / cap), in place over n floats:
// d *= 1 - tanh^2 = (1 - y/cap)(1 + y/cap). The factored form keeps the relative precision of a
// value near the cap (1 - t^2 in one step loses it); what the float y itself lost stays lost.
void softcap_backward(float* d, const float* y, int64_t n, float cap);
// out[S, N] = x[S, K] @ W[K, N] + b[N] (b may be nullptr); W is [in, out], packed.
void linear_forward(RowMatrixXf& out, const RowMatrixXf& x, const PackedMatrix& W, const float* b);
// The backward of a product with a packed weight: dx[M, k1 - k0] (+)= dy[M, W.cols()] @ W[k0:k1, :]^T
// (accumulate: add to dx rather than overwrite). Strides in floats. Every dX = dY W^T of the
// backward pass goes through this one function, so its body can be swapped for a kernel that
// reads the packed panels directly (16-bit weights stay 16-bit either way: a panel widens
// exactly to float32).
void linear_backward_input(float* dx, int64_t lddx, const float* dy, int64_t lddy, int64_t M, const PackedMatrix& W,
                           int64_t k0, int64_t k1, bool accumulate);
// dx [dy.rows(), k1 - k0] = (or +=) dy @ W[k0:k1, :]^T; dx is resized when not accumulating.
void linear_backward_input(RowMatrixXf& dx, const RowMatrixXf& dy, const PackedMatrix& W, int64_t k0, int64_t k1,
                           bool accumulate = false);
// The result of head h: rows of out (stride ldo floats) = z[:, h*d_head : (h+1)*d_head] @ W_O[h],
// W_O[h] being rows h*d_head .. (h+1)*d_head - 1 of the packed attention output weight. No bias:
// b_O belongs to no head.
void head_result_forward(float* out, int64_t ldo, const ConstStridedRowsRef& z, int h, int d_head, const PackedMatrix& W_O);
// out = act(pre), elementwise.
void activation_forward(RowMatrixXf& out, const RowMatrixXf& pre, Activation act);
// d_pre = d_out * act'(pre), elementwise (relu: 0 at 0, as PyTorch).
void activation_backward(RowMatrixXf& d_pre, const RowMatrixXf& d_out, const RowMatrixXf& pre, Activation act);
// The derivative act'(x) over n floats (out may be x).
void activation_derivative(float* out, const float* x, int64_t n, Activation act);
// The same over n floats of any buffers (out may be pre): for callers that keep their own
// storage, such as the patching sweep's row blocks. The same bits as the matrix form.
void activation_forward(float* out, const float* pre, int64_t n, Activation act);
// y += x, elementwise (the residual stream's adds), on the threads when large.
void add_in_place(RowMatrixXf& y, const RowMatrixXf& x);
// out = act(gate) * up, elementwise: a gated MLP's hidden activation (SwiGLU with silu). The
// cache derives mlp.hook_post of a gated model with this very function.
void gated_activation_forward(RowMatrixXf& out, const RowMatrixXf& gate, const RowMatrixXf& up, Activation act);
// Its backward: d_gate = d_out * up * act'(gate), d_up = d_out * act(gate).
void gated_activation_backward(RowMatrixXf& d_gate, RowMatrixXf& d_up, const RowMatrixXf& d_out, const RowMatrixXf& gate,
                               const RowMatrixXf& up, Activation act);
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
// The backward of rotary_forward, in place: the inverse (transposed) rotation of each pair,
//   d_x_i = d_i cos + d_{i+dim/2} sin,   d_x_{i+dim/2} = d_{i+dim/2} cos - d_i sin.
void rotary_backward(Eigen::Ref<RowMatrixXf> d, int n_heads, int d_head, int dim,
                     const Eigen::Ref<const RowMatrixXf>& cos, const Eigen::Ref<const RowMatrixXf>& sin);
// A head's scores, out[r, j] = q[r] . k[j] for query r at position first + r and keys j <= first + r
// (packed_gemm_lower over the causal half; a few entries past the diagonal are written too, and
// are the caller's to ignore). q [nq, d_head] and k [nk, d_head] with row strides ldq and ldk,
// out [nq, nk] with stride ldo. The forward pass's attention computes its scores this way (its
// keys come a position block at a time), so these are the same bits.
void head_scores_forward(float* out, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t first,
                         const float* k, int64_t ldk, int64_t nk, int64_t d_head);
// A head's mix, z[r] = sum over keys j <= first + r of pattern[r, j] v[j]: pattern [nq, nk] (stride
// ldp) must be zero past each row's last key; v [nk, d_head] (stride ldv); z [nq, d_head] (stride
// ldz), written over. The same operations as the forward pass's attention.
void head_mix_forward(float* z, int64_t ldz, const float* pattern, int64_t ldp, int64_t nq, int64_t first,
                      const float* v, int64_t ldv, int64_t nk, int64_t d_head);
// One attention row in place: s[j] = softmax(scale * s)[j] for j < n (the largest subtracted
// first), the causal row of keys 0..n-1. forward.cpp's attention computes the same, inline.
void scaled_softmax_forward(float* s, int64_t n, float scale);
// The backward of one softmax row: d_s[j] = p[j] (d_p[j] - sum_k p[k] d_p[k]) for j < n.
void softmax_backward(float* d_s, const float* p, const float* d_p, int64_t n);
// out[S, V] = x[S, D] @ W_U[D, V] (packed), split over vocabulary panels on all threads.
// out must already be [S, V] (a block of the cache's logits, written in place).
void unembed_forward(Eigen::Ref<RowMatrixXf> out, const RowMatrixXf& x, const PackedMatrix& W_U);
// The same, out's rows given as segments (pointer, rows) of a position-blocked activation.
void unembed_forward(std::span<const std::pair<float*, int64_t>> out, const RowMatrixXf& x, const PackedMatrix& W_U);

}  // namespace hs
