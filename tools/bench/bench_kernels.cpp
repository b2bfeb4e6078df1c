// bench_kernels: the layer products of GPT-2 small at a few row counts, Eigen's GEMM against
// small_gemm, on 1 and 2 threads. Prints GFLOP/s (median of repetitions after warm-up), the
// ratio, and the largest difference between the two results. This is the measurement behind
// use_small_gemm (core/model/small_gemm.h); run it after changing either kernel.
//
//   build/tools/bench/bench_kernels [REPS]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/model/small_gemm.h"
#include "core/tensor/eigen.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double time_ms(int reps, F&& f) {
  f();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  struct Shape { const char* name; Eigen::Index K, N; };
  const Shape shapes[] = {{"c_attn", 768, 2304}, {"c_proj", 768, 768}, {"c_fc", 768, 3072}, {"mlp c_proj", 3072, 768}};
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::printf("%-11s %5s %3s %11s %11s %7s %9s\n", "product", "rows", "thr", "eigen GF/s", "small GF/s", "ratio",
              "max diff");
  for (const Shape& s : shapes) {
    // Several weight matrices, cycled, so the weights come from memory as in a real pass
    // (GPT-2 small has 12 layers; one 7 MB matrix would otherwise sit in L3).
    constexpr int kMats = 12;
    std::vector<hs::RowMatrixXf> Ws(kMats, hs::RowMatrixXf(s.K, s.N));
    for (auto& W : Ws) W = W.unaryExpr([&](float) { return nd(gen) * 0.02f; });
    hs::RowVectorXf b = hs::RowVectorXf::Random(s.N);
    for (Eigen::Index M : {1, 6, 20, 32, 64, 128, 256, 1024}) {
      hs::RowMatrixXf x = hs::RowMatrixXf::Random(M, s.K), ye(M, s.N), ys(M, s.N);
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        int i = 0, j = 0;
        const double te = time_ms(reps, [&] {
          const auto& W = Ws[static_cast<size_t>(i++ % kMats)];
          ye.noalias() = x * W;
          ye.rowwise() += b;
        });
        const double ts = time_ms(reps, [&] {
          const auto& W = Ws[static_cast<size_t>(j++ % kMats)];
          hs::small_gemm(M, s.N, s.K, x.data(), s.K, W.data(), s.N, b.data(), ys.data(), s.N);
        });
        // Same matrix for the comparison.
        ye.noalias() = x * Ws[0];
        ye.rowwise() += b;
        hs::small_gemm(M, s.N, s.K, x.data(), s.K, Ws[0].data(), s.N, b.data(), ys.data(), s.N);
        const double flop = 2.0 * static_cast<double>(M * s.K * s.N);
        std::printf("%-11s %5ld %3d %11.1f %11.1f %7.2f %9.2e\n", s.name, static_cast<long>(M), threads,
                    flop / te * 1e-6, flop / ts * 1e-6, te / ts, static_cast<double>((ye - ys).cwiseAbs().maxCoeff()));
      }
    }
  }
  return 0;
}
