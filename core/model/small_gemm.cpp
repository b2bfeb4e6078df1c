#include "core/model/small_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hs {
namespace {

// GCC/Clang vector extensions: the compiler maps them to the widest registers -march allows
// (zmm with AVX-512, ymm with AVX2, pairs of xmm otherwise) without intrinsics per ISA.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
// The register tile of the layer products: kRows x kVecs accumulators, kVecs weight vectors and
// one broadcast must fit the vector registers (32 with AVX-512: 8 x 3 + 3 + 1 = 28; 16 with
// AVX2: 6 x 2 + 2 + 1 = 15). A taller, wider tile does more multiply-adds per load.
#if defined(__AVX512F__)
constexpr int kVecs = 3;
constexpr int kRows = 8;
#else
constexpr int kVecs = 2;
constexpr int kRows = 6;
#endif
// Column blocks shared among threads, kBlockVecs vectors wide: the unit of parallel work, and
// the width taken at once by the last one or two rows.
constexpr int kBlockVecs = 4 * kVecs;

// Every output is a chain of multiply-adds in k order, fused when the target has FMA (the vector
// code is contracted to FMA by the compiler). The scalar paths say so explicitly: left alone,
// GCC vectorizes a scalar dot product as separate multiplies and adds, and a row's bits would
// then depend on which path computed it.
inline float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);  // an unaligned load; compiles to one vmovups
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// One tile: R rows x V vectors of columns, the whole K in registers. Every output is summed in
// k order whatever the tile, so a row's result does not depend on how many rows came with it.
template <int R, int V>
inline void tile(int64_t K, const float* x, int64_t ldx, const float* W, int64_t ldw, const float* bias, float* out,
                 int64_t ldo) {
  Vec acc[R][V] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float* w = W + k * ldw;
    Vec wv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) wv[v] = load(w + v * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float s = x[r * ldx + k];
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] += s * wv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      Vec y = acc[r][v];
      if (bias) y += load(bias + v * kLanes);
      store(out + r * ldo + v * kLanes, y);
    }
}

// Row tiles of width V vectors over `rows` rows: kRows at a time, then one shorter tile.
template <int V>
void row_tiles(int64_t rows, int64_t K, const float* x, int64_t ldx, const float* W, int64_t ldw, const float* bias,
               float* out, int64_t ldo) {
  int64_t i = 0;
  for (; i + kRows <= rows; i += kRows) tile<kRows, V>(K, x + i * ldx, ldx, W, ldw, bias, out + i * ldo, ldo);
  const float* xi = x + i * ldx;
  float* oi = out + i * ldo;
  switch (rows - i) {
    case 7: if constexpr (kRows > 7) tile<7, V>(K, xi, ldx, W, ldw, bias, oi, ldo); break;
    case 6: if constexpr (kRows > 6) tile<6, V>(K, xi, ldx, W, ldw, bias, oi, ldo); break;
    case 5: tile<5, V>(K, xi, ldx, W, ldw, bias, oi, ldo); break;
    case 4: tile<4, V>(K, xi, ldx, W, ldw, bias, oi, ldo); break;
    case 3: tile<3, V>(K, xi, ldx, W, ldw, bias, oi, ldo); break;
    case 2: tile<2, V>(K, xi, ldx, W, ldw, bias, oi, ldo); break;
    case 1: tile<1, V>(K, xi, ldx, W, ldw, bias, oi, ldo); break;
    default: break;
  }
}

// Rows [0, M) of a column block `vecs` vectors wide (kBlockVecs, or fewer at the right edge):
// sub-blocks of kVecs (and one narrower at the edge) in row tiles. When the rows leave one or
// two over (or there are only one or two rows, as when typing adds a token), those take the
// whole block at once, so that enough independent FMA chains hide their latency.
void column_block(int64_t M, int64_t K, int vecs, const float* x, int64_t ldx, const float* W, int64_t ldw,
                  const float* bias, float* out, int64_t ldo) {
  const int64_t tail = (vecs == kBlockVecs && M % kRows <= 2) ? M % kRows : 0;
  const int64_t body = M - tail;
  for (int c = 0; c < vecs && body > 0; c += kVecs) {
    const int64_t j = static_cast<int64_t>(c) * kLanes;
    const float* bj = bias ? bias + j : nullptr;
    switch (std::min(kVecs, vecs - c)) {
      case 3: if constexpr (kVecs >= 3) row_tiles<3>(body, K, x, ldx, W + j, ldw, bj, out + j, ldo); break;
      case 2: row_tiles<2>(body, K, x, ldx, W + j, ldw, bj, out + j, ldo); break;
      default: row_tiles<1>(body, K, x, ldx, W + j, ldw, bj, out + j, ldo); break;
    }
  }
  if (tail == 0) return;
  const float* xi = x + body * ldx;
  float* oi = out + body * ldo;
  if (tail == 2) tile<2, kBlockVecs>(K, xi, ldx, W, ldw, bias, oi, ldo);
  else tile<1, kBlockVecs>(K, xi, ldx, W, ldw, bias, oi, ldo);
}

// Columns [j0, N) narrower than a tile, plainly; each sum in the same k order as the tiles.
void column_tail(int64_t M, int64_t N, int64_t K, int64_t j0, const float* x, int64_t ldx, const float* W,
                 int64_t ldw, const float* bias, float* out, int64_t ldo) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = j0; j < N; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s = madd(x[i * ldx + k], W[k * ldw + j], s);
      out[i * ldo + j] = bias ? s + bias[j] : s;
    }
}

// One or two rows (typing adds a token at a time): the product is a matrix-vector product,
// bound by reading W. Each thread takes a contiguous range of columns and walks down the rows of
// W, so that it reads long contiguous runs instead of the tiles' narrow strided panels (about
// 2x on the 1-row products). Same k order per output as the tiles.
void few_rows(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* W, int64_t ldw,
              const float* bias, float* out, int64_t ldo) {
  const bool parallel = M * N * K >= (int64_t{1} << 20);
#pragma omp parallel if (parallel)
  {
    const int64_t T = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (N / T + kLanes - 1) / kLanes * kLanes;
    const int64_t j0 = std::min(N, t * per), j1 = t + 1 == T ? N : std::min(N, j0 + per);
    for (int64_t r = 0; r < M; ++r) std::fill(out + r * ldo + j0, out + r * ldo + j1, 0.0f);
    // Four rows of W per sweep over the outputs: a quarter of the output loads and stores, and
    // still one multiply-add after another in k order for each output.
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
      const float* w0 = W + k * ldw;
      const float *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
      for (int64_t r = 0; r < M; ++r) {
        const float* xr = x + r * ldx + k;
        const float s0 = xr[0], s1 = xr[1], s2 = xr[2], s3 = xr[3];
        float* o = out + r * ldo;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) {
          float y = o[j];
          y = madd(s0, w0[j], y);
          y = madd(s1, w1[j], y);
          y = madd(s2, w2[j], y);
          y = madd(s3, w3[j], y);
          o[j] = y;
        }
      }
    }
    for (; k < K; ++k) {
      const float* w = W + k * ldw;
      for (int64_t r = 0; r < M; ++r) {
        const float s = x[r * ldx + k];
        float* o = out + r * ldo;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) o[j] = madd(s, w[j], o[j]);
      }
    }
    if (bias)
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = j0; j < j1; ++j) out[r * ldo + j] += bias[j];
  }
}

}  // namespace

void small_gemm(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* W, int64_t ldw,
                const float* bias, float* out, int64_t ldo) {
  if (M <= 2) return few_rows(M, N, K, x, ldx, W, ldw, bias, out, ldo);
  constexpr int64_t kBlockCols = kBlockVecs * kLanes;
  const int64_t blocks = N / kBlockCols;
  // Below ~2 MFLOP a second thread costs more to wake than it saves.
  const bool parallel = blocks > 1 && M * N * K >= (int64_t{1} << 20);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j = b * kBlockCols;
    column_block(M, K, kBlockVecs, x, ldx, W + j, ldw, bias ? bias + j : nullptr, out + j, ldo);
  }
  const int64_t j = blocks * kBlockCols;
  const int vecs = static_cast<int>((N - j) / kLanes);
  if (vecs > 0) column_block(M, K, vecs, x, ldx, W + j, ldw, bias ? bias + j : nullptr, out + j, ldo);
  const int64_t j_tail = j + static_cast<int64_t>(vecs) * kLanes;
  if (j_tail < N) column_tail(M, N, K, j_tail, x, ldx, W, ldw, bias, out, ldo);
}

namespace {

// ---- out = x @ U^T, U given by rows (the unembedding) --------------------------------------

// Dot products of TR token rows with UR rows of U over the whole of D: TR x UR vector
// accumulators, one horizontal sum each at the end. The sum order of an output does not depend
// on the tile, so a position's logits are the same bits in a full run and a typed extension.
template <int TR, int UR>
inline void dot_tile(int64_t D, const float* x, int64_t ldx, const float* U, int64_t ldu, float* out, int64_t ldo) {
  Vec acc[TR][UR] = {};
  const int64_t Dv = D / kLanes * kLanes;
  for (int64_t d = 0; d < Dv; d += kLanes) {
    Vec u[UR];
#pragma GCC unroll 8
    for (int c = 0; c < UR; ++c) u[c] = load(U + c * ldu + d);
#pragma GCC unroll 8
    for (int r = 0; r < TR; ++r) {
      const Vec xv = load(x + r * ldx + d);
#pragma GCC unroll 8
      for (int c = 0; c < UR; ++c) acc[r][c] += xv * u[c];
    }
  }
  for (int r = 0; r < TR; ++r)
    for (int c = 0; c < UR; ++c) {
      float lanes[kLanes];
      store(lanes, acc[r][c]);
      float sum = 0.0f;
      for (int i = 0; i < kLanes; ++i) sum += lanes[i];
      for (int64_t d = Dv; d < D; ++d) sum = madd(x[r * ldx + d], U[c * ldu + d], sum);
      out[r * ldo + c] = sum;
    }
}

template <int UR>
void dot_rows(int64_t M, int64_t D, const float* x, int64_t ldx, const float* U, int64_t ldu, float* out,
              int64_t ldo) {
#if defined(__AVX512F__)
  constexpr int kTR = 4;  // 16 accumulators of 32 registers
#else
  constexpr int kTR = 2;  // 8 accumulators of 16 registers
#endif
  int64_t i = 0;
  for (; i + kTR <= M; i += kTR) dot_tile<kTR, UR>(D, x + i * ldx, ldx, U, ldu, out + i * ldo, ldo);
  for (; i < M; ++i) dot_tile<1, UR>(D, x + i * ldx, ldx, U, ldu, out + i * ldo, ldo);
}

}  // namespace

void small_gemm_bt(int64_t M, int64_t V, int64_t D, const float* x, int64_t ldx, const float* U, int64_t ldu,
                   float* out, int64_t ldo) {
  // Blocks of 4 rows of U (12 KB for GPT-2 small), each kept in L1 while every token row passes
  // over it; x (60 KB at 20 tokens) stays in L2.
  constexpr int64_t kUR = 4;
  const int64_t blocks = V / kUR;
  const bool parallel = M * V * D >= (int64_t{1} << 20);
#pragma omp parallel for schedule(static, 64) if (parallel)
  for (int64_t b = 0; b < blocks; ++b)
    dot_rows<kUR>(M, D, x, ldx, U + b * kUR * ldu, ldu, out + b * kUR, ldo);
  for (int64_t v = blocks * kUR; v < V; ++v) dot_rows<1>(M, D, x, ldx, U + v * ldu, ldu, out + v, ldo);
}

}  // namespace hs
