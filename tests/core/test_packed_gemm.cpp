// packed_gemm against a double-precision product, on shapes that hit every path: the wide tiles
// of one to four rows, the two-panel tiles up to 12 rows, the three-panel tiles from 128 rows,
// blocked K (over 768), a last panel narrower than a vector, row ranges of W (a head's rows of
// W_O), strides wider than the matrices, with and without bias, on one and two threads.
#include <omp.h>

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "core/model/packed_gemm.h"

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
