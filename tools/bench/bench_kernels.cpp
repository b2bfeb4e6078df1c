// bench_kernels: the layer products of GPT-2 small at a few row counts, Eigen's GEMM against
// packed_gemm, on 1 and 2 threads. Prints GFLOP/s (median of repetitions after warm-up), the
// ratio, and the largest difference between the two results. This is the measurement behind the
// tile choices in core/model/packed_gemm.cpp; run it after changing the kernel.
//
// The second part times the backward pass's product dx = dy W^T (packed_gemm_transposed) at 1
// and 20 rows (and 128), against the forward product of the same packed matrix (both stream the
// same bytes) and against Eigen's dy * W.transpose() on the float32 rows; for float32 and BF16
// panels.
//
//   build/tools/bench/bench_kernels [REPS] [forward|transposed|all]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
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

struct Shape { const char* name; Eigen::Index K, N; };
const Shape kShapes[] = {{"c_attn", 768, 2304}, {"c_proj", 768, 768}, {"c_fc", 768, 3072}, {"mlp c_proj", 3072, 768},
                         {"unembed", 768, 50257}};

// Rounds to BF16 (nearest, ties to even) and keeps the 16 bits: a BF16 file's weights.
std::vector<uint16_t> to_bf16(const hs::RowMatrixXf& W) {
  std::vector<uint16_t> h(static_cast<size_t>(W.size()));
  for (Eigen::Index i = 0; i < W.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, W.data() + i, 4);
    h[static_cast<size_t>(i)] = static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);
  }
  return h;
}

// dx = dy W^T: Eigen on the float32 rows, the forward product of the same packed matrix, and
// packed_gemm_transposed. Times in ms; the ratios are transposed / forward and Eigen / transposed.
void bench_transposed(int reps, std::mt19937& gen) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::printf("\ndx = dy W^T (packed_gemm_transposed) against the forward product of the same panels and Eigen\n");
  std::printf("%-11s %-4s %5s %3s %10s %10s %10s %8s %8s %9s %7s\n", "product", "type", "rows", "thr", "eigen ms",
              "forward ms", "transp ms", "tr/fwd", "eig/tr", "GB/s tr", "max diff");
  for (const Shape& s : kShapes) {
    const int kMats = s.K * s.N > 10000000 ? 1 : 12;  // weights from memory, as above
    std::vector<hs::RowMatrixXf> Ws(kMats, hs::RowMatrixXf(s.K, s.N));
    for (auto& W : Ws) W = W.unaryExpr([&](float) { return nd(gen) * 0.02f; });
    for (hs::PanelType type : {hs::PanelType::F32, hs::PanelType::BF16}) {
      std::vector<hs::PackedMatrix> Ps;
      std::vector<hs::RowMatrixXf> Es;  // Eigen's float32 rows: the packed values
      for (auto& W : Ws) {
        if (type == hs::PanelType::F32) {
          Ps.push_back(hs::PackedMatrix::from_rows(W.data(), s.K, s.N, s.N));
        } else {
          const std::vector<uint16_t> h = to_bf16(W);
          Ps.push_back(hs::PackedMatrix::from_rows(type, h.data(), s.K, s.N, s.N));
        }
        Es.emplace_back(s.K, s.N);
        Ps.back().unpack_rows(Es.back().data());
      }
      for (Eigen::Index M : {1, 20, 128}) {
        hs::RowMatrixXf dy = hs::RowMatrixXf::Random(M, s.N), x = hs::RowMatrixXf::Random(M, s.K);
        hs::RowMatrixXf dxe(M, s.K), dxp(M, s.K), y(M, s.N);
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          int i = 0, f = 0, q = 0;
          const double te = time_ms(reps, [&] { dxe.noalias() = dy * Es[static_cast<size_t>(i++ % kMats)].transpose(); });
          const double tf = time_ms(reps, [&] {
            hs::packed_gemm(M, x.data(), s.K, Ps[static_cast<size_t>(f++ % kMats)], 0, s.K, nullptr, y.data(), s.N);
          });
          const double tt = time_ms(reps, [&] {
            hs::packed_gemm_transposed(M, dy.data(), s.N, Ps[static_cast<size_t>(q++ % kMats)], 0, s.K, dxp.data(), s.K,
                                       false);
          });
          dxe.noalias() = dy * Es[0].transpose();
          hs::packed_gemm_transposed(M, dy.data(), s.N, Ps[0], 0, s.K, dxp.data(), s.K, false);
          const double weight_gb = static_cast<double>(Ps[0].bytes()) * 1e-9;
          std::printf("%-11s %-4s %5ld %3d %10.3f %10.3f %10.3f %8.2f %8.2f %9.1f %7.1e\n", s.name,
                      type == hs::PanelType::F32 ? "f32" : "bf16", static_cast<long>(M), threads, te, tf, tt, tt / tf,
                      te / tt, weight_gb / (tt * 1e-3), static_cast<double>((dxe - dxp).cwiseAbs().maxCoeff()));
          std::fflush(stdout);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  const std::string part = argc > 2 ? argv[2] : "all";
  if (part != "all" && part != "forward" && part != "transposed") {
    std::fprintf(stderr, "bench_kernels: the second argument is forward, transposed or all, not '%s'\n", part.c_str());
    return 2;
  }
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  if (part == "transposed") {
    bench_transposed(reps, gen);
    return 0;
  }
  const auto& shapes = kShapes;
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
  if (part == "all") bench_transposed(reps, gen);
  return 0;
}
