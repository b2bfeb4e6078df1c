// small_gemm against a double-precision product, on shapes that hit every path: one and two rows,
// whole tiles and leftover rows, full column blocks, tile-wide leftovers and a scalar tail,
// strides wider than the matrices, with and without bias, on one and two threads.
#include <omp.h>

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "core/model/small_gemm.h"

namespace {

struct Case {
  int64_t M, N, K;
};

}  // namespace

TEST_CASE("small_gemm equals a float64 product on every path", "[small_gemm]") {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const Case cases[] = {{1, 768, 64},  {2, 2304, 96},  {3, 300, 17},  {5, 129, 33}, {6, 256, 8},
                        {7, 1000, 5},  {20, 768, 64},  {20, 2304, 768}, {13, 31, 9},  {64, 3072, 40},
                        {1, 5, 3},     {2, 1, 1},      {11, 160, 1},  {10, 768, 40}, {17, 2304, 33}, {9, 200, 12}};
  for (const Case& c : cases)
    for (int threads : {1, 2})
      for (bool with_bias : {false, true}) {
        const int64_t ldx = c.K + 3, ldw = c.N + 5, ldo = c.N + 7;
        std::vector<float> x(static_cast<size_t>(c.M * ldx)), W(static_cast<size_t>(c.K * ldw)),
            b(static_cast<size_t>(c.N)), out(static_cast<size_t>(c.M * ldo), 12345.0f);
        for (float& v : x) v = u(gen);
        for (float& v : W) v = u(gen);
        for (float& v : b) v = u(gen);
        omp_set_num_threads(threads);
        hs::small_gemm(c.M, c.N, c.K, x.data(), ldx, W.data(), ldw, with_bias ? b.data() : nullptr, out.data(), ldo);
        omp_set_num_threads(omp_get_num_procs());
        INFO("M " << c.M << " N " << c.N << " K " << c.K << " threads " << threads << " bias " << with_bias);
        double worst = 0.0;
        for (int64_t i = 0; i < c.M; ++i) {
          for (int64_t j = 0; j < c.N; ++j) {
            double s = with_bias ? b[static_cast<size_t>(j)] : 0.0;
            for (int64_t k = 0; k < c.K; ++k)
              s += static_cast<double>(x[static_cast<size_t>(i * ldx + k)]) * W[static_cast<size_t>(k * ldw + j)];
            worst = std::max(worst, std::abs(s - out[static_cast<size_t>(i * ldo + j)]));
          }
          // Padding between rows is never written.
          for (int64_t j = c.N; j < ldo; ++j) REQUIRE(out[static_cast<size_t>(i * ldo + j)] == 12345.0f);
        }
        CHECK(worst <= 1e-5 * static_cast<double>(c.K));
      }
}

TEST_CASE("small_gemm gives a row the same bits whatever rows come with it", "[small_gemm]") {
  // The forward pass computes a head's result for the new rows of a run; the cache derives it for
  // all rows on request. Both must agree exactly, so a row may not depend on the row count.
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t M = 26, N = 2 * 768 + 40, K = 64;  // 26 = 3 x 8 + 2: every path
  std::vector<float> x(static_cast<size_t>(M * K)), W(static_cast<size_t>(K * N)), all(static_cast<size_t>(M * N));
  for (float& v : x) v = u(gen);
  for (float& v : W) v = u(gen);
  hs::small_gemm(M, N, K, x.data(), K, W.data(), N, nullptr, all.data(), N);
  for (int64_t rows : {1, 2, 5}) {
    std::vector<float> part(static_cast<size_t>(rows * N));
    for (int64_t i = 0; i + rows <= M; i += rows) {
      hs::small_gemm(rows, N, K, x.data() + i * K, K, W.data(), N, nullptr, part.data(), N);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < N; ++j) {
          INFO("rows " << rows << " row " << i + r << " col " << j);
          REQUIRE(part[static_cast<size_t>(r * N + j)] == all[static_cast<size_t>((i + r) * N + j)]);
        }
    }
  }
}

TEST_CASE("small_gemm_bt equals a float64 product with the transpose", "[small_gemm]") {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const Case cases[] = {{1, 50, 768}, {4, 4097, 64}, {5, 103, 37}, {20, 1031, 256}, {3, 7, 5}, {9, 2, 16}};
  for (const Case& c : cases)  // M tokens, N = vocabulary rows, K = d_model
    for (int threads : {1, 2}) {
      const int64_t ldx = c.K + 1, ldu = c.K + 2, ldo = c.N + 3;
      std::vector<float> x(static_cast<size_t>(c.M * ldx)), U(static_cast<size_t>(c.N * ldu)),
          out(static_cast<size_t>(c.M * ldo), 777.0f);
      for (float& v : x) v = u(gen);
      for (float& v : U) v = u(gen);
      omp_set_num_threads(threads);
      hs::small_gemm_bt(c.M, c.N, c.K, x.data(), ldx, U.data(), ldu, out.data(), ldo);
      omp_set_num_threads(omp_get_num_procs());
      INFO("M " << c.M << " V " << c.N << " D " << c.K << " threads " << threads);
      double worst = 0.0;
      for (int64_t i = 0; i < c.M; ++i) {
        for (int64_t v = 0; v < c.N; ++v) {
          double s = 0.0;
          for (int64_t d = 0; d < c.K; ++d)
            s += static_cast<double>(x[static_cast<size_t>(i * ldx + d)]) * U[static_cast<size_t>(v * ldu + d)];
          worst = std::max(worst, std::abs(s - out[static_cast<size_t>(i * ldo + v)]));
        }
        for (int64_t v = c.N; v < ldo; ++v) REQUIRE(out[static_cast<size_t>(i * ldo + v)] == 777.0f);
      }
      CHECK(worst <= 1e-5 * static_cast<double>(c.K));
    }
  // A row's logits do not depend on the rows computed with it.
  const int64_t M = 11, V = 301, D = 96;
  std::vector<float> x(static_cast<size_t>(M * D)), U(static_cast<size_t>(V * D)), all(static_cast<size_t>(M * V)),
      one(static_cast<size_t>(V));
  for (float& v : x) v = u(gen);
  for (float& v : U) v = u(gen);
  hs::small_gemm_bt(M, V, D, x.data(), D, U.data(), D, all.data(), V);
  for (int64_t i = 0; i < M; ++i) {
    hs::small_gemm_bt(1, V, D, x.data() + i * D, D, U.data(), D, one.data(), V);
    for (int64_t v = 0; v < V; ++v) REQUIRE(one[static_cast<size_t>(v)] == all[static_cast<size_t>(i * V + v)]);
  }
}
