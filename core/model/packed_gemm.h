// The matrix product of the forward pass: out[M, N] = x[M, K] @ W[K, N] (+ bias[N]) with W packed
// once, when the model opens, into panels of one vector's width of columns, each panel K rows
// deep and contiguous.
//
// Why pack: at a few tokens a pass is a stream of every weight from memory, and the order the
// kernel reads them in decides its speed. Read in place from a row-major [K, N] weight, each step
// down K jumps a whole row to fetch 2-3 cache lines, which the hardware prefetchers do not
// follow. From panels, the same arithmetic streams memory in order, about twice as fast
// (tools/bench/bench_kernels; docs/benchmarks.md has the figures). Eigen's GEMM packs too, but on
// every product, which was half of a short pass before this kernel existed.
//
// A matrix from a 16-bit file keeps its panels in the file's type (BF16 or F16): half the bytes to
// hold and to stream per pass. The kernel widens each weight vector to float32 as it reads it
// (exact: every 16-bit value is a float32 value), so the arithmetic is that of a float32 matrix
// converted first, bit for bit. Float32 matrices keep float32 panels.
//
// Every output is one chain of multiply-adds in k order, plus the bias at the end. So a row's
// result does not depend on which rows come with it, how K is blocked, or how many threads run:
// a position's activations are the same bits in a full run, in a typed extension of one token,
// and when derived on request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

namespace hs {

// What a matrix's panels hold: float32, or the 16-bit values of a BF16 or F16 file.
enum class PanelType : uint8_t { F32, BF16, F16 };

class PackedMatrix {
 public:
  // Columns per panel: one vector register (16 floats with AVX-512, 8 with AVX, 4 otherwise).
  static int64_t panel_width();

  PackedMatrix() = default;
  // W [K, N], row-major with row stride ldw (a weight stored [in, out]: y = x @ W).
  static PackedMatrix from_rows(const float* W, int64_t K, int64_t N, int64_t ldw);
  // The transpose of U [N, K] given by its rows (stride ldu): the unembedding [d_vocab, d_model].
  static PackedMatrix from_transposed_rows(const float* U, int64_t N, int64_t K, int64_t ldu);
  // The same from 16-bit values (type BF16 or F16; little-endian, any alignment), kept in 16 bits:
  // W [K, N] with row stride ldw elements, and the transpose of an [N, K] matrix whose row j
  // starts at row(j) (so separate q, k and v rows can be packed as one matrix).
  static PackedMatrix from_rows(PanelType type, const void* W, int64_t K, int64_t N, int64_t ldw);
  // `copy`, when given, fetches the source rows a block at a time: copy(src, bytes, dst) puts the
  // bytes shown at src into dst and returns true, or returns false to have them read in place
  // (SafetensorsFile::copy_mapped: a file's rows read through the file, not its mapping).
  using CopySource = std::function<bool(const void* src, size_t bytes, void* dst)>;
  static PackedMatrix from_transposed_rows(PanelType type, int64_t N, int64_t K,
                                           const std::function<const void*(int64_t j)>& row,
                                           const CopySource& copy = {});

  int64_t rows() const { return K_; }  // K
  int64_t cols() const { return N_; }  // N
  bool empty() const { return N_ == 0; }
  PanelType type() const { return type_; }
  size_t bytes() const { return bytes_; }
  // Column j of the matrix as float32 (out[k] = W[k, j], k < rows()): for a matrix packed from
  // transposed rows, row j of the original (a token's embedding, from the packed unembedding).
  void column(int64_t j, float* out) const;
  // The matrix back as float32 rows: W[k * cols() + j] for a matrix packed by from_rows.
  void unpack_rows(float* W) const;
  // How many of its values are NaN or infinite (all exponent bits set, in its own type). Counted
  // while packing from 16-bit rows, where the values pass through cache anyway.
  int64_t count_non_finite() const;
  // Panel p: columns [p * panel_width(), ...), K rows of panel_width() elements of type(); columns
  // past N are 0.
  const void* panel(int64_t p) const { return data_ + static_cast<size_t>(p * K_ * panel_width()) * element_bytes(); }
  // The first n columns, n a multiple of panel_width() (or cols()): the same panels, shared, not
  // copied. A product over it gives those columns the bits of the product over the whole matrix
  // (each output is its own chain, packed_gemm below), without the other columns' multiply-adds.
  PackedMatrix leading_columns(int64_t n) const;
  // All the panels, bytes() of them, as they lie in memory (what a packed copy on disk holds).
  const void* data() const { return data_; }
  // The bytes a matrix of this type and shape packs into.
  static size_t bytes_for(PanelType type, int64_t K, int64_t N);
  // A matrix whose panels are already in memory at `data` (bytes_for(type, K, N) bytes, 64-byte
  // aligned), kept alive by `owner`: a packed copy mapped from disk. `non_finite` is its count
  // of NaN and infinite values, or -1 to count them when asked.
  static PackedMatrix view(PanelType type, int64_t K, int64_t N, const void* data, std::shared_ptr<const void> owner,
                           int64_t non_finite);

 private:
  static PackedMatrix allocate(PanelType type, int64_t K, int64_t N);
  size_t element_bytes() const { return type_ == PanelType::F32 ? 4 : 2; }
  int64_t K_ = 0, N_ = 0;
  PanelType type_ = PanelType::F32;
  size_t bytes_ = 0;
  int64_t non_finite_ = -1;  // known from packing, or -1
  unsigned char* data_ = nullptr;       // written only while packing
  std::shared_ptr<const void> owner_;  // keeps data_ alive: its allocation, or a mapping
};

// How many of the n 16-bit values at p (any alignment) are NaN or infinite in `type` (BF16 or F16).
int64_t count_non_finite16(const void* p, int64_t n, PanelType type);

// out[i, j] = sum over k in [k0, k1) of x[i, k - k0] * W[k, j], then + bias[j] when bias is not
// null; for i < M and j < W.cols(). Strides in floats (ldx >= k1 - k0, ldo >= W.cols()). A row
// range of W (k0, k1) is how a head's rows of W_O are used without a copy. Column panels are
// shared among the calling thread's OpenMP team when the product is large enough to be worth it.
void packed_gemm(int64_t M, const float* x, int64_t ldx, const PackedMatrix& W, int64_t k0, int64_t k1,
                 const float* bias, float* out, int64_t ldo);
// The same product with the output rows in segments (pointer, rows), one after another: the rows of
// an activation stored in position blocks (position_rows.h), written in place. The weights are
// streamed once for all the rows, and each row's bits are those of the call above.
void packed_gemm(const float* x, int64_t ldx, const PackedMatrix& W, int64_t k0, int64_t k1, const float* bias,
                 std::span<const std::pair<float*, int64_t>> out_segments, int64_t ldo);

// An attention head's two products, on the calling thread (no threads, no allocation), over the
// causal half: out[r, j] = sum over k of x[r, k] * W[k, j], where query row r sits at position
// first + r and reads keys 0 .. first + r only. With LowerLimit::Columns (the scores q k^T, W =
// keys^T [d_head, key]) row r's columns stop there; with LowerLimit::Depth (the mix pattern v, W
// = values [key, d_head]) its sum does. Each limit is rounded up to the end of the row's tile of
// rows: the extra columns are computed and not read (the scores above the diagonal), and the
// extra depth multiplies entries of x the caller has zeroed (the pattern above the diagonal). W is
// given as float32 panels (pack_transposed_into, pack_rows_into: K rows a panel, panel_width()
// columns). Every output is one chain of multiply-adds in k order, as in packed_gemm, so its bits
// do not depend on how many queries come with it.
enum class LowerLimit : uint8_t { Columns, Depth };
void packed_gemm_lower(int64_t M, const float* x, int64_t ldx, const float* panels, int64_t K, int64_t N,
                       int64_t first, LowerLimit limit, float* out, int64_t ldo);
// Floats of the panels of a float32 [K, N] matrix.
int64_t panel_floats(int64_t K, int64_t N);
// Columns [j0, j0 + n) of W [K, N] into `panels`, from rows of W's transpose: column j is the K
// floats at src + (j - j0) * ld (a head's keys, [key, d_head], give W = keys^T).
void pack_transposed_into(float* panels, int64_t K, int64_t j0, int64_t n, const float* src, int64_t ld);
// Rows [k0, k0 + n) of W [K, N] into `panels`, from row-major rows: row k is the N floats at
// src + (k - k0) * ld (a head's values, [key, d_head]).
void pack_rows_into(float* panels, int64_t K, int64_t N, int64_t k0, int64_t n, const float* src, int64_t ld);

// The product with W's transpose, the backward pass through x @ W: dx[i, k - k0] = sum over
// j < W.cols() of dy[i, j] * W[k, j] for i < M and k in [k0, k1), added to dx when `accumulate`,
// else written over it. Strides in floats (lddy >= W.cols(), lddx >= k1 - k0). A row range is how
// the gradient of one head's z is taken through its rows of W_O; the unembedding (packed from
// transposed rows) gives dx = dlogits @ W_U^T. Read from the panels as they are (16-bit ones
// widened as read), in memory order, at the forward product's speed. Each output sums its lanes
// panel by panel, then the lanes in one fixed tree: its bits depend on its row of dy and of W
// only, not on M, the range or the thread count. Output ranges of k are shared among the calling
// thread's OpenMP team when the product is large enough to be worth it.
void packed_gemm_transposed(int64_t M, const float* dy, int64_t lddy, const PackedMatrix& W, int64_t k0, int64_t k1,
                            float* dx, int64_t lddx, bool accumulate);

}  // namespace hs
