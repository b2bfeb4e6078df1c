#include "core/analysis/circuits.h"

#include <Eigen/Eigenvalues>
#include <Eigen/QR>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>

#include "core/analysis/top_k.h"
#include "core/error.h"
#include "core/model/ops.h"

namespace hs {
namespace {

// Vocabulary rows read per block: the blocks' products are float32 (fast), summed in float64.
constexpr int kVocabBlock = 512;
// Prompt tokens whose OV rows of d_vocab are held at once.
constexpr int kRowBlock = 32;

void check_head(const ModelConfig& c, int layer, int head) {
  if (layer < 0 || layer >= c.n_layers)
    throw Error("layer " + std::to_string(layer) + " does not exist; the model has " + std::to_string(c.n_layers) +
                " layers (0.." + std::to_string(c.n_layers - 1) + ").");
  if (head < 0 || head >= c.n_heads)
    throw Error("head " + std::to_string(head) + " does not exist; the model has " + std::to_string(c.n_heads) +
                " heads per layer (0.." + std::to_string(c.n_heads - 1) + ").");
}

// Rows first .. first+count-1 of W_E (or of the unembedding's rows), [count, d_model]. Row by
// row through the accessors, which read the packed copy when the mapped pages were released.
void embedding_block(RowMatrixXf& out, const Weights& w, int first, int count, bool unembedding) {
  out.resize(count, w.config().d_model);
  for (int i = 0; i < count; ++i) {
    if (unembedding) w.unembed_row(first + i, out.row(i).data());
    else w.embedding_row(first + i, out.row(i).data());
  }
}

// diag(w) M for a strided [d_model, d_head] view, in float64.
Eigen::MatrixXd fold_rows(const ConstStridedMatrixRef& M, const float* w) {
  Eigen::MatrixXd out = M.cast<double>();
  if (w)
    for (Eigen::Index r = 0; r < out.rows(); ++r) out.row(r) *= static_cast<double>(w[r]);
  return out;
}

Eigen::VectorXd final_norm_weight(const Weights& w) {
  const int D = w.config().d_model;
  Eigen::VectorXd f(D);
  for (int i = 0; i < D; ++i) f(i) = w.final_norm_w() ? static_cast<double>(w.final_norm_w()[i]) : 1.0;
  return f;
}

// The eigenvalues of the [d_head, d_head] matrix B A, sorted, and the copying score.
void set_eigenvalues(CircuitSpectrum& s, const Eigen::MatrixXd& BA) {
  Eigen::EigenSolver<Eigen::MatrixXd> solver(BA, false);
  const Eigen::VectorXcd ev = solver.eigenvalues();
  s.ov_eigenvalues.assign(ev.data(), ev.data() + ev.size());
  std::sort(s.ov_eigenvalues.begin(), s.ov_eigenvalues.end(), [](const auto& a, const auto& b) {
    return a.real() != b.real() ? a.real() > b.real() : a.imag() > b.imag();
  });
  std::complex<double> sum = 0.0;
  double abs_sum = 0.0;
  for (const auto& l : s.ov_eigenvalues) {
    sum += l;
    abs_sum += std::abs(l);
  }
  // The sum of a real matrix's eigenvalues is its trace: real.
  s.copying_score = abs_sum > 0.0 ? sum.real() / abs_sum : 0.0;
}

void set_singular_values(CircuitSpectrum& s, const HeadFactors& f) {
  s.qk_singular_values = factored_singular_values(f.W_Q, f.W_K);
  s.ov_singular_values = factored_singular_values(f.W_V, f.W_O.transpose());
}

}  // namespace

HeadFactors head_factors(const Weights& weights, int layer, int head) {
  const ModelConfig& c = weights.config();
  check_head(c, layer, head);
  const int kv = c.kv_head(head);
  const float* w1 = weights.layer(layer).norm1_w;
  HeadFactors f;
  f.W_Q = fold_rows(weights.W_Q(layer, head), w1);
  f.W_K = fold_rows(weights.W_K(layer, kv), w1);
  f.W_V = fold_rows(weights.W_V(layer, kv), w1);
  f.W_O = weights.W_O(layer, head).cast<double>();
  return f;
}

std::vector<double> factored_singular_values(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) {
  const Eigen::Index r = A.cols(), k = std::min(A.rows(), r);
  // R factors [k, r] (upper triangular when n >= r).
  const Eigen::MatrixXd Ra = Eigen::HouseholderQR<Eigen::MatrixXd>(A).matrixQR().topRows(k).triangularView<Eigen::Upper>();
  const Eigen::MatrixXd Rb = Eigen::HouseholderQR<Eigen::MatrixXd>(B).matrixQR().topRows(k).triangularView<Eigen::Upper>();
  const Eigen::MatrixXd small = Ra * Rb.transpose();  // [k, k]
  const Eigen::VectorXd sv = Eigen::JacobiSVD<Eigen::MatrixXd>(small).singularValues();  // descending
  std::vector<double> out(sv.data(), sv.data() + sv.size());
  out.resize(static_cast<size_t>(r), 0.0);
  return out;
}

CircuitSpectrum circuit_spectrum(const Weights& weights, int layer, int head) {
  const ModelConfig& c = weights.config();
  const HeadFactors f = head_factors(weights, layer, head);
  CircuitSpectrum s;
  s.layer = layer;
  s.head = head;
  set_singular_values(s, f);

  // W_U W_E W_V = sum_t W_U[:, t] (W_E[t] W_V), a [d_model, d_head] sum over the vocabulary.
  const RowMatrixXf V_f = f.W_V.cast<float>();  // [d_model, d_head]
  Eigen::MatrixXd UEV = Eigen::MatrixXd::Zero(c.d_model, c.d_head);
  RowMatrixXf E_b, U_b, EV_b;
  for (int first = 0; first < c.d_vocab; first += kVocabBlock) {
    const int n = std::min(kVocabBlock, c.d_vocab - first);
    embedding_block(E_b, weights, first, n, false);                          // [n, d_model]
    if (!weights.tied_unembedding()) embedding_block(U_b, weights, first, n, true);
    EV_b.noalias() = E_b * V_f;                                              // [n, d_head]
    const RowMatrixXf& U = weights.tied_unembedding() ? E_b : U_b;           // rows of W_U^T
    UEV += (U.transpose() * EV_b).cast<double>();
  }
  const Eigen::MatrixXd BA = f.W_O * final_norm_weight(weights).asDiagonal() * UEV;  // [d_head, d_head]
  set_eigenvalues(s, BA);
  return s;
}

double copying_score(const Weights& weights, int layer, int head) {
  return circuit_spectrum(weights, layer, head).copying_score;
}

Eigen::MatrixXd unembed_embed_product(const Weights& weights) {
  const ModelConfig& c = weights.config();
  const bool tied = weights.tied_unembedding();
  Eigen::MatrixXd G = Eigen::MatrixXd::Zero(c.d_model, c.d_model);
  Eigen::MatrixXf G_b(c.d_model, c.d_model);
  RowMatrixXf E_b, U_b;
  for (int first = 0; first < c.d_vocab; first += kVocabBlock) {
    const int n = std::min(kVocabBlock, c.d_vocab - first);
    embedding_block(E_b, weights, first, n, false);
    if (tied) {
      // W_E^T W_E is symmetric: one triangle is half the product.
      G_b.setZero();
      G_b.selfadjointView<Eigen::Lower>().rankUpdate(E_b.transpose());
      G += G_b.selfadjointView<Eigen::Lower>().toDenseMatrix().cast<double>();
    } else {
      embedding_block(U_b, weights, first, n, true);
      G += (U_b.transpose() * E_b).cast<double>();
    }
  }
  return final_norm_weight(weights).asDiagonal() * G;
}

RowMatrixXf copying_scores(const Weights& weights) {
  const ModelConfig& c = weights.config();
  const Eigen::MatrixXd G = unembed_embed_product(weights);
  RowMatrixXf scores(c.n_layers, c.n_heads);
  for (int l = 0; l < c.n_layers; ++l) {
    for (int h = 0; h < c.n_heads; ++h) {
      const HeadFactors f = head_factors(weights, l, h);
      CircuitSpectrum s;
      set_eigenvalues(s, f.W_O * G * f.W_V);
      scores(l, h) = static_cast<float>(s.copying_score);
    }
  }
  return scores;
}

PromptCircuits prompt_circuits(const Weights& weights, int layer, int head, const std::vector<int32_t>& tokens,
                               int top_k) {
  const ModelConfig& c = weights.config();
  const HeadFactors f = head_factors(weights, layer, head);
  for (int32_t t : tokens)
    if (t < 0 || t >= c.d_vocab)
      throw Error("token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(c.d_vocab - 1) +
                  ").");
  const int n = static_cast<int>(tokens.size());
  top_k = std::clamp(top_k, 1, c.d_vocab);
  PromptCircuits p;
  p.layer = layer;
  p.head = head;
  p.top_k = top_k;
  p.tokens = tokens;

  Eigen::MatrixXd E(n, c.d_model);  // the prompt's embedding rows
  {
    RowVectorXf row(c.d_model);
    for (int i = 0; i < n; ++i) {
      weights.embedding_row(tokens[static_cast<size_t>(i)], row.data());
      E.row(i) = row.cast<double>();
    }
  }
  const Eigen::MatrixXd EQ = E * f.W_Q, EK = E * f.W_K;  // [pos, d_head]
  p.qk_scores = (EQ * EK.transpose()).cast<float>();
  const float qk_max = n > 0 ? p.qk_scores.cwiseAbs().maxCoeff() : 0.0f;
  p.qk_range = qk_max > 0.0f ? qk_max : 1.0f;

  // Each token's write, e_t W_V W_O, with the final norm's weight folded, read by the forward
  // pass's unembedding kernel a block of rows at a time.
  const Eigen::MatrixXd writes = (E * f.W_V * f.W_O) * final_norm_weight(weights).asDiagonal();  // [pos, d_model]
  p.ov_top_ids.assign(static_cast<size_t>(n) * top_k, 0);
  p.ov_top_logits.assign(static_cast<size_t>(n) * top_k, 0.0f);
  p.ov_self_logits.assign(static_cast<size_t>(n), 0.0f);
  p.ov_self_ranks.assign(static_cast<size_t>(n), 0);
  RowMatrixXf x, logits;
  std::vector<std::pair<float, int32_t>> best;
  for (int first = 0; first < n; first += kRowBlock) {
    const int rows = std::min(kRowBlock, n - first);
    x = writes.middleRows(first, rows).cast<float>();
    logits.resize(rows, c.d_vocab);
    unembed_forward(logits, x, weights.packed_unembed());
    for (int r = 0; r < rows; ++r) {
      const int i = first + r;
      const auto row = logits.row(r);
      top_k_entries(row, top_k, best);
      for (int k = 0; k < static_cast<int>(best.size()); ++k) {
        p.ov_top_ids[static_cast<size_t>(i) * top_k + k] = best[static_cast<size_t>(k)].second;
        p.ov_top_logits[static_cast<size_t>(i) * top_k + k] = best[static_cast<size_t>(k)].first;
      }
      const float self = row(tokens[static_cast<size_t>(i)]);
      p.ov_self_logits[static_cast<size_t>(i)] = self;
      p.ov_self_ranks[static_cast<size_t>(i)] = static_cast<int32_t>((row.array() > self).count());
    }
  }
  return p;
}

}  // namespace hs
