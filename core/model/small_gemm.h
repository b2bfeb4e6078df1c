// A matrix product for the short, wide products of a forward pass over few tokens:
// out[M, N] = x[M, K] @ W[K, N] (+ bias[N]), all row-major, W used in place (the memory map).
//
// Why not Eigen here: Eigen's GEMM packs both operands into blocks before multiplying. With 20
// token rows the weight matrix is the big operand, and packing it copies every weight on every
// product — the perf profile of a 20-token GPT-2-small pass spent about half its time in
// gemm_pack_lhs. This kernel reads each weight once, straight from W, and keeps a tile of
// kRows x (2 vectors) outputs in registers while it walks down K.
#pragma once

#include <cstdint>

namespace hs {

// Whether linear_forward and unembed_forward use small_gemm for an [M, K] input: measured with
// tools/bench/bench_kernels on the 2-core EPYC (AVX-512), small_gemm ran at ~100 GFLOP/s per
// core against Eigen's ~70 at every row count from 6 to 1024 when K is 768 (1.35-1.7x, 1 and 2
// threads), and up to 256 rows when K is 3072; at 1024 rows x 3072 its weight panels leave L2
// and Eigen's packed blocking wins (0.77x).
inline constexpr int64_t kSmallGemmMaxRows = 256;
inline constexpr bool use_small_gemm(int64_t M, int64_t K) { return M <= kSmallGemmMaxRows || K <= 1024; }

// out[i, j] = sum_k x[i, k] * W[k, j] (+ bias[j] when bias is not null), for i < M, j < N.
// Strides are in floats (ldx >= K, ldw >= N, ldo >= N). Column blocks are shared among the
// calling thread's OpenMP team when the product is large enough to be worth it.
void small_gemm(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* W, int64_t ldw,
                const float* bias, float* out, int64_t ldo);

// out[i, v] = sum_d x[i, d] * U[v, d], for i < M, v < V: a product with the transpose of U given
// by its rows (the unembedding [d_vocab, d_model], used in place). Row blocks of U are shared
// among the calling thread's OpenMP team.
void small_gemm_bt(int64_t M, int64_t V, int64_t D, const float* x, int64_t ldx, const float* U, int64_t ldu,
                   float* out, int64_t ldo);

}  // namespace hs
