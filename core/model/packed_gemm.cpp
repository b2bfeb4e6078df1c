#include "core/model/packed_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/model/huge_pages.h"
#include "core/tensor/half.h"

namespace hs {
namespace {

// GCC/Clang vector extensions: the compiler maps them to the target's vector registers (zmm
// with AVX-512, ymm with AVX, xmm otherwise: a portable x86-64 build such as the sanitizer one)
// without intrinsics per ISA. The multiply-adds are fused explicitly (madd), not left to
// -ffp-contract.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

// acc + a * b, one rounding where the target has FMA. Written out because contraction is the
// compiler's choice per loop: GCC tuned for AMD Zen 2/3 (-march=native there; its
// avoid_fma_chains tuning) kept the single-accumulator tile<1, 1>'s chain as a multiply and an add
// while every other tile fused, so an output's bits depended on the tile that computed it (a row
// run alone against the same row among others: 2.4e-7 apart, test_forward's incremental runs).
// Without FMA (the portable build) every tile multiplies and adds, the same everywhere.
inline Vec madd(Vec acc, Vec a, Vec b) {
#if defined(__AVX512F__)
  return (Vec)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)acc);
#elif defined(__FMA__) && defined(__AVX__)
  return (Vec)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc);
#elif defined(__FMA__)
  return (Vec)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)acc);
#else
  Vec product = a * b;
  asm("" : "+x"(product));  // never contracted, whatever the flags
  return acc + product;
#endif
}
// Every lane s.
inline Vec splat(float s) {
#if defined(__AVX512F__)
  return (Vec)_mm512_set1_ps(s);
#elif defined(__AVX__)
  return (Vec)_mm256_set1_ps(s);
#else
  return (Vec)_mm_set1_ps(s);
#endif
}

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);  // one unaligned vector load
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }
// The first n lanes (n <= kLanes; the rest 0), for the last panel of a width that is not a
// multiple of kLanes.
inline Vec load_n(const float* p, int n) {
  if (n == kLanes) return load(p);
  Vec v = {};
  std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
  return v;
}
inline void store_n(float* p, Vec v, int n) {
  if (n == kLanes) return store(p, v);
  std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float));
}

static_assert(std::endian::native == std::endian::little, "16-bit panels are read as little-endian values");

// How each kind of panel is read into a float32 vector. Widening is exact, so a tile computes
// the same bits from 16-bit panels as from their float32 conversion.
struct F32Panels {
  using T = float;
  static Vec load(const float* p) { return hs::load(p); }
};
struct BF16Panels {
  using T = uint16_t;
  static Vec load(const uint16_t* p) {  // bf16 -> f32 is a 16-bit shift
    typedef uint16_t Half __attribute__((vector_size(kLanes * sizeof(uint16_t))));
    typedef uint32_t Wide __attribute__((vector_size(kLanes * sizeof(uint32_t))));
    Half h;
    std::memcpy(&h, p, sizeof h);
    const Wide w = __builtin_convertvector(h, Wide) << 16;
    Vec v;
    std::memcpy(&v, &w, sizeof v);
    return v;
  }
};
struct F16Panels {
  using T = uint16_t;
  static Vec load(const uint16_t* p) {
    Vec v;
#if defined(__AVX512F__)
    const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    std::memcpy(&v, &f, sizeof v);
#elif defined(__F16C__) && defined(__AVX__)
    const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    std::memcpy(&v, &f, sizeof v);
#else  // a portable build: the same exact conversion, one lane at a time
    for (int l = 0; l < kLanes; ++l) {
      uint16_t h;
      std::memcpy(&h, p + l, sizeof h);
      v[l] = f16_to_f32(h);
    }
#endif
    return v;
  }
};

inline uint16_t read16(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return h;
}
inline float widen(PanelType type, uint16_t h) { return type == PanelType::BF16 ? bf16_to_f32(h) : f16_to_f32(h); }

// Register tiles: R rows x V panels of accumulators, plus V weight vectors and one broadcast.
// AVX-512 has 32 vector registers. bench_kernels (weights from memory) chose, with the figures in
// docs/benchmarks.md:
// - up to 4 rows (typing adds one token at a time): 4 panels wide, enough independent chains;
// - up to 127 rows: 2 panels x up to 12 rows, ahead of 8 x 3 tiles (fewer passes over the panels
//   matter while they come from memory);
// - 128 rows and more: 3 panels x up to 8 rows, faster once the panels sit in cache.
// AVX2 and SSE have 16 registers: 2 panels x up to 6 rows, or 4 panels for up to 2 rows.
#if defined(__AVX512F__)
constexpr int kFewRows = 4;
constexpr int kMidRows = 12;
constexpr int kTallWidth = 3;
constexpr int kTallRows = 8;
#else
constexpr int kFewRows = 2;
constexpr int kMidRows = 6;
constexpr int kTallWidth = 2;
constexpr int kTallRows = 6;
#endif
constexpr int kWide = 4;
constexpr int64_t kTallFrom = 128;
// K is taken in blocks so that a pair of panels' block stays in L2 while every row tile passes
// over it; K is d_model in most products, d_mlp in the MLP's output.
constexpr int64_t kKBlock = 768;
// Rows taken together when a product has many (see gemm_segments): a block of them, a K block
// deep, is 384 KiB, which stays in a 512 KiB L2 (Zen 3's; Zen 4 has 1 MiB) beside the panels'
// block.
constexpr int64_t kMBlockRows = 128;
// Row tiles per K block from which a 16-bit matrix's block is widened to float32 once, rather
// than in every tile (see packed_gemm).
constexpr int64_t kWidenFromRowTiles = 3;

struct TileArgs {
  int64_t n;            // k steps in this block
  const float* x;       // first row, at this block's first k
  int64_t ldx;
  const void* p;        // first panel, at this block's first k
  int64_t pstride;      // elements from one panel to the next
  bool resume;          // continue the partial sums stored in out (an earlier K block)
  const float* bias;    // this tile's columns of the bias on the last K block, else null
  int last_cols;        // valid columns of the tile's last panel
  float* out;
  int64_t ldo;
  // The next block's share of this tile, fetched ahead while it computes (see gemm_segments):
  // one line of each of pf_panels panels (pf_pstride bytes apart) every 2^pf_shift k steps, up to
  // pf_lines lines a panel from pf. No fetch when pf is null.
  const char* pf = nullptr;
  int64_t pf_pstride = 0;
  int64_t pf_lines = 0;
  int pf_panels = 0;
  int pf_shift = 0;
};

// With PackedRows (a tall product, see gemm_segments) x holds the tile's rows packed k-major,
// x[k * kTallRows + r]: the broadcasts then read one line of one stream instead of one line of
// each of R rows. The multiply-adds and their order are the same either way, and so are the bits.
template <int R, int V, class Panels, bool PackedRows = false>
void tile(const TileArgs& a) {
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      acc[r][v] = a.resume ? load_n(a.out + r * a.ldo + v * kLanes, v + 1 == V ? a.last_cols : kLanes) : Vec{};
  const float* x = a.x;
  const auto* p = static_cast<const typename Panels::T*>(a.p);
  // k steps in chunks of 2^pf_shift, a line of each next panel fetched before each chunk (the
  // steps themselves unchanged, in order).
  const int64_t chunk = a.pf ? int64_t{1} << a.pf_shift : a.n;
  bool out_fetched = false;
  for (int64_t k0 = 0, line = 0; k0 < a.n; k0 += chunk, ++line) {
    // The tile's output lines, fetched for writing some 64 k steps before its stores. A tile's
    // stores to lines not in cache stalled the thread after every tile (perf: half of
    // gemm_segments' own samples in a batched scan, on the instructions after a tile returned).
    // Fetched as the tile starts, the panels streaming through L1 evict them again before the
    // stores: this took gemm_segments' share of a scan from 4.7% to 3.6%.
    if (!out_fetched && k0 + chunk >= a.n - 64) {
      out_fetched = true;
      const int64_t bytes = ((V - 1) * kLanes + a.last_cols) * static_cast<int64_t>(sizeof(float));
      for (int r = 0; r < R; ++r) {
        const char* row = reinterpret_cast<const char*>(a.out + r * a.ldo);
        for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 1, 3);
        __builtin_prefetch(row + bytes - 1, 1, 3);
      }
    }
    if (a.pf && line < a.pf_lines)
      for (int q = 0; q < a.pf_panels; ++q) __builtin_prefetch(a.pf + q * a.pf_pstride + line * 64, 0, 2);
    const int64_t k1 = std::min(a.n, k0 + chunk);
    for (int64_t k = k0; k < k1; ++k) {
      Vec w[V];
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) w[v] = Panels::load(p + v * a.pstride + k * kLanes);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const Vec s = splat(PackedRows ? x[k * kTallRows + r] : x[r * a.ldx + k]);
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[r][v] = madd(acc[r][v], s, w[v]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const int cols = v + 1 == V ? a.last_cols : kLanes;
      Vec y = acc[r][v];
      if (a.bias) y += load_n(a.bias + v * kLanes, cols);
      store_n(a.out + r * a.ldo + v * kLanes, y, cols);
    }
}

using TileFn = void (*)(const TileArgs&);
template <int V, int... R>
constexpr std::array<TileFn, sizeof...(R)> packed_tiles_of(std::integer_sequence<int, R...>) {
  return {&tile<R + 1, V, F32Panels, true>...};
}
TileFn packed_tile_for(int rows, int panels) {
  static const auto t1 = packed_tiles_of<1>(std::make_integer_sequence<int, kTallRows>{});
  static const auto t2 = packed_tiles_of<2>(std::make_integer_sequence<int, kTallRows>{});
  static const auto t3 = packed_tiles_of<3>(std::make_integer_sequence<int, kTallRows>{});
  const auto i = static_cast<size_t>(rows - 1);
  return panels == 1 ? t1[i] : panels == 2 ? t2[i] : t3[i];
}
template <int V, class Panels, int... R>
constexpr std::array<TileFn, sizeof...(R)> tiles_of(std::integer_sequence<int, R...>) {
  return {&tile<R + 1, V, Panels>...};
}
// The tile of `rows` rows and `panels` panels; rows never exceed the limit of that width.
template <class Panels>
TileFn tile_for(int rows, int panels) {
  static const auto t1 = tiles_of<1, Panels>(std::make_integer_sequence<int, kMidRows>{});
  static const auto t2 = tiles_of<2, Panels>(std::make_integer_sequence<int, kMidRows>{});
  static const auto t3 = tiles_of<3, Panels>(std::make_integer_sequence<int, kTallRows>{});
  static const auto t4 = tiles_of<4, Panels>(std::make_integer_sequence<int, kFewRows>{});
  const auto i = static_cast<size_t>(rows - 1);
  switch (panels) {
    case 1: return t1[i];
    case 2: return t2[i];
    case 3: return t3[i];
    default: return t4[i];
  }
}
TileFn tile_for(PanelType type, int rows, int panels) {
  switch (type) {
    case PanelType::BF16: return tile_for<BF16Panels>(rows, panels);
    case PanelType::F16: return tile_for<F16Panels>(rows, panels);
    default: return tile_for<F32Panels>(rows, panels);
  }
}

// Widens n k-steps of np 16-bit panels (pstride elements apart) into float32 panels, n * kLanes
// floats apart in `out`: how a tall product reads a 16-bit matrix (see packed_gemm).
template <class Panels>
void widen_panels(const void* first, int64_t pstride, int np, int64_t n, float* out) {
  const auto* src = static_cast<const typename Panels::T*>(first);
  for (int q = 0; q < np; ++q)
    for (int64_t k = 0; k < n; ++k) store(out + (q * n + k) * kLanes, Panels::load(src + q * pstride + k * kLanes));
}

// Packing the transpose of rows: panel p's k-step k holds element k of rows p*kLanes .. +kLanes.
// Done element by element, the stores go 64 bytes apart and the loop is several times slower than
// reading the source; with AVX-512, one gather fetches a k-step of all 16 rows when they lie a
// fixed stride apart (a tensor's rows always do; a panel that straddles two tensors joined as one
// matrix does not, and takes the element loop). A 16-bit gather fetches two k-steps at once.
// Returns the k-steps it packed (from 0); the caller packs the rest.
int64_t gather_transposed(const unsigned char* const src[], int64_t K, size_t elem, void* dst) {
#if defined(__AVX512F__)
  static_assert(kLanes == 16);
  for (int l = 0; l < kLanes; ++l)
    if (!src[l]) return 0;
  const std::ptrdiff_t stride = src[1] - src[0];
  for (int l = 2; l < kLanes; ++l)
    if (src[l] - src[l - 1] != stride) return 0;
  if (stride * (kLanes - 1) > std::ptrdiff_t{1} << 30 || stride * (kLanes - 1) < -(std::ptrdiff_t{1} << 30)) return 0;
  const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(static_cast<int>(stride)));
  // The masked forms with a zero source: the unmasked ones start from an undefined register,
  // which GCC warns about.
  constexpr __mmask16 all = 0xffff;
  if (elem == 4) {
    float* out = static_cast<float*>(dst);
    for (int64_t k = 0; k < K; ++k)
      _mm512_storeu_ps(out + k * kLanes, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), all, offsets, src[0] + 4 * k, 1));
    return K;
  }
  uint16_t* out = static_cast<uint16_t*>(dst);
  int64_t k = 0;
  for (; k + 1 < K; k += 2) {  // 32 bits of each row: its k-th value in the low half, the next in the high
    const __m512i pair = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), all, offsets, src[0] + 2 * k, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k * kLanes), _mm512_maskz_cvtepi32_epi16(all, pair));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (k + 1) * kLanes),
                        _mm512_maskz_cvtepi32_epi16(all, _mm512_srli_epi32(pair, 16)));
  }
  return k;
#else
  (void)src, (void)K, (void)elem, (void)dst;
  return 0;
#endif
}

}  // namespace

int64_t PackedMatrix::panel_width() { return kLanes; }

size_t PackedMatrix::bytes_for(PanelType type, int64_t K, int64_t N) {
  const int64_t panels = (N + kLanes - 1) / kLanes;
  const size_t want = static_cast<size_t>(std::max<int64_t>(1, panels * K * kLanes)) * (type == PanelType::F32 ? 4 : 2);
  return (want + 63) / 64 * 64;
}

PackedMatrix PackedMatrix::allocate(PanelType type, int64_t K, int64_t N) {
  PackedMatrix m;
  m.K_ = K;
  m.N_ = N;
  m.type_ = type;
  // Huge pages for large matrices: far fewer TLB entries and page faults per stream. Only the
  // advice: rounding the allocation itself up to a huge page held more resident memory
  // (docs/benchmarks.md).
  m.bytes_ = bytes_for(type, K, N);
  void* p = std::aligned_alloc(64, m.bytes_);
  if (!p) throw std::bad_alloc();
  advise_huge_pages(p, m.bytes_);
  m.data_ = static_cast<unsigned char*>(p);
  m.owner_ = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return m;
}

PackedMatrix PackedMatrix::view(PanelType type, int64_t K, int64_t N, const void* data, std::shared_ptr<const void> owner,
                                int64_t non_finite) {
  PackedMatrix m;
  m.K_ = K;
  m.N_ = N;
  m.type_ = type;
  m.bytes_ = bytes_for(type, K, N);
  m.data_ = static_cast<unsigned char*>(const_cast<void*>(data));  // never written: packing made it
  m.owner_ = std::move(owner);
  m.non_finite_ = non_finite;
  return m;
}

PackedMatrix PackedMatrix::from_rows(const float* W, int64_t K, int64_t N, int64_t ldw) {
  PackedMatrix m = allocate(PanelType::F32, K, N);
  const int64_t panels = (N + kLanes - 1) / kLanes;
  float* base = reinterpret_cast<float*>(m.data_);
  // Sixteen rows of W at a time across a thread's panels: the source rows stay in L2 while each
  // panel takes its 64-byte piece of them.
  constexpr int64_t kRowsAtOnce = 16;
#pragma omp parallel for schedule(static) if (K * N >= (int64_t{1} << 20))
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t j = p * kLanes;
    const int n = static_cast<int>(std::min<int64_t>(kLanes, N - j));
    float* dst = base + p * K * kLanes;
    for (int64_t k0 = 0; k0 < K; k0 += kRowsAtOnce)
      for (int64_t k = k0; k < std::min(K, k0 + kRowsAtOnce); ++k) {
        std::memcpy(dst + k * kLanes, W + k * ldw + j, static_cast<size_t>(n) * sizeof(float));
        std::fill(dst + k * kLanes + n, dst + (k + 1) * kLanes, 0.0f);
      }
  }
  return m;
}

PackedMatrix PackedMatrix::from_transposed_rows(const float* U, int64_t N, int64_t K, int64_t ldu) {
  PackedMatrix m = allocate(PanelType::F32, K, N);
  const int64_t panels = (N + kLanes - 1) / kLanes;
  float* base = reinterpret_cast<float*>(m.data_);
#pragma omp parallel for schedule(static) if (K * N >= (int64_t{1} << 20))
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t j = p * kLanes, n = std::min<int64_t>(kLanes, N - j);
    pack_transposed_into(base, K, j, n, U + j * ldu, ldu);
    float* dst = base + p * K * kLanes;
    for (int64_t k = 0; k < K && n < kLanes; ++k) std::fill(dst + k * kLanes + n, dst + (k + 1) * kLanes, 0.0f);
  }
  return m;
}

PackedMatrix PackedMatrix::from_rows(PanelType type, const void* W, int64_t K, int64_t N, int64_t ldw) {
  PackedMatrix m = allocate(type, K, N);
  const int64_t panels = (N + kLanes - 1) / kLanes;
  uint16_t* base = reinterpret_cast<uint16_t*>(m.data_);
  const auto* src = static_cast<const unsigned char*>(W);
  constexpr int64_t kRowsAtOnce = 16;  // as for float32 rows
#pragma omp parallel for schedule(static) if (K * N >= (int64_t{1} << 20))
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t j = p * kLanes;
    const int n = static_cast<int>(std::min<int64_t>(kLanes, N - j));
    uint16_t* dst = base + p * K * kLanes;
    for (int64_t k0 = 0; k0 < K; k0 += kRowsAtOnce)
      for (int64_t k = k0; k < std::min(K, k0 + kRowsAtOnce); ++k) {
        std::memcpy(dst + k * kLanes, src + 2 * (k * ldw + j), static_cast<size_t>(n) * sizeof(uint16_t));
        std::fill(dst + k * kLanes + n, dst + (k + 1) * kLanes, uint16_t{0});
      }
  }
  return m;
}

PackedMatrix PackedMatrix::from_transposed_rows(PanelType type, int64_t N, int64_t K,
                                                const std::function<const void*(int64_t j)>& row,
                                                const CopySource& copy) {
  PackedMatrix m = allocate(type, K, N);
  const int64_t panels = (N + kLanes - 1) / kLanes;
  uint16_t* base = reinterpret_cast<uint16_t*>(m.data_);
  const size_t row_bytes = static_cast<size_t>(K) * sizeof(uint16_t);
  // Panels go in blocks whose source rows (about 256 KiB) are fetched together and stay in L2
  // while they are counted and transposed.
  const int64_t block_panels = std::max<int64_t>(1, (int64_t{256} << 10) / static_cast<int64_t>(row_bytes * kLanes));
  const int64_t blocks = (panels + block_panels - 1) / block_panels;
  // A block of kKAtOnce k-steps of a panel stays in L1 while its source rows fill it: a
  // panel of a long K (the MLP's output, K = d_mlp) is larger than L1.
  constexpr int64_t kKAtOnce = 64;
  int64_t bad = 0;
#pragma omp parallel reduction(+ : bad) if (K * N >= (int64_t{1} << 20))
  {
    std::vector<const unsigned char*> rows;
    std::vector<unsigned char> stage;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t p0 = b * block_panels, p1 = std::min(panels, p0 + block_panels);
      const int64_t j0 = p0 * kLanes, j1 = std::min(N, p1 * kLanes);
      rows.resize(static_cast<size_t>(j1 - j0));
      for (int64_t j = j0; j < j1; ++j) rows[static_cast<size_t>(j - j0)] = static_cast<const unsigned char*>(row(j));
      if (copy) {  // runs of rows that lie one after another in the source, one copy each
        stage.resize(rows.size() * row_bytes);
        for (size_t a = 0, e = 0; a < rows.size(); a = e) {
          for (e = a + 1; e < rows.size() && rows[e] == rows[e - 1] + row_bytes;) ++e;
          unsigned char* dst = stage.data() + a * row_bytes;
          if (!copy(rows[a], (e - a) * row_bytes, dst)) continue;
          for (size_t i = a; i < e; ++i) rows[i] = dst + (i - a) * row_bytes;
        }
      }
      for (const unsigned char* r : rows) bad += count_non_finite16(r, K, type);
      for (int64_t p = p0; p < p1; ++p) {
        uint16_t* dst = base + p * K * kLanes;
        const unsigned char* src[kLanes];
        for (int l = 0; l < kLanes; ++l) src[l] = p * kLanes + l < N ? rows[static_cast<size_t>(p * kLanes + l - j0)] : nullptr;
        for (int64_t k0 = gather_transposed(src, K, sizeof(uint16_t), dst); k0 < K; k0 += kKAtOnce) {
          const int64_t k1 = std::min(K, k0 + kKAtOnce);
          for (int l = 0; l < kLanes; ++l)
            for (int64_t k = k0; k < k1; ++k) dst[k * kLanes + l] = src[l] ? read16(src[l] + 2 * k) : uint16_t{0};
        }
      }
    }
  }
  m.non_finite_ = bad;
  return m;
}

void PackedMatrix::unpack_rows(float* W) const {
  const int64_t panels = (N_ + kLanes - 1) / kLanes;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t j = p * kLanes;
    const int64_t n = std::min<int64_t>(kLanes, N_ - j);
    if (type_ == PanelType::F32) {
      const float* src = static_cast<const float*>(panel(p));
      for (int64_t k = 0; k < K_; ++k)
        std::memcpy(W + k * N_ + j, src + k * kLanes, static_cast<size_t>(n) * sizeof(float));
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(panel(p));
      for (int64_t k = 0; k < K_; ++k)
        for (int64_t l = 0; l < n; ++l) W[k * N_ + j + l] = widen(type_, src[k * kLanes + l]);
    }
  }
}

int64_t count_non_finite16(const void* p, int64_t n, PanelType type) {
  // Four values per 64-bit word: a lane is bad when its exponent bits XOR the all-ones exponent
  // are zero, found with the exact zero-lane test (no carries between lanes).
  const uint16_t exponent = type == PanelType::BF16 ? 0x7f80 : 0x7c00;
  const uint64_t e4 = exponent * 0x0001000100010001ull, low = 0x7fff7fff7fff7fffull;
  const auto* bytes = static_cast<const unsigned char*>(p);
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n >= (int64_t{1} << 22))
  for (int64_t i = 0; i < n / 4; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes + 8 * i, sizeof w);
    const uint64_t y = (w & e4) ^ e4;  // lane zero: all exponent bits set
    bad += std::popcount(~(((y & low) + low) | y) & ~low);
  }
  for (int64_t i = n / 4 * 4; i < n; ++i) bad += (read16(bytes + 2 * i) & exponent) == exponent;
  return bad;
}

PackedMatrix PackedMatrix::leading_columns(int64_t n) const {
  if (n < 0 || n > N_ || (n % kLanes != 0 && n != N_))
    throw std::logic_error("PackedMatrix::leading_columns: " + std::to_string(n) + " of " + std::to_string(N_) +
                           " columns is not a whole number of panels");
  PackedMatrix m = *this;
  m.N_ = n;
  m.bytes_ = bytes_for(type_, K_, n);
  if (non_finite_ != 0) m.non_finite_ = -1;  // a count of all the columns says nothing of these
  return m;
}

int64_t PackedMatrix::count_non_finite() const {
  if (non_finite_ >= 0) return non_finite_;
  const int64_t n = (N_ + kLanes - 1) / kLanes * K_ * kLanes;  // the padding columns are zeros
  int64_t bad = 0;
  if (type_ == PanelType::F32) {
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(data_);
    for (int64_t i = 0; i < n; ++i) bad += (bits[i] & 0x7f800000u) == 0x7f800000u;
  } else {
    const uint16_t exponent = type_ == PanelType::BF16 ? 0x7f80 : 0x7c00;
    const uint16_t* bits = reinterpret_cast<const uint16_t*>(data_);
    for (int64_t i = 0; i < n; ++i) bad += (bits[i] & exponent) == exponent;
  }
  return bad;
}

void PackedMatrix::column(int64_t j, float* out) const {
  if (type_ == PanelType::F32) {
    const float* src = static_cast<const float*>(panel(j / kLanes)) + j % kLanes;
    for (int64_t k = 0; k < K_; ++k) out[k] = src[k * kLanes];
    return;
  }
  const uint16_t* src = static_cast<const uint16_t*>(panel(j / kLanes)) + j % kLanes;
  for (int64_t k = 0; k < K_; ++k) out[k] = widen(type_, src[k * kLanes]);
}

namespace {

// Floats that pack_row_tile may write past a tile's K * kTallRows (lanes it never meant to keep).
constexpr int64_t kPackRowsSlack = 8;

// A row tile's rows packed k-major for tile<..., PackedRows = true>: dst[k * kTallRows + r] =
// x[r * ldx + k] for r < rows (the other lanes of a step are never read). Element by element this
// was a third of gemm_segments' own samples in a batched scan (perf annotate: a scalar load and a
// store 24 bytes from the last per value). With AVX, eight k steps of eight rows (rows past `rows`
// repeat the first) are transposed in registers and each step stored as one vector at its place:
// its lanes past kTallRows spill into the next step's, which is stored after it, and the last
// step's into kPackRowsSlack floats after the tile, or into the next tile's, packed after it.
void pack_row_tile(const float* x, int64_t ldx, int rows, int64_t K, float* dst) {
  int64_t k = 0;
#if defined(__AVX__)
  static_assert(kTallRows <= 8 && 8 - kTallRows <= kPackRowsSlack);
  for (; k + 8 <= K; k += 8) {
    __m256 v[8];
    for (int r = 0; r < 8; ++r) v[r] = _mm256_loadu_ps(x + (r < rows ? r : 0) * ldx + k);
    const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    float* out = dst + k * kTallRows;  // step k + i: rows 0..7 of column k + i
    _mm256_storeu_ps(out + 0 * kTallRows, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(out + 1 * kTallRows, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(out + 2 * kTallRows, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(out + 3 * kTallRows, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(out + 4 * kTallRows, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(out + 5 * kTallRows, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(out + 6 * kTallRows, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(out + 7 * kTallRows, _mm256_permute2f128_ps(s3, s7, 0x31));
  }
#endif
  for (; k < K; ++k)
    for (int r = 0; r < rows; ++r) dst[k * kTallRows + r] = x[r * ldx + k];
}

// out rows in segments: segment s holds its rows contiguously (stride ldo) from its pointer. Row
// tiles never cross a segment, and each tile's arithmetic is the same wherever its rows live.
void gemm_segments(int64_t M, const float* x, int64_t ldx, const PackedMatrix& W, int64_t k0, int64_t k1,
                   const float* bias, std::span<const std::pair<float*, int64_t>> segments, int64_t ldo) {
  const int64_t N = W.cols();
  if (M <= 0 || N <= 0) return;
  if (k1 <= k0) {  // an empty sum: the bias alone
    for (const auto& [out, rows] : segments)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < N; ++j) out[i * ldo + j] = bias ? bias[j] : 0.0f;
    return;
  }
  const int64_t panels = (N + kLanes - 1) / kLanes;
  const int64_t pstride = W.rows() * kLanes;
  const int width = M <= kFewRows ? kWide : M < kTallFrom ? 2 : kTallWidth;  // panels per tile
  const int max_rows = M <= kFewRows ? kFewRows : M < kTallFrom ? kMidRows : kTallRows;
  const int64_t groups = (panels + width - 1) / width;
  // Row tiles of near-equal height within each segment: 20 rows as 10 + 10, not 12 + 8.
  struct RowTile {
    const float* x;  // its first row, at k0
    float* out;      // its first row's output, at column 0
    int rows;
  };
  std::vector<RowTile> row_tiles;
  int64_t i = 0;  // the segment's first row among the M
  for (const auto& [out, rows_in_segment] : segments) {
    const int64_t tiles = (rows_in_segment + max_rows - 1) / max_rows;
    const int64_t base_rows = rows_in_segment / tiles, extra_rows = rows_in_segment % tiles;
    for (int64_t t = 0, r0 = 0; t < tiles; ++t) {
      const int rows = static_cast<int>(base_rows + (t < extra_rows ? 1 : 0));
      row_tiles.push_back({x + (i + r0) * ldx, out + r0 * ldo, rows});
      r0 += rows;
    }
    i += rows_in_segment;
  }
  // A 16-bit matrix is widened inside the tile while few row tiles read each K block; with more,
  // the block is widened once into float32 panels that every row tile then reads, as a float32
  // matrix's would be. Either way the tiles do the same arithmetic on the same floats.
  const bool widen_first = W.type() != PanelType::F32 && static_cast<int64_t>(row_tiles.size()) >= kWidenFromRowTiles;
  const PanelType tile_type = widen_first ? PanelType::F32 : W.type();
  const size_t element_bytes = W.type() == PanelType::F32 ? sizeof(float) : sizeof(uint16_t);
  // Many rows (a batch of prompts) are taken kMBlockRows at a time, every panel group over one
  // block of rows before the next: the block's rows stay in L2 while the panels stream past,
  // instead of every row being read again from memory for each panel group. Each output's chain
  // of multiply-adds is the same, so the bits are too.
  const int64_t tiles_per_block = std::max<int64_t>(1, kMBlockRows / max_rows);
  const int64_t n_tiles = static_cast<int64_t>(row_tiles.size());
  // Below ~2 MFLOP a second thread costs more to wake than it saves.
  const bool parallel = groups > 1 && M * N * (k1 - k0) >= (int64_t{1} << 20);
  // Panel groups a thread takes at a time (see the loop below): about eight turns a thread.
  const int64_t dynamic_chunk = std::max<int64_t>(1, groups / (8 * omp_get_max_threads()));
  // A tall product of one K block (d_model deep: every product but the MLP's output) packs its
  // rows k-major, a row block at a time (each thread its own copy, a small fraction of the
  // multiply-adds that read it), for tile<..., PackedRows = true>, which is faster on tall products.
  // Deeper products keep each output tile's K blocks together instead: packing them a K block at a
  // time across the panel groups was slower (docs/benchmarks.md, "Measurements behind the code").
  const bool pack_rows = tile_type == PanelType::F32 && max_rows == kTallRows && n_tiles > tiles_per_block &&
                         k1 - k0 <= kKBlock;
#pragma omp parallel if (parallel)
  {
    std::vector<float> widened;  // [width panels, K block, kLanes] when widen_first
    if (widen_first) widened.resize(static_cast<size_t>(width * std::min(kKBlock, k1 - k0) * kLanes));
    std::vector<float> packed;   // [row tile of the block, k, kTallRows] when pack_rows
    if (pack_rows) packed.resize(static_cast<size_t>(tiles_per_block * (k1 - k0) * kTallRows + kPackRowsSlack));
    for (int64_t t0 = 0; t0 < n_tiles; t0 += tiles_per_block) {
      const int64_t t1 = std::min(n_tiles, t0 + tiles_per_block);
      if (pack_rows)
        for (int64_t t = t0; t < t1; ++t) {
          const RowTile& rt = row_tiles[static_cast<size_t>(t)];
          pack_row_tile(rt.x, ldx, rt.rows, k1 - k0, packed.data() + (t - t0) * (k1 - k0) * kTallRows);
        }
      const auto run_group = [&](int64_t g) {
        const int64_t p0 = g * width;
        const int np = static_cast<int>(std::min<int64_t>(width, panels - p0));
        const int last_cols = p0 + np == panels ? static_cast<int>(N - (panels - 1) * kLanes) : kLanes;
        for (int64_t kb = k0; kb < k1; kb += kKBlock) {
          const int64_t ke = std::min(k1, kb + kKBlock);
          const void* block = static_cast<const unsigned char*>(W.panel(p0)) + static_cast<size_t>(kb * kLanes) * element_bytes;
          int64_t block_stride = pstride;
          if (widen_first) {
            if (W.type() == PanelType::BF16) widen_panels<BF16Panels>(block, pstride, np, ke - kb, widened.data());
            else widen_panels<F16Panels>(block, pstride, np, ke - kb, widened.data());
            block = widened.data();
            block_stride = (ke - kb) * kLanes;
          }
          TileArgs a{ke - kb, nullptr, ldx, block, block_stride, kb > k0,
                     ke == k1 && bias ? bias + p0 * kLanes : nullptr, last_cols, nullptr, ldo};
          // The block this thread reads next (the next K block, else the next panel group's
          // first; after the last group of a turn that group may go to another thread, and the
          // fetch is wasted), fetched a share per row tile while these tiles compute. Otherwise
          // the first tile reads a block from memory at the memory's pace while the others find
          // it in cache: with 20 rows (4 tiles a block) fetching ahead took GPT-2 small's full-cache
          // pass from 66 to 57 ms on one thread and from 36 to 31 ms on two (docs/benchmarks.md).
          // A block that a single tile reads (a row or two) streams at the memory's pace either
          // way, and fetching ahead there only competes with it.
          const int64_t nkb = ke < k1 ? ke : k0, ng = ke < k1 ? g : g + 1;
          const bool fetch_next = ng < groups && t1 - t0 >= 2;
          const int64_t next_lines = ((std::min(k1, nkb + kKBlock) - nkb) * kLanes * static_cast<int64_t>(element_bytes) + 63) / 64;
          const char* next_block = fetch_next ? static_cast<const char*>(W.panel(ng * width)) + static_cast<size_t>(nkb * kLanes) * element_bytes : nullptr;
          const int64_t share = (next_lines + (t1 - t0) - 1) / (t1 - t0);
          if (fetch_next) {
            a.pf_pstride = pstride * static_cast<int64_t>(element_bytes);
            a.pf_panels = static_cast<int>(std::min<int64_t>(width, panels - ng * width));
            while (((ke - kb) >> (a.pf_shift + 1)) >= share) ++a.pf_shift;
          }
          // One TileArgs for the block's tiles, its per-tile fields set in place. A copy of `a` per
          // tile was built by GCC from 8-byte stores read back as 16-byte loads, which the store
          // buffer cannot forward: a stall of each copy, the larger part of gemm_segments' own
          // samples in a batched scan (perf annotate).
          TileArgs at = a;
          for (int64_t t = t0; t < t1; ++t) {
            const RowTile& rt = row_tiles[static_cast<size_t>(t)];
            at.out = rt.out + p0 * kLanes;
            if (fetch_next) {
              const int64_t first = (t - t0) * share;
              at.pf = next_block + first * 64;
              at.pf_lines = std::min(share, next_lines - first);
            }
            if (pack_rows) {
              at.x = packed.data() + (t - t0) * (k1 - k0) * kTallRows;
              packed_tile_for(rt.rows, np)(at);
            } else {
              at.x = rt.x + (kb - k0);
              tile_for(tile_type, rt.rows, np)(at);
            }
          }
        }
      };
      // The panel groups are handed out a few at a time, not a static half to each thread: on
      // two threads a static split left one waiting for the other at the end of every product
      // (about 9% of a 20-token pass, 4% of a batched scan), since this host's cores run at
      // different speeds from one moment to the next. No barrier between row blocks: a thread
      // writes only the columns of the groups it takes, and reads only its own packed rows. Which
      // thread computes a tile changes nothing in it.
#pragma omp for schedule(dynamic, dynamic_chunk) nowait
      for (int64_t g = 0; g < groups; ++g) run_group(g);
    }
  }
}

}  // namespace

int64_t panel_floats(int64_t K, int64_t N) { return (N + kLanes - 1) / kLanes * kLanes * K; }

void pack_transposed_into(float* panels, int64_t K, int64_t j0, int64_t n, const float* src, int64_t ld) {
  const auto one_column = [&](int64_t j) {
    float* dst = panels + (j / kLanes) * K * kLanes + j % kLanes;
    const float* col = src + (j - j0) * ld;
    for (int64_t k = 0; k < K; ++k) dst[k * kLanes] = col[k];
  };
  int64_t j = j0;
  while (j < j0 + n && j % kLanes != 0) one_column(j++);
  for (; j + kLanes <= j0 + n; j += kLanes) {  // a whole panel: a gather, else one vector store per k
    float* dst = panels + (j / kLanes) * K * kLanes;
    const float* cols = src + (j - j0) * ld;
    const unsigned char* rows[kLanes];
    for (int l = 0; l < kLanes; ++l) rows[l] = reinterpret_cast<const unsigned char*>(cols + l * ld);
    for (int64_t k = gather_transposed(rows, K, sizeof(float), dst); k < K; ++k) {
      float lanes[kLanes];
      for (int l = 0; l < kLanes; ++l) lanes[l] = cols[l * ld + k];
      store(dst + k * kLanes, load(lanes));
    }
  }
  while (j < j0 + n) one_column(j++);
}

void pack_rows_into(float* panels, int64_t K, int64_t N, int64_t k0, int64_t n, const float* src, int64_t ld) {
  const int64_t full = N / kLanes;  // whole panels: a vector's copy each (a memcpy of variable size was a call)
  for (int64_t k = k0; k < k0 + n; ++k) {
    const float* row = src + (k - k0) * ld;
    for (int64_t p = 0; p < full; ++p) store(panels + (p * K + k) * kLanes, load(row + p * kLanes));
    if (full * kLanes < N)
      std::memcpy(panels + (full * K + k) * kLanes, row + full * kLanes, static_cast<size_t>(N - full * kLanes) * sizeof(float));
  }
}

void packed_gemm_lower(int64_t M, const float* x, int64_t ldx, const float* panels, int64_t K, int64_t N,
                       int64_t first, LowerLimit limit, float* out, int64_t ldo) {
  // The tiles of a product of a few dozen rows (see gemm_segments); lanes past N (and past a
  // row's columns) are computed from whatever the panels hold there and never stored.
  const int64_t pstride = K * kLanes;
  for (int64_t r0 = 0; r0 < M;) {
    const int rows = static_cast<int>(std::min<int64_t>(kMidRows, M - r0));
    const int64_t reach = first + r0 + rows;  // one past the last key of the tile's last row
    const int64_t cols = limit == LowerLimit::Columns ? std::min(N, reach) : N;
    const int64_t depth = limit == LowerLimit::Depth ? std::min(K, reach) : K;
    const int64_t n_panels = (cols + kLanes - 1) / kLanes;
    for (int64_t p0 = 0; p0 < n_panels; p0 += 2) {
      const int np = static_cast<int>(std::min<int64_t>(2, n_panels - p0));
      const int last_cols = p0 + np == n_panels ? static_cast<int>(cols - (n_panels - 1) * kLanes) : kLanes;
      const TileArgs a{depth, x + r0 * ldx, ldx, panels + p0 * pstride, pstride, false, nullptr, last_cols,
                       out + r0 * ldo + p0 * kLanes, ldo};
      tile_for(PanelType::F32, rows, np)(a);
    }
    r0 += rows;
  }
}

void packed_gemm(int64_t M, const float* x, int64_t ldx, const PackedMatrix& W, int64_t k0, int64_t k1,
                 const float* bias, float* out, int64_t ldo) {
  const std::pair<float*, int64_t> all{out, M};
  gemm_segments(M, x, ldx, W, k0, k1, bias, {&all, 1}, ldo);
}

void packed_gemm(const float* x, int64_t ldx, const PackedMatrix& W, int64_t k0, int64_t k1, const float* bias,
                 std::span<const std::pair<float*, int64_t>> out_segments, int64_t ldo) {
  int64_t M = 0;
  for (const auto& segment : out_segments) M += segment.second;
  gemm_segments(M, x, ldx, W, k0, k1, bias, out_segments, ldo);
}

// ---- dx = dy W^T ----
//
// dx[i, k] = sum over j of dy[i, j] * W[k, j]: row k of W is one k-step of every panel, kLanes
// values contiguous in each. Each output keeps kLanes partial sums, lane l of panel p adding
// dy[i, p * kLanes + l] * W[k, p * kLanes + l], panels in order; after the last panel the lanes are
// added in one fixed tree (sum_lanes). So every output's bits are fixed by its row of dy and of W
// alone: not by M, the tiles, the blocking or the threads.
//
// The partial sums of a block of outputs (rows x depth vectors) live in a buffer in L2 while the
// panels stream past in order, a group at a time: for each row tile, a register tile of R rows x D
// k-steps walks down the block's depth, carrying its sums across the group's panels and putting
// them back. The first row tile reads each panel's slice of the block sequentially from memory,
// the others from L2. Threads take contiguous ranges of k.
namespace {

// The register tile: R rows of dy x D k-steps, R * D accumulators + R vectors of dy + one weight
// vector. Each weight vector read serves R multiply-adds and each dy vector D; AVX-512 has 32
// registers, AVX2 and SSE 16. bench_kernels chose 5 x 5 over 3 x 8 and 4 x 5 at 20 rows
// (docs/benchmarks.md): with 3 rows the weights' traffic from L2 set the pace.
#if defined(__AVX512F__)
constexpr int kTRows = 5;
constexpr int kTDepth = 5;
#else
constexpr int kTRows = 4;
constexpr int kTDepth = 2;
#endif
// Panels a tile reads between visits to the buffer of partial sums: many when several row tiles
// share them from L2 (the buffer's loads and stores then count for little), few when one row
// tile streams them from memory (fewer streams for the prefetchers). 24 rather than 32 since the
// later row tiles prefetch the next block (gemm_t_range); bench_kernels chose it
// (docs/benchmarks.md, "Measurements behind the code").
constexpr int kTGroup = 24;
constexpr int kTGroupOneTile = 8;
constexpr int64_t kTBufferVectors = 2048;  // partial sums per thread: 128 KiB with AVX-512, in L2
constexpr int64_t kTBlockRows = 64;         // rows of dy per block, at most

struct TileTArgs {
  int np;              // panels
  const float* dy;     // first row, at the first panel's first column
  int64_t lddy;
  const void* w;       // first panel, at the tile's first k
  int64_t pstride;     // elements from one panel to the next
  bool resume;         // add to the partial sums in acc (from earlier panels), else start from 0
  Vec* acc;            // [rows][depth] partial sums, ldacc vectors from one row to the next
  int64_t ldacc;
  // Lines to fetch into cache while this tile computes (see gemm_t_range): panel q's D k-steps at
  // ahead + q * pstride, for the panels q < ahead_np with q % ahead_every == ahead_phase.
  const void* ahead;
  int ahead_np, ahead_every, ahead_phase;
};

template <int R, int D, class Panels>
void tile_t(const TileTArgs& a) {
  Vec acc[R][D];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < D; ++t) acc[r][t] = Vec{};
  if (a.resume)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int t = 0; t < D; ++t) acc[r][t] = a.acc[r * a.ldacc + t];
  const auto* w = static_cast<const typename Panels::T*>(a.w);
  for (int q = 0; q < a.np; ++q) {
    Vec d[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) d[r] = load(a.dy + r * a.lddy + q * kLanes);
    if (a.ahead && q < a.ahead_np && q % a.ahead_every == a.ahead_phase) {
      const auto* lines = reinterpret_cast<const char*>(static_cast<const typename Panels::T*>(a.ahead) + q * a.pstride);
#pragma GCC unroll 16
      for (int b = 0; b < D * kLanes * static_cast<int>(sizeof(typename Panels::T)); b += 64) __builtin_prefetch(lines + b, 0, 2);
    }
#pragma GCC unroll 16
    for (int t = 0; t < D; ++t) {
      Vec wv = Panels::load(w + q * a.pstride + t * kLanes);
      // In a register: GCC would otherwise fold the load into each of the R multiply-adds, R loads
      // of one vector, and the load ports, not the FMA units, would set the pace.
      if constexpr (R > 1) asm("" : "+v"(wv));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][t] = madd(acc[r][t], d[r], wv);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < D; ++t) a.acc[r * a.ldacc + t] = acc[r][t];
}

using TileTFn = void (*)(const TileTArgs&);
template <class Panels, int... I>
constexpr std::array<TileTFn, sizeof...(I)> tiles_t_of(std::integer_sequence<int, I...>) {
  return {&tile_t<I / kTDepth + 1, I % kTDepth + 1, Panels>...};
}
// The tile of `rows` rows (at most kTRows) and `depth` k-steps (at most kTDepth).
template <class Panels>
TileTFn tile_t_for(int rows, int depth) {
  static constexpr auto tiles = tiles_t_of<Panels>(std::make_integer_sequence<int, kTRows * kTDepth>{});
  return tiles[static_cast<size_t>((rows - 1) * kTDepth + depth - 1)];
}

// The last panel when N is not a multiple of kLanes: its lanes past N are zeroed in the weights as
// well as in dy, so whatever the padding holds adds nothing. Once per block of outputs, so plain
// loops; the same multiply-add per lane as the tiles.
template <class Panels>
void last_panel_t(int64_t rows, int64_t depth, const float* dy, int64_t lddy, const void* w, int cols, bool resume,
                  Vec* acc, int64_t ldacc) {
  typedef int32_t Mask __attribute__((vector_size(kLanes * sizeof(int32_t))));
  Mask keep;
  for (int l = 0; l < kLanes; ++l) keep[l] = l < cols ? -1 : 0;
  const auto* p = static_cast<const typename Panels::T*>(w);
  for (int64_t i = 0; i < rows; ++i) {
    const Vec d = load_n(dy + i * lddy, cols);
    for (int64_t k = 0; k < depth; ++k) {
      Vec wv = Panels::load(p + k * kLanes);
      Mask bits;
      std::memcpy(&bits, &wv, sizeof bits);
      bits &= keep;
      std::memcpy(&wv, &bits, sizeof wv);
      Vec s = resume ? acc[i * ldacc + k] : Vec{};
      s = madd(s, d, wv);
      acc[i * ldacc + k] = s;
    }
  }
}

// One level of the lane tree over a pair of vectors x, y that each hold kLanes / (2 h) outputs'
// 2h partial sums in consecutive lanes: the result holds both vectors' outputs, h partial sums
// each, partial e being partial e + partial e + h.
constexpr int tree_index(int h, int m) {
  const int outputs = kLanes / (2 * h), o = m / h, e = m % h;
  return (o < outputs ? 0 : kLanes) + (o % outputs) * 2 * h + e;
}
template <int H, size_t... I>
Vec tree_level(Vec x, Vec y, std::index_sequence<I...>) {
  return __builtin_shufflevector(x, y, tree_index(H, static_cast<int>(I))...) +
         __builtin_shufflevector(x, y, (tree_index(H, static_cast<int>(I)) + H)...);
}
template <int H>
void tree_levels(Vec* v, int n) {
  for (int j = 0; j < n / 2; ++j) v[j] = tree_level<H>(v[2 * j], v[2 * j + 1], std::make_index_sequence<kLanes>{});
  if constexpr (H > 1) tree_levels<H / 2>(v, n / 2);
}
// Lane l of the result: the sum of v[l]'s lanes, added in halves (lane e + lane e + kLanes / 2,
// then the same on the first half, ...): kLanes outputs at a time with shuffles, one fixed tree
// for every output.
Vec sum_lanes(Vec v[kLanes]) {
  tree_levels<kLanes / 2>(v, kLanes);
  return v[0];
}

// Outputs [ka, kb) of dx (columns ka - k0 ...), rows [0, M), on one thread.
template <class Panels>
void gemm_t_range(int64_t M, const float* dy, int64_t lddy, const PackedMatrix& W, int64_t k0, int64_t ka, int64_t kb,
                  float* dx, int64_t lddx, bool accumulate) {
  const int64_t N = W.cols();
  const int64_t full = N / kLanes;  // panels with every column in the matrix
  const int last_cols = static_cast<int>(N - full * kLanes);
  const int64_t pstride = W.rows() * kLanes;
  // Row blocks of near-equal height, at most kTBlockRows; depth blocks as long as the buffer allows.
  const int64_t row_blocks = (M + kTBlockRows - 1) / kTBlockRows;
  const int64_t block_rows_max = (M + row_blocks - 1) / row_blocks;
  const int64_t depth_max =
      std::min(kb - ka, std::max<int64_t>(kTDepth, kTBufferVectors / block_rows_max / kTDepth * kTDepth));
  const size_t vectors = static_cast<size_t>(block_rows_max * depth_max);
  const std::unique_ptr<void, decltype(&std::free)> buffer(std::aligned_alloc(sizeof(Vec), vectors * sizeof(Vec)),
                                                          &std::free);
  if (!buffer) throw std::bad_alloc();
  Vec* acc = static_cast<Vec*>(buffer.get());
  for (int64_t rb = 0, i0 = 0; rb < row_blocks; ++rb) {
    const int64_t rows = M / row_blocks + (rb < M % row_blocks ? 1 : 0);
    const int64_t row_tiles = (rows + kTRows - 1) / kTRows;  // of near-equal height: 20 rows as 4 x 5
    const int64_t group = row_tiles > 1 ? kTGroup : kTGroupOneTile;
    for (int64_t kd = ka; kd < kb; kd += depth_max) {
      const int64_t depth = std::min(depth_max, kb - kd);
      for (int64_t p0 = 0; p0 < full; p0 += group) {
        TileTArgs a{static_cast<int>(std::min<int64_t>(group, full - p0)), nullptr, lddy, nullptr, pstride, p0 > 0,
                    nullptr, depth, nullptr, 0, 1, 0};
        const auto* panels = static_cast<const typename Panels::T*>(W.panel(p0));
        // The block's panels come from memory in the first row tile, as many streams as panels,
        // each a few lines per sweep: more than the hardware prefetchers follow, and the tile
        // waits on memory while the others compute from L2. So the later row tiles fetch the next
        // block (the next group of panels, or the first group at the next depth), a share of its
        // panels each, and the first row tile finds it in L2. (A single row tile streams few
        // panels at a time, which the hardware follows: prefetching its next sweep made it slower.)
        int64_t next_p0 = p0 + group, next_kd = kd;
        if (next_p0 >= full) next_p0 = 0, next_kd = kd + depth_max;
        const int64_t next_depth = next_kd < kb ? std::min(depth_max, kb - next_kd) : 0;
        const auto* next_panels = static_cast<const typename Panels::T*>(W.panel(next_p0));
        const int next_np = static_cast<int>(std::min<int64_t>(group, full - next_p0));
        for (int64_t tile = 0, r = 0; tile < row_tiles; ++tile) {
          const int n = static_cast<int>(rows / row_tiles + (tile < rows % row_tiles ? 1 : 0));
          a.dy = dy + (i0 + r) * lddy + p0 * kLanes;
          for (int64_t t = 0; t < depth; t += kTDepth) {
            const int d = static_cast<int>(std::min<int64_t>(kTDepth, depth - t));
            a.w = panels + (kd + t) * kLanes;
            a.acc = acc + r * depth + t;
            a.ahead = nullptr;
            if (tile > 0 && t < next_depth) {
              a.ahead = next_panels + (next_kd + t) * kLanes, a.ahead_np = next_np;
              a.ahead_every = static_cast<int>(row_tiles - 1), a.ahead_phase = static_cast<int>(tile - 1);
            }
            tile_t_for<Panels>(n, d)(a);
          }
          r += n;
        }
      }
      if (last_cols > 0)
        last_panel_t<Panels>(rows, depth, dy + i0 * lddy + full * kLanes, lddy,
                             static_cast<const typename Panels::T*>(W.panel(full)) + kd * kLanes, last_cols, full > 0,
                             acc, depth);
      // The lanes of kLanes outputs at a time; a short last group is padded with zeros (their sums
      // are not stored), so it takes the same tree.
      for (int64_t r = 0; r < rows; ++r) {
        float* out = dx + (i0 + r) * lddx + (kd - k0);
        for (int64_t t = 0; t < depth; t += kLanes) {
          const int n = static_cast<int>(std::min<int64_t>(kLanes, depth - t));
          Vec v[kLanes];
          for (int l = 0; l < kLanes; ++l) v[l] = l < n ? acc[r * depth + t + l] : Vec{};
          Vec s = sum_lanes(v);
          if (accumulate) s = load_n(out + t, n) + s;
          store_n(out + t, s, n);
        }
      }
    }
    i0 += rows;
  }
}

}  // namespace

void packed_gemm_transposed(int64_t M, const float* dy, int64_t lddy, const PackedMatrix& W, int64_t k0, int64_t k1,
                            float* dx, int64_t lddx, bool accumulate) {
  const int64_t depth = k1 - k0, N = W.cols();
  if (M <= 0 || depth <= 0) return;
  if (N <= 0) {  // an empty sum
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(dx + i * lddx, dx + i * lddx + depth, 0.0f);
    return;
  }
  auto range = [&](int64_t ka, int64_t kb) {
    switch (W.type()) {
      case PanelType::BF16: return gemm_t_range<BF16Panels>(M, dy, lddy, W, k0, ka, kb, dx, lddx, accumulate);
      case PanelType::F16: return gemm_t_range<F16Panels>(M, dy, lddy, W, k0, ka, kb, dx, lddx, accumulate);
      default: return gemm_t_range<F32Panels>(M, dy, lddy, W, k0, ka, kb, dx, lddx, accumulate);
    }
  };
  // As for the forward product: below ~2 MFLOP a second thread costs more to wake than it saves.
  const int64_t steps = (depth + kTDepth - 1) / kTDepth;
  const bool parallel = steps > 1 && M * N * depth >= (int64_t{1} << 20);
#pragma omp parallel if (parallel)
  {
    // Contiguous ranges of k, whole tiles each.
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t ka = k0 + std::min(depth, t * steps / threads * kTDepth);
    const int64_t kb = k0 + std::min(depth, (t + 1) * steps / threads * kTDepth);
    if (kb > ka) range(ka, kb);
  }
}

}  // namespace hs
