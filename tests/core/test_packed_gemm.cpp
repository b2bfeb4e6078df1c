// packed_gemm against a double-precision product, on shapes that hit every path: the wide tiles
// of one to four rows, the two-panel tiles up to 12 rows, the three-panel tiles from 128 rows,
// blocked K (over 768), a last panel narrower than a vector, row ranges of W (a head's rows of
// W_O), strides wider than the matrices, with and without bias, on one and two threads; and
// 16-bit panels against their float32 conversion, bit for bit.
#include <omp.h>

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/model/packed_gemm.h"
#include "core/tensor/half.h"

namespace {

struct Case {
  int64_t M, N, K, k0, k1;  // W is [K, N]; the product uses its rows [k0, k1)
};

std::vector<float> random_vector(size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// Each float's top 16 bits: BF16 by truncation (any 16-bit values do for these tests).
std::vector<uint16_t> bf16_by_truncation(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], sizeof bits);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

}  // namespace

TEST_CASE("packed_gemm equals a float64 product on every path", "[packed_gemm]") {
  std::mt19937 gen(11);
  const Case cases[] = {{1, 768, 64, 0, 64},     {2, 2304, 96, 0, 96},   {3, 300, 17, 0, 17},   {4, 129, 33, 0, 33},
                        {5, 129, 33, 0, 33},     {6, 256, 8, 0, 8},      {7, 1000, 5, 0, 5},    {20, 768, 64, 0, 64},
                        {20, 2304, 768, 0, 768}, {13, 31, 9, 0, 9},      {64, 3072, 40, 0, 40}, {1, 5, 3, 0, 3},
                        {2, 1, 1, 0, 1},         {11, 160, 1, 0, 1},     {25, 50, 1600, 0, 1600},
                        {130, 70, 20, 0, 20},    {200, 97, 900, 0, 900}, {20, 768, 768, 128, 192},
                        {3, 100, 300, 250, 300}, {9, 33, 10, 4, 4}};
  for (const Case& c : cases)
    for (int threads : {1, 2})
      for (bool with_bias : {false, true}) {
        const int64_t ldw = c.N + 5, Kx = c.k1 - c.k0, ldx = Kx + 3, ldo = c.N + 7;
        const auto x = random_vector(static_cast<size_t>(c.M * ldx), gen);
        const auto W = random_vector(static_cast<size_t>(c.K * ldw), gen);
        const auto b = random_vector(static_cast<size_t>(c.N), gen);
        std::vector<float> out(static_cast<size_t>(c.M * ldo), 12345.0f);
        const hs::PackedMatrix P = hs::PackedMatrix::from_rows(W.data(), c.K, c.N, ldw);
        REQUIRE(P.rows() == c.K);
        REQUIRE(P.cols() == c.N);
        omp_set_num_threads(threads);
        hs::packed_gemm(c.M, x.data(), ldx, P, c.k0, c.k1, with_bias ? b.data() : nullptr, out.data(), ldo);
        omp_set_num_threads(omp_get_num_procs());
        INFO("M " << c.M << " N " << c.N << " K " << c.K << " rows " << c.k0 << ".." << c.k1 << " threads " << threads
                  << " bias " << with_bias);
        double worst = 0.0;
        for (int64_t i = 0; i < c.M; ++i) {
          for (int64_t j = 0; j < c.N; ++j) {
            double s = with_bias ? b[static_cast<size_t>(j)] : 0.0;
            for (int64_t k = c.k0; k < c.k1; ++k)
              s += static_cast<double>(x[static_cast<size_t>(i * ldx + k - c.k0)]) * W[static_cast<size_t>(k * ldw + j)];
            worst = std::max(worst, std::abs(s - out[static_cast<size_t>(i * ldo + j)]));
          }
          // Padding between rows is never written.
          for (int64_t j = c.N; j < ldo; ++j) REQUIRE(out[static_cast<size_t>(i * ldo + j)] == 12345.0f);
        }
        CHECK(worst <= 1e-5 * static_cast<double>(std::max<int64_t>(1, Kx)));
      }
}

TEST_CASE("packed_gemm gives a row the same bits whatever rows and threads come with it", "[packed_gemm]") {
  // The forward pass computes the new rows of a run; the cache derives a head's result for all
  // rows on request; a typed extension computes one row. All must agree exactly, so a row may not
  // depend on the row count (which picks the tile), nor on the thread count.
  std::mt19937 gen(5);
  const int64_t M = 150, N = 2 * 768 + 40, K = 800;  // 150: the tall tiles; K over one block
  const auto x = random_vector(static_cast<size_t>(M * K), gen);
  const auto W = random_vector(static_cast<size_t>(K * N), gen);
  const auto b = random_vector(static_cast<size_t>(N), gen);
  const hs::PackedMatrix P = hs::PackedMatrix::from_rows(W.data(), K, N, N);
  std::vector<float> all(static_cast<size_t>(M * N));
  omp_set_num_threads(2);
  hs::packed_gemm(M, x.data(), K, P, 0, K, b.data(), all.data(), N);
  for (int64_t rows : {1, 2, 3, 5, 20, 130}) {
    std::vector<float> part(static_cast<size_t>(rows * N));
    omp_set_num_threads(rows % 2 ? 1 : 2);
    for (int64_t i = 0; i + rows <= M; i += rows) {
      hs::packed_gemm(rows, x.data() + i * K, K, P, 0, K, b.data(), part.data(), N);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < N; ++j) {
          INFO("rows " << rows << " row " << i + r << " col " << j);
          REQUIRE(part[static_cast<size_t>(r * N + j)] == all[static_cast<size_t>((i + r) * N + j)]);
        }
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

TEST_CASE("a tall product (a batch of prompts) gives each row the bits it gets alone", "[packed_gemm]") {
  // Over 128 rows the rows are taken a block at a time, and with one K block they are packed
  // k-major for tile_packed: neither may change a row's bits, in float32 or from 16-bit panels.
  std::mt19937 gen(8);
  for (const auto& [M, K, N] : {std::array<int64_t, 3>{700, 500, 100}, {300, 1600, 70}, {129, 768, 49}}) {
    const auto x = random_vector(static_cast<size_t>(M * K), gen);
    const auto W = random_vector(static_cast<size_t>(K * N), gen);
    const auto b = random_vector(static_cast<size_t>(N), gen);
    const std::vector<uint16_t> W16 = bf16_by_truncation(W);
    for (const hs::PackedMatrix& P :
         {hs::PackedMatrix::from_rows(W.data(), K, N, N), hs::PackedMatrix::from_rows(hs::PanelType::BF16, W16.data(), K, N, N)}) {
      std::vector<float> all(static_cast<size_t>(M * N)), one(static_cast<size_t>(N));
      omp_set_num_threads(2);
      hs::packed_gemm(M, x.data(), K, P, 0, K, b.data(), all.data(), N);
      omp_set_num_threads(1);
      double worst = 0.0;
      for (int64_t i = 0; i < M; ++i) {
        hs::packed_gemm(1, x.data() + i * K, K, P, 0, K, b.data(), one.data(), N);
        INFO("M " << M << " K " << K << " row " << i);
        REQUIRE(std::memcmp(one.data(), all.data() + i * N, static_cast<size_t>(N) * sizeof(float)) == 0);
        if (P.type() == hs::PanelType::F32 && i % 37 == 0)
          for (int64_t j = 0; j < N; ++j) {
            double s = b[static_cast<size_t>(j)];
            for (int64_t k = 0; k < K; ++k) s += static_cast<double>(x[static_cast<size_t>(i * K + k)]) * W[static_cast<size_t>(k * N + j)];
            worst = std::max(worst, std::abs(s - all[static_cast<size_t>(i * N + j)]));
          }
      }
      CHECK(worst <= 1e-5 * static_cast<double>(K));
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

TEST_CASE("a matrix's leading columns multiply as those columns of the whole", "[packed_gemm]") {
  // A batched scan's last block stops its Q | K | V product at Q | K: those columns must keep the
  // bits of the whole product (the same panels, each output its own chain), on every tile path,
  // in float32 and from 16-bit panels, while the columns after them are left as they were.
  std::mt19937 gen(21);
  const int64_t lanes = hs::PackedMatrix::panel_width();
  for (const auto& [M, K, panels] : {std::array<int64_t, 3>{3, 64, 5}, {20, 768, 9}, {300, 96, 7}, {1, 800, 3}}) {
    const int64_t N = panels * lanes + 3, ldo = N + 2;
    const auto x = random_vector(static_cast<size_t>(M * K), gen);
    const auto W = random_vector(static_cast<size_t>(K * N), gen);
    const auto b = random_vector(static_cast<size_t>(N), gen);
    std::vector<uint16_t> W16 = bf16_by_truncation(W);
    W16[static_cast<size_t>(K * N - 1)] = 0x7f80;  // an infinity in the last column only
    for (const hs::PackedMatrix& P :
         {hs::PackedMatrix::from_rows(W.data(), K, N, N), hs::PackedMatrix::from_rows(hs::PanelType::BF16, W16.data(), K, N, N)}) {
      std::vector<float> whole(static_cast<size_t>(M * ldo));
      hs::packed_gemm(M, x.data(), K, P, 0, K, b.data(), whole.data(), ldo);
      for (const int64_t n : {lanes, (panels - 1) * lanes, N}) {
        const hs::PackedMatrix lead = P.leading_columns(n);
        REQUIRE(lead.cols() == n);
        REQUIRE(lead.rows() == K);
        std::vector<float> part(static_cast<size_t>(M * ldo), -7.0f);
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          hs::packed_gemm(M, x.data(), K, lead, 0, K, b.data(), part.data(), ldo);
          INFO("M " << M << " K " << K << " N " << N << " leading " << n << " threads " << threads);
          for (int64_t i = 0; i < M; ++i) {
            REQUIRE(std::memcmp(part.data() + i * ldo, whole.data() + i * ldo, static_cast<size_t>(n) * sizeof(float)) == 0);
            for (int64_t j = n; j < ldo; ++j) REQUIRE(part[static_cast<size_t>(i * ldo + j)] == -7.0f);
          }
        }
        omp_set_num_threads(omp_get_num_procs());
        if (P.type() == hs::PanelType::BF16) CHECK(lead.count_non_finite() == (n == N ? 1 : 0));
      }
      CHECK_THROWS_AS(P.leading_columns(lanes + 1), std::logic_error);
      CHECK_THROWS_AS(P.leading_columns(N + lanes), std::logic_error);
    }
  }
}

TEST_CASE("a matrix packed from its transpose's rows multiplies like the matrix", "[packed_gemm]") {
  // The unembedding is kept [d_vocab, d_model] (the embedding, when tied); it is packed as
  // W_U = rows^T [d_model, d_vocab]. Packing from rows and from transposed rows must agree bit for bit.
  std::mt19937 gen(3);
  const Case cases[] = {{1, 50, 768, 0, 768}, {4, 4097, 64, 0, 64}, {5, 103, 37, 0, 37}, {20, 1031, 256, 0, 256},
                        {3, 7, 5, 0, 5},      {9, 2, 16, 0, 16}};
  for (const Case& c : cases)  // M tokens, N = vocabulary rows, K = d_model
    for (int threads : {1, 2}) {
      const int64_t ldu = c.K + 2, ldo = c.N + 3;
      const auto x = random_vector(static_cast<size_t>(c.M * c.K), gen);
      const auto U = random_vector(static_cast<size_t>(c.N * ldu), gen);
      std::vector<float> Ut(static_cast<size_t>(c.K * c.N));  // U^T, row-major [K, N]
      for (int64_t v = 0; v < c.N; ++v)
        for (int64_t d = 0; d < c.K; ++d) Ut[static_cast<size_t>(d * c.N + v)] = U[static_cast<size_t>(v * ldu + d)];
      const hs::PackedMatrix from_t = hs::PackedMatrix::from_transposed_rows(U.data(), c.N, c.K, ldu);
      const hs::PackedMatrix from_r = hs::PackedMatrix::from_rows(Ut.data(), c.K, c.N, c.N);
      std::vector<float> out_t(static_cast<size_t>(c.M * ldo), 777.0f), out_r(out_t);
      omp_set_num_threads(threads);
      hs::packed_gemm(c.M, x.data(), c.K, from_t, 0, c.K, nullptr, out_t.data(), ldo);
      hs::packed_gemm(c.M, x.data(), c.K, from_r, 0, c.K, nullptr, out_r.data(), ldo);
      omp_set_num_threads(omp_get_num_procs());
      INFO("M " << c.M << " V " << c.N << " D " << c.K << " threads " << threads);
      CHECK(out_t == out_r);
      double worst = 0.0;
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t v = 0; v < c.N; ++v) {
          double s = 0.0;
          for (int64_t d = 0; d < c.K; ++d)
            s += static_cast<double>(x[static_cast<size_t>(i * c.K + d)]) * U[static_cast<size_t>(v * ldu + d)];
          worst = std::max(worst, std::abs(s - out_t[static_cast<size_t>(i * ldo + v)]));
        }
      CHECK(worst <= 1e-5 * static_cast<double>(c.K));
    }
}

namespace {

// Random 16-bit values of a type, and their float32 conversion. F16 covers subnormals, both signs
// and large magnitudes; infinities and NaNs are left out (their products are no test of order).
void random_halves(hs::PanelType type, size_t n, std::mt19937& gen, std::vector<uint16_t>& h, std::vector<float>& f) {
  std::uniform_int_distribution<int> bits(0, 0xffff);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  h.resize(n);
  f.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    if (type == hs::PanelType::BF16) {
      const float x = u(gen);
      uint32_t b;
      std::memcpy(&b, &x, 4);
      v = static_cast<uint16_t>(b >> 16);
    } else {
      v = static_cast<uint16_t>(bits(gen));
      if ((v & 0x7c00) == 0x7c00) v &= 0xbfff;  // no infinity or NaN
    }
    h[i] = v;
    f[i] = type == hs::PanelType::BF16 ? hs::bf16_to_f32(v) : hs::f16_to_f32(v);
  }
}

bool same_float_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("16-bit panels give the bits of their float32 conversion", "[packed_gemm]") {
  // A BF16 or F16 matrix is packed in 16 bits and widened inside the kernel (in the tile, or a K
  // block at a time for tall products). Either way every output must be the float32 product's,
  // bit for bit: the forward pass of a 16-bit model keeps the values it had when its weights were
  // converted on load, and the fixtures' tolerances stay what they were.
  std::mt19937 gen(17);
  const Case cases[] = {{1, 33, 7, 0, 7},       {3, 100, 41, 0, 41},    {4, 129, 33, 0, 33},    {5, 17, 9, 0, 9},
                        {20, 97, 65, 0, 65},    {37, 50, 33, 0, 33},    {13, 31, 800, 0, 800},  {130, 70, 21, 0, 21},
                        {200, 47, 900, 0, 900}, {20, 65, 129, 64, 128}, {40, 19, 99, 33, 97},   {9, 33, 10, 4, 4},
                        {2, 1, 1, 0, 1}};
  for (hs::PanelType type : {hs::PanelType::BF16, hs::PanelType::F16})
    for (const Case& c : cases) {
      const int64_t ldw = c.N + 3, Kx = c.k1 - c.k0, ldx = Kx + 1, ldo = c.N + 2;
      std::vector<uint16_t> W16, U16;
      std::vector<float> W, U;
      random_halves(type, static_cast<size_t>(c.K * ldw), gen, W16, W);
      random_halves(type, static_cast<size_t>(c.N * c.K), gen, U16, U);  // [N, K] rows
      const auto x = random_vector(static_cast<size_t>(c.M * ldx), gen);
      const auto b = random_vector(static_cast<size_t>(c.N), gen);
      const hs::PackedMatrix P16 = hs::PackedMatrix::from_rows(type, W16.data(), c.K, c.N, ldw);
      const hs::PackedMatrix P32 = hs::PackedMatrix::from_rows(W.data(), c.K, c.N, ldw);
      // The transposed packing reads each row through a pointer, as a joined QKV's parts are read.
      const hs::PackedMatrix T16 = hs::PackedMatrix::from_transposed_rows(
          type, c.N, c.K, [&](int64_t j) -> const void* { return U16.data() + j * c.K; });
      const hs::PackedMatrix T32 = hs::PackedMatrix::from_transposed_rows(U.data(), c.N, c.K, c.K);
      REQUIRE(P16.type() == type);
      REQUIRE(P32.type() == hs::PanelType::F32);
      CHECK(P16.bytes() <= P32.bytes() / 2 + 64);
      for (int threads : {1, 2, 3})
        for (bool with_bias : {false, true}) {
          INFO((type == hs::PanelType::BF16 ? "BF16" : "F16") << " M " << c.M << " N " << c.N << " K " << c.K << " rows "
                                                              << c.k0 << ".." << c.k1 << " threads " << threads << " bias "
                                                              << with_bias);
          const float* bias = with_bias ? b.data() : nullptr;
          std::vector<float> out16(static_cast<size_t>(c.M * ldo), 5.0f), out32(out16), t16(out16), t32(out16);
          omp_set_num_threads(threads);
          hs::packed_gemm(c.M, x.data(), ldx, P16, c.k0, c.k1, bias, out16.data(), ldo);
          hs::packed_gemm(c.M, x.data(), ldx, P32, c.k0, c.k1, bias, out32.data(), ldo);
          hs::packed_gemm(c.M, x.data(), ldx, T16, c.k0, c.k1, bias, t16.data(), ldo);
          hs::packed_gemm(c.M, x.data(), ldx, T32, c.k0, c.k1, bias, t32.data(), ldo);
          omp_set_num_threads(omp_get_num_procs());
          CHECK(same_float_bits(out16, out32));
          CHECK(same_float_bits(t16, t32));
        }
      // Reads in place widen too: a column (an embedding row) and the whole matrix as rows.
      std::vector<float> col16(static_cast<size_t>(c.K)), col32(col16);
      for (int64_t j : {int64_t{0}, c.N / 2, c.N - 1}) {
        T16.column(j, col16.data());
        T32.column(j, col32.data());
        CHECK(same_float_bits(col16, col32));
      }
      std::vector<float> rows16(static_cast<size_t>(c.K * c.N)), rows32(rows16);
      P16.unpack_rows(rows16.data());
      P32.unpack_rows(rows32.data());
      CHECK(same_float_bits(rows16, rows32));
    }
}

TEST_CASE("a matrix packed from transposed rows holds each row, wherever the rows lie", "[packed_gemm]") {
  // Rows a fixed stride apart are packed a k-step of a whole panel at a time; rows of two tensors
  // joined as one matrix (q, k and v), whose panel straddles the join, element by element.
  std::mt19937 gen(23);
  for (hs::PanelType type : {hs::PanelType::BF16, hs::PanelType::F16, hs::PanelType::F32})
    for (int64_t K : {1, 2, 7, 16, 33, 64})
      for (int64_t N : {5, 16, 37, 70}) {
        INFO("type " << static_cast<int>(type) << " N " << N << " K " << K);
        const int64_t split = N / 2 + 1;  // rows [0, split) in one buffer, the rest in another
        std::vector<float> rows_f;
        std::vector<uint16_t> rows_h;
        if (type == hs::PanelType::F32) rows_f = random_vector(static_cast<size_t>(N * K + K), gen);
        else random_halves(type, static_cast<size_t>(N * K + K), gen, rows_h, rows_f);
        // The second part starts one row later than it would if the parts were contiguous.
        auto row = [&](int64_t j) -> const void* {
          const int64_t at = (j < split ? j : j + 1) * K;
          return type == hs::PanelType::F32 ? static_cast<const void*>(rows_f.data() + at)
                                            : static_cast<const void*>(rows_h.data() + at);
        };
        const hs::PackedMatrix joined = type == hs::PanelType::F32
                                            ? hs::PackedMatrix::from_transposed_rows(rows_f.data(), N, K, K)
                                            : hs::PackedMatrix::from_transposed_rows(type, N, K, row);
        std::vector<float> column(static_cast<size_t>(K));
        bool all_equal = true;
        for (int64_t j = 0; j < N; ++j) {
          joined.column(j, column.data());
          const int64_t at = type == hs::PanelType::F32 ? j * K : (j < split ? j : j + 1) * K;
          all_equal = all_equal && std::memcmp(column.data(), rows_f.data() + at, sizeof(float) * static_cast<size_t>(K)) == 0;
        }
        CHECK(all_equal);
      }
}

TEST_CASE("rows fetched a block at a time pack as rows read in place, and their bad values are counted", "[packed_gemm]") {
  // The loader fetches a 16-bit matrix's rows through its file (a copy per run of adjacent rows)
  // and counts NaN and infinity while packing. Any mix of copied and in-place rows gives the same
  // panels, and the count is that of the values.
  std::mt19937 gen(29);
  for (hs::PanelType type : {hs::PanelType::BF16, hs::PanelType::F16})
    for (int64_t K : {3, 64, 900})
      for (int64_t N : {5, 37, 1500}) {
        INFO("type " << static_cast<int>(type) << " N " << N << " K " << K);
        const int64_t split = N / 3 + 1;  // two parts, the second one row later (a joined QKV)
        std::vector<uint16_t> h;
        std::vector<float> f;
        random_halves(type, static_cast<size_t>(N * K + K), gen, h, f);
        const uint16_t inf = type == hs::PanelType::BF16 ? 0x7f80 : 0x7c00;
        int64_t planted = 0;
        for (size_t i = 3; i < h.size(); i += 997) {
          h[i] = static_cast<uint16_t>(inf | (i % 2));  // infinity, or a NaN
          planted += i < static_cast<size_t>(split * K) || i >= static_cast<size_t>((split + 1) * K);
        }
        auto row = [&](int64_t j) -> const void* { return h.data() + (j < split ? j : j + 1) * K; };
        std::atomic<int> copies = 0, asked = 0;  // the packer's threads call them at once
        const hs::PackedMatrix::CopySource all = [&](const void* src, size_t bytes, void* dst) {
          ++copies;
          std::memcpy(dst, src, bytes);
          return true;
        };
        // Declines every other run: those rows are read in place.
        const hs::PackedMatrix::CopySource some = [&](const void* src, size_t bytes, void* dst) {
          if (asked++ % 2) return false;
          std::memcpy(dst, src, bytes);
          return true;
        };
        const hs::PackedMatrix in_place = hs::PackedMatrix::from_transposed_rows(type, N, K, row);
        const hs::PackedMatrix copied = hs::PackedMatrix::from_transposed_rows(type, N, K, row, all);
        const hs::PackedMatrix mixed = hs::PackedMatrix::from_transposed_rows(type, N, K, row, some);
        CHECK(copies >= 2);  // the two parts are never one run
        const int64_t lanes = hs::PackedMatrix::panel_width(), panels = (N + lanes - 1) / lanes;
        CHECK(copies <= 2 * panels);  // at most two runs per block of panels
        REQUIRE(in_place.bytes() == copied.bytes());
        const size_t panels_bytes = static_cast<size_t>(panels * lanes * K) * 2;
        CHECK(std::memcmp(in_place.panel(0), copied.panel(0), std::min(panels_bytes, in_place.bytes())) == 0);
        CHECK(std::memcmp(in_place.panel(0), mixed.panel(0), std::min(panels_bytes, in_place.bytes())) == 0);
        CHECK(in_place.count_non_finite() == planted);
        CHECK(copied.count_non_finite() == planted);
        CHECK(mixed.count_non_finite() == planted);
        CHECK(hs::count_non_finite16(h.data(), static_cast<int64_t>(h.size()), type) >= planted);
      }
}


namespace {

// W [K, N] of a panel type as the float32 values the kernel reads, and packed in that type.
struct TestMatrix {
  std::vector<float> values;  // [K, ldw]
  hs::PackedMatrix packed;
};

TestMatrix test_matrix(hs::PanelType type, int64_t K, int64_t N, int64_t ldw, std::mt19937& gen) {
  TestMatrix m;
  if (type == hs::PanelType::F32) {
    m.values = random_vector(static_cast<size_t>(K * ldw), gen);
    m.packed = hs::PackedMatrix::from_rows(m.values.data(), K, N, ldw);
  } else {
    std::vector<uint16_t> h;
    random_halves(type, static_cast<size_t>(K * ldw), gen, h, m.values);
    m.packed = hs::PackedMatrix::from_rows(type, h.data(), K, N, ldw);
  }
  return m;
}

const char* type_name(hs::PanelType type) {
  return type == hs::PanelType::F32 ? "F32" : type == hs::PanelType::BF16 ? "BF16" : "F16";
}

}  // namespace

TEST_CASE("packed_gemm_transposed equals a float64 product of dy and W's transpose", "[packed_gemm]") {
  // dx[i, k - k0] (+)= sum_j dy[i, j] W[k, j]: every tile height (1-3 rows), depth (a short last
  // tile), a last panel narrower than a vector, N under one panel, row ranges, blocks of rows past
  // 64 (M = 257), strides wider than the matrices, on one and two threads.
  std::mt19937 gen(31);
  const Case cases[] = {{1, 37, 19, 0, 19},    {3, 100, 41, 0, 41},   {20, 97, 65, 0, 65},    {257, 45, 23, 0, 23},
                        {1, 5, 3, 0, 3},       {2, 1, 1, 0, 1},       {3, 16, 9, 0, 9},       {20, 768, 64, 8, 40},
                        {257, 33, 100, 37, 91}, {1, 2311, 70, 3, 68}, {20, 300, 130, 0, 130}, {7, 50, 33, 32, 33}};
  for (hs::PanelType type : {hs::PanelType::F32, hs::PanelType::BF16, hs::PanelType::F16})
    for (const Case& c : cases) {
      const int64_t ldw = c.N + 2, lddy = c.N + 3, Kx = c.k1 - c.k0, lddx = Kx + 5;
      const TestMatrix W = test_matrix(type, c.K, c.N, ldw, gen);
      auto dy = random_vector(static_cast<size_t>(c.M * lddy), gen);
      for (int64_t i = 0; i < c.M; ++i)  // dy's columns past N are no part of it
        for (int64_t j = c.N; j < lddy; ++j) dy[static_cast<size_t>(i * lddy + j)] = std::nanf("");
      const auto start = random_vector(static_cast<size_t>(c.M * lddx), gen);
      for (int threads : {1, 2})
        for (bool accumulate : {false, true}) {
          INFO(type_name(type) << " M " << c.M << " N " << c.N << " K " << c.K << " rows " << c.k0 << ".." << c.k1
                               << " threads " << threads << " accumulate " << accumulate);
          std::vector<float> dx = start;
          omp_set_num_threads(threads);
          hs::packed_gemm_transposed(c.M, dy.data(), lddy, W.packed, c.k0, c.k1, dx.data(), lddx, accumulate);
          omp_set_num_threads(omp_get_num_procs());
          // Error relative to the sum of the terms' magnitudes (F16 values reach 65504): float32
          // sums of a few hundred terms stay well inside 1e-5 of it; a wrong term does not.
          double worst = 0.0;
          bool padding_kept = true;
          for (int64_t i = 0; i < c.M; ++i) {
            for (int64_t k = c.k0; k < c.k1; ++k) {
              const size_t at = static_cast<size_t>(i * lddx + k - c.k0);
              double s = accumulate ? start[at] : 0.0, magnitude = std::abs(s);
              for (int64_t j = 0; j < c.N; ++j) {
                const double term =
                    static_cast<double>(dy[static_cast<size_t>(i * lddy + j)]) * W.values[static_cast<size_t>(k * ldw + j)];
                s += term;
                magnitude += std::abs(term);
              }
              worst = std::max(worst, std::abs(s - dx[at]) / std::max(magnitude, 1e-30));
              padding_kept = padding_kept && std::isfinite(dx[at]);  // a NaN from dy's padding
            }
            for (int64_t k = Kx; k < lddx; ++k)  // between rows: never written
              padding_kept = padding_kept && dx[static_cast<size_t>(i * lddx + k)] == start[static_cast<size_t>(i * lddx + k)];
          }
          CHECK(padding_kept);
          CHECK(worst <= 1e-5);
        }
    }
}

TEST_CASE("packed_gemm_transposed gives an output the same bits whatever rows, range and threads come with it",
          "[packed_gemm]") {
  // The backward pass takes dx for all positions, one head's rows of W_O, or one position: the
  // same output must come out the same bits every way, and 16-bit panels must give the bits of
  // their float32 conversion (the widening is exact).
  std::mt19937 gen(37);
  const int64_t M = 150, K = 200;
  for (int64_t N : {int64_t{2304 + 7}, int64_t{5000}})  // the second: one row alone is split over threads
    for (hs::PanelType type : {hs::PanelType::F32, hs::PanelType::BF16, hs::PanelType::F16}) {
      INFO(type_name(type) << " N " << N);
      const TestMatrix W = test_matrix(type, K, N, N, gen);
      const hs::PackedMatrix W32 = hs::PackedMatrix::from_rows(W.values.data(), K, N, N);
      const auto dy = random_vector(static_cast<size_t>(M * N), gen);
      std::vector<float> all(static_cast<size_t>(M * K)), all32(all);
      omp_set_num_threads(2);
      hs::packed_gemm_transposed(M, dy.data(), N, W.packed, 0, K, all.data(), K, false);
      hs::packed_gemm_transposed(M, dy.data(), N, W32, 0, K, all32.data(), K, false);
      CHECK(same_float_bits(all, all32));
      struct Part { int64_t rows, k0, k1; int threads; };
      const Part parts[] = {{1, 0, K, 1}, {1, 0, K, 2}, {2, 0, K, 2},    {3, 0, K, 1},  {20, 0, K, 2},
                            {20, 0, K, 1}, {75, 0, K, 2}, {150, 0, K, 1}, {3, 64, 128, 2}, {20, 7, 9, 1}};
      for (const Part& part : parts) {
        INFO("rows " << part.rows << " range " << part.k0 << ".." << part.k1 << " threads " << part.threads);
        const int64_t Kx = part.k1 - part.k0;
        std::vector<float> dx(static_cast<size_t>(part.rows * Kx));
        omp_set_num_threads(part.threads);
        bool same = true;
        for (int64_t i = 0; i + part.rows <= M; i += part.rows) {
          hs::packed_gemm_transposed(part.rows, dy.data() + i * N, N, W.packed, part.k0, part.k1, dx.data(), Kx, false);
          for (int64_t r = 0; r < part.rows; ++r)
            same = same && std::memcmp(dx.data() + r * Kx, all.data() + (i + r) * K + part.k0,
                                       static_cast<size_t>(Kx) * sizeof(float)) == 0;
        }
        CHECK(same);
      }
      omp_set_num_threads(omp_get_num_procs());
    }
}

TEST_CASE("packed_gemm_transposed ignores whatever the last panel's padding holds", "[packed_gemm]") {
  // A packed copy mapped from disk is only as good as the file: NaN in the columns past N must not
  // reach dx. The padding of a copy of the panels is overwritten with NaN and the product compared.
  std::mt19937 gen(41);
  for (hs::PanelType type : {hs::PanelType::F32, hs::PanelType::BF16, hs::PanelType::F16})
    for (int64_t N : {int64_t{5}, int64_t{37}, int64_t{1000 + 3}}) {
      INFO(type_name(type) << " N " << N);
      const int64_t K = 50, M = 4, lanes = hs::PackedMatrix::panel_width(), panels = (N + lanes - 1) / lanes;
      const TestMatrix W = test_matrix(type, K, N, N, gen);
      const size_t bytes = W.packed.bytes();
      auto copy = std::shared_ptr<unsigned char>(static_cast<unsigned char*>(std::aligned_alloc(64, bytes)), std::free);
      std::memcpy(copy.get(), W.packed.data(), bytes);
      const size_t element = type == hs::PanelType::F32 ? 4 : 2;
      unsigned char* last = copy.get() + static_cast<size_t>((panels - 1) * K * lanes) * element;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t l = N - (panels - 1) * lanes; l < lanes; ++l)
          std::memset(last + static_cast<size_t>(k * lanes + l) * element, 0xff, element);  // a NaN in every type
      const hs::PackedMatrix spoilt = hs::PackedMatrix::view(type, K, N, copy.get(), copy, -1);
      CHECK(spoilt.count_non_finite() > 0);
      const auto dy = random_vector(static_cast<size_t>(M * N), gen);
      std::vector<float> clean(static_cast<size_t>(M * K)), dirty(clean);
      hs::packed_gemm_transposed(M, dy.data(), N, W.packed, 0, K, clean.data(), K, false);
      hs::packed_gemm_transposed(M, dy.data(), N, spoilt, 0, K, dirty.data(), K, false);
      CHECK(same_float_bits(clean, dirty));
    }
}

TEST_CASE("packed_gemm_transposed through the unembedding gives dlogits @ W_U^T", "[packed_gemm]") {
  // W_U is packed from the rows of the [d_vocab, d_model] matrix (from_transposed_rows): then
  // dx[i, d] = sum over v of dlogits[i, v] * U[v, d].
  std::mt19937 gen(43);
  const Case cases[] = {{1, 4097, 64, 0, 64}, {20, 1031, 96, 0, 96}, {3, 50, 768, 0, 768}, {2, 7, 5, 0, 5}};
  for (hs::PanelType type : {hs::PanelType::F32, hs::PanelType::BF16, hs::PanelType::F16})
    for (const Case& c : cases) {  // N = vocabulary rows, K = d_model
      INFO(type_name(type) << " M " << c.M << " V " << c.N << " D " << c.K);
      std::vector<uint16_t> U16;
      std::vector<float> U;
      if (type == hs::PanelType::F32) U = random_vector(static_cast<size_t>(c.N * c.K), gen);
      else random_halves(type, static_cast<size_t>(c.N * c.K), gen, U16, U);
      const hs::PackedMatrix W_U =
          type == hs::PanelType::F32
              ? hs::PackedMatrix::from_transposed_rows(U.data(), c.N, c.K, c.K)
              : hs::PackedMatrix::from_transposed_rows(type, c.N, c.K,
                                                       [&](int64_t j) -> const void* { return U16.data() + j * c.K; });
      const auto dlogits = random_vector(static_cast<size_t>(c.M * c.N), gen);
      std::vector<float> dx(static_cast<size_t>(c.M * c.K));
      hs::packed_gemm_transposed(c.M, dlogits.data(), c.N, W_U, 0, c.K, dx.data(), c.K, false);
      double worst = 0.0;
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t d = 0; d < c.K; ++d) {
          double s = 0.0, magnitude = 0.0;
          for (int64_t v = 0; v < c.N; ++v) {
            const double term = static_cast<double>(dlogits[static_cast<size_t>(i * c.N + v)]) * U[static_cast<size_t>(v * c.K + d)];
            s += term;
            magnitude += std::abs(term);
          }
          worst = std::max(worst, std::abs(s - dx[static_cast<size_t>(i * c.K + d)]) / magnitude);
        }
      CHECK(worst <= 1e-5);  // relative to the terms' magnitudes, as above
    }
}

// An attention head's two products over the causal half (packed_gemm_lower): the scores q k^T
// with each query's columns stopping at its own position, and the mix pattern v with each query's
// sum stopping there. Against float64 on the entries each query reads, with queries at an offset
// (a typed extension: first > 0), shapes that are not multiples of the tile or the panel width;
// and each row's bits equal to the row computed alone (a query's values do not depend on which
// queries come with it).
TEST_CASE("packed_gemm_lower computes an attention head's causal half, each row as it would alone",
          "[packed_gemm][attention]") {
  std::mt19937 gen(27);
  struct Shape {
    int64_t queries, first, d_head;
  };
  for (const Shape s : {Shape{1, 0, 64}, Shape{65, 0, 64}, Shape{13, 7, 24}, Shape{40, 3, 80}, Shape{7, 0, 5}}) {
    const int64_t nq = s.queries, S = s.first + nq, dh = s.d_head;
    CAPTURE(nq, s.first, dh);
    const std::vector<float> q = random_vector(static_cast<size_t>(nq * dh), gen);
    const std::vector<float> k = random_vector(static_cast<size_t>(S * dh), gen);
    const std::vector<float> v = random_vector(static_cast<size_t>(S * dh), gen);
    // Keys packed as W = k^T [dh, S] in two pieces (as the cache's position blocks arrive).
    std::vector<float> kp(static_cast<size_t>(hs::panel_floats(dh, S)), std::nanf(""));
    const int64_t split = S / 2;
    hs::pack_transposed_into(kp.data(), dh, 0, split, k.data(), dh);
    hs::pack_transposed_into(kp.data(), dh, split, S - split, k.data() + split * dh, dh);
    std::vector<float> scores(static_cast<size_t>(nq * S), 0.0f);
    hs::packed_gemm_lower(nq, q.data(), dh, kp.data(), dh, S, s.first, hs::LowerLimit::Columns, scores.data(), S);
    // The pattern: the scores' causal half (any values; zero past each query's last key).
    std::vector<float> pattern(static_cast<size_t>(nq * S), 0.0f);
    for (int64_t r = 0; r < nq; ++r)
      for (int64_t j = 0; j <= s.first + r; ++j) pattern[static_cast<size_t>(r * S + j)] = scores[static_cast<size_t>(r * S + j)];
    std::vector<float> vp(static_cast<size_t>(hs::panel_floats(S, dh)), std::nanf(""));
    hs::pack_rows_into(vp.data(), S, dh, 0, split, v.data(), dh);
    hs::pack_rows_into(vp.data(), S, dh, split, S - split, v.data() + split * dh, dh);
    std::vector<float> z(static_cast<size_t>(nq * dh), std::nanf(""));
    hs::packed_gemm_lower(nq, pattern.data(), S, vp.data(), S, dh, s.first, hs::LowerLimit::Depth, z.data(), dh);
    // Each entry within the forward error bound of a float32 sum of n products, n * 2^-24 * sum |term|.
    size_t checked = 0, outside = 0;
    const auto check = [&](double want, double magnitude, int64_t n, float got) {
      ++checked;
      if (std::abs(want - got) > static_cast<double>(n) * 0x1p-24 * magnitude + 1e-30) ++outside;
    };
    for (int64_t r = 0; r < nq; ++r) {
      const int64_t last = s.first + r;
      for (int64_t j = 0; j <= last; ++j) {
        double want = 0.0, magnitude = 0.0;
        for (int64_t d = 0; d < dh; ++d) {
          const double t = static_cast<double>(q[static_cast<size_t>(r * dh + d)]) * k[static_cast<size_t>(j * dh + d)];
          want += t;
          magnitude += std::abs(t);
        }
        check(want, magnitude, dh, scores[static_cast<size_t>(r * S + j)]);
      }
      for (int64_t d = 0; d < dh; ++d) {
        double want = 0.0, magnitude = 0.0;
        for (int64_t j = 0; j <= last; ++j) {
          const double t = static_cast<double>(pattern[static_cast<size_t>(r * S + j)]) * v[static_cast<size_t>(j * dh + d)];
          want += t;
          magnitude += std::abs(t);
        }
        check(want, magnitude, last + 1, z[static_cast<size_t>(r * dh + d)]);
      }
      // Row r alone, as a typed extension computes it: one query at position first + r.
      std::vector<float> row_scores(static_cast<size_t>(S), 0.0f), row_z(static_cast<size_t>(dh), 0.0f);
      hs::packed_gemm_lower(1, q.data() + r * dh, dh, kp.data(), dh, S, last, hs::LowerLimit::Columns, row_scores.data(), S);
      hs::packed_gemm_lower(1, pattern.data() + r * S, S, vp.data(), S, dh, last, hs::LowerLimit::Depth, row_z.data(), dh);
      CHECK(std::memcmp(row_scores.data(), scores.data() + r * S, static_cast<size_t>(last + 1) * sizeof(float)) == 0);
      CHECK(std::memcmp(row_z.data(), z.data() + r * dh, static_cast<size_t>(dh) * sizeof(float)) == 0);
    }
    CHECK(checked == static_cast<size_t>(nq * s.first + nq * (nq + 1) / 2 + nq * dh));
    CHECK(outside == 0);
  }
}
