// bench_kernels: the layer products of GPT-2 small at a few row counts, Eigen's GEMM against
// packed_gemm, on 1 and 2 threads. Prints GFLOP/s (median of repetitions after warm-up), the
// ratio, and the largest difference between the two results. This is the measurement behind the
// tile choices in core/model/packed_gemm.cpp; run it after changing the kernel.
//
//   build/tools/bench/bench_kernels [REPS]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/model/packed_gemm.h"
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
  const Shape shapes[] = {{"c_attn", 768, 2304}, {"c_proj", 768, 768}, {"c_fc", 768, 3072}, {"mlp c_proj", 3072, 768},
                          {"unembed", 768, 50257}};
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::printf("%-11s %5s %3s %11s %11s %7s %9s\n", "product", "rows", "thr", "eigen GF/s", "packed GF/s", "ratio",
              "max diff");
  for (const Shape& s : shapes) {
    // Several weight matrices, cycled, so the weights come from memory as in a real pass
    // (GPT-2 small has 12 layers; one 7 MB matrix would otherwise sit in L3). The unembedding
    // (154 MB) is larger than L3 by itself.
    const int kMats = s.K * s.N > 10000000 ? 1 : 12;
    std::vector<hs::RowMatrixXf> Ws(kMats, hs::RowMatrixXf(s.K, s.N));
    for (auto& W : Ws) W = W.unaryExpr([&](float) { return nd(gen) * 0.02f; });
    std::vector<hs::PackedMatrix> Ps;
    for (auto& W : Ws) Ps.push_back(hs::PackedMatrix::from_rows(W.data(), s.K, s.N, s.N));
    hs::RowVectorXf b = hs::RowVectorXf::Random(s.N);
    for (Eigen::Index M : {1, 6, 20, 32, 64, 128, 256, 1024}) {
      if (s.N > 10000 && M > 128) continue;  // seconds per product; the forward-pass rows cover it
      hs::RowMatrixXf x = hs::RowMatrixXf::Random(M, s.K), ye(M, s.N);
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        int i = 0;
        const double te = time_ms(reps, [&] {
          const auto& W = Ws[static_cast<size_t>(i++ % kMats)];
          ye.noalias() = x * W;
          ye.rowwise() += b;
        });
        int q = 0;
        hs::RowMatrixXf yp(M, s.N);
        const double tp = time_ms(reps, [&] {
          const auto& P = Ps[static_cast<size_t>(q++ % kMats)];
          hs::packed_gemm(M, x.data(), s.K, P, 0, s.K, b.data(), yp.data(), s.N);
        });
        // Same matrix for the comparison.
        ye.noalias() = x * Ws[0];
        ye.rowwise() += b;
        hs::packed_gemm(M, x.data(), s.K, Ps[0], 0, s.K, b.data(), yp.data(), s.N);
        const double flop = 2.0 * static_cast<double>(M * s.K * s.N);
        std::printf("%-11s %5ld %3d %11.1f %11.1f %7.2f %9.2e\n", s.name, static_cast<long>(M), threads,
                    flop / te * 1e-6, flop / tp * 1e-6, te / tp, static_cast<double>((ye - yp).cwiseAbs().maxCoeff()));
      }
    }
  }
  return 0;
}
