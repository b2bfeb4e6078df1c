#include "core/analysis/circuits.h"

#include <Eigen/Eigenvalues>
#include <Eigen/QR>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "core/analysis/top_k.h"
#include "core/error.h"
#include "core/model/ops.h"
#include "core/model/thread_scope.h"

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

// `rows` [n, d_model] divided by the model's norm as the norm kind does (LayerNorm: centred and
// divided by sqrt(var + eps); RMSNorm: divided by sqrt(mean(x^2) + eps)), without weight or bias.
void normalize_rows(RowMatrixXf& rows, const ModelConfig& c) {
  const std::vector<float> ones(static_cast<size_t>(c.d_model), 1.0f);
  RowMatrixXf out;
  norm_forward(out, nullptr, rows, ones.data(), nullptr, c.norm_eps, c.architecture.norm);
  rows.swap(out);
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

TokenVectors resolve_token_vectors(TokenVectors vectors, int layer) {
  if (vectors == TokenVectors::Default) return layer == 0 ? TokenVectors::Raw : TokenVectors::Extended;
  if (vectors == TokenVectors::Extended && layer == 0)
    throw Error("layer 0's heads read the raw embedding: they run before layer 0's MLP, which the extended "
                "embedding passes through. Use the raw embedding for them.");
  return vectors;
}

std::string_view to_string(TokenVectors vectors) {
  switch (vectors) {
    case TokenVectors::Raw: return "raw";
    case TokenVectors::Extended: return "extended";
    case TokenVectors::Default: return "default";
  }
  return "?";
}

TokenVectors parse_token_vectors(std::string_view name) {
  for (TokenVectors v : {TokenVectors::Raw, TokenVectors::Extended, TokenVectors::Default})
    if (name == to_string(v)) return v;
  throw Error("\"" + std::string(name) +
              "\" is not a kind of token vectors; use raw (the embedding rows), extended (through layer 0's MLP) "
              "or default (raw for layer 0's heads, extended after).");
}

void token_vectors_block(RowMatrixXf& out, const Weights& weights, int first, int count, TokenVectors vectors) {
  embedding_block(out, weights, first, count, false);
  if (vectors == TokenVectors::Raw) return;
  if (vectors != TokenVectors::Extended) throw Error("token_vectors_block: resolve Default for a layer first.");
  // Layer 0's MLP on the embedding rows alone, with the forward pass's kernels.
  const ModelConfig& c = weights.config();
  const LayerWeights& W = weights.layer(0);
  const PackedLayer& WP = weights.packed(0);
  RowMatrixXf normalized, up, gate, hidden, mlp_out;
  norm_forward(normalized, nullptr, out, W.norm2_w, W.norm2_b, c.norm_eps, c.architecture.norm);
  linear_forward(up, normalized, WP.W_in, W.b_in);
  if (c.architecture.mlp == MlpKind::Gated) {
    linear_forward(gate, normalized, WP.W_gate, W.b_gate);
    gated_activation_forward(hidden, gate, up, c.activation);
  } else {
    activation_forward(hidden, up, c.activation);
  }
  linear_forward(mlp_out, hidden, WP.W_out, W.b_out);
  out += mlp_out;
  normalize_rows(out, c);
}

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

CircuitSpectrum circuit_spectrum(const Weights& weights, int layer, int head, TokenVectors vectors) {
  const ModelConfig& c = weights.config();
  const HeadFactors f = head_factors(weights, layer, head);
  CircuitSpectrum s;
  s.layer = layer;
  s.head = head;
  s.vectors = resolve_token_vectors(vectors, layer);
  set_singular_values(s, f);

  // W_U E W_V = sum_t W_U[:, t] (E[t] W_V), a [d_model, d_head] sum over the vocabulary. With a
  // tied unembedding W_U's columns are the raw embedding rows, whatever E is.
  const RowMatrixXf V_f = f.W_V.cast<float>();  // [d_model, d_head]
  Eigen::MatrixXd UEV = Eigen::MatrixXd::Zero(c.d_model, c.d_head);
  RowMatrixXf E_b, U_b, EV_b;
  const bool raw = s.vectors == TokenVectors::Raw;
  for (int first = 0; first < c.d_vocab; first += kVocabBlock) {
    const int n = std::min(kVocabBlock, c.d_vocab - first);
    token_vectors_block(E_b, weights, first, n, s.vectors);                  // [n, d_model]
    if (!weights.tied_unembedding() || !raw) embedding_block(U_b, weights, first, n, !weights.tied_unembedding());
    EV_b.noalias() = E_b * V_f;                                              // [n, d_head]
    const RowMatrixXf& U = weights.tied_unembedding() && raw ? E_b : U_b;    // rows of W_U^T
    UEV += (U.transpose() * EV_b).cast<double>();
  }
  const Eigen::MatrixXd BA = f.W_O * final_norm_weight(weights).asDiagonal() * UEV;  // [d_head, d_head]
  set_eigenvalues(s, BA);
  return s;
}

double copying_score(const Weights& weights, int layer, int head, TokenVectors vectors) {
  return circuit_spectrum(weights, layer, head, vectors).copying_score;
}

Eigen::MatrixXd unembed_embed_product(const Weights& weights, TokenVectors vectors) {
  const ModelConfig& c = weights.config();
  if (vectors == TokenVectors::Default) throw Error("unembed_embed_product: choose raw or extended token vectors.");
  const bool raw = vectors == TokenVectors::Raw;
  const bool tied = weights.tied_unembedding();
  Eigen::MatrixXd G = Eigen::MatrixXd::Zero(c.d_model, c.d_model);
  Eigen::MatrixXf G_b(c.d_model, c.d_model);
  RowMatrixXf E_b, U_b;
  for (int first = 0; first < c.d_vocab; first += kVocabBlock) {
    const int n = std::min(kVocabBlock, c.d_vocab - first);
    token_vectors_block(E_b, weights, first, n, vectors);
    if (!(tied && raw)) embedding_block(U_b, weights, first, n, !tied);  // W_U's columns: the raw embedding rows when tied
    // Eigen's products on one thread: with a team, Eigen splits a product's depth by the number of
    // threads, and the window (one thread) and the command line (a team) would get different bits.
    const ThreadScope one_thread(1);
    if (tied && raw) {
      // W_E^T W_E is symmetric: one triangle is half the product.
      G_b.setZero();
      G_b.selfadjointView<Eigen::Lower>().rankUpdate(E_b.transpose());
      G += G_b.selfadjointView<Eigen::Lower>().toDenseMatrix().cast<double>();
    } else {
      G += (U_b.transpose() * E_b).cast<double>();
    }
  }
  return final_norm_weight(weights).asDiagonal() * G;
}

RowMatrixXf copying_scores(const Weights& weights, TokenVectors vectors) {
  const ModelConfig& c = weights.config();
  // One G per kind the layers read, each computed once.
  std::optional<Eigen::MatrixXd> G_raw, G_extended;
  RowMatrixXf scores(c.n_layers, c.n_heads);
  for (int l = 0; l < c.n_layers; ++l) {
    const TokenVectors v = vectors == TokenVectors::Default ? resolve_token_vectors(vectors, l)
                                                            : (l == 0 ? TokenVectors::Raw : vectors);
    std::optional<Eigen::MatrixXd>& G = v == TokenVectors::Raw ? G_raw : G_extended;
    if (!G) G = unembed_embed_product(weights, v);
    const ThreadScope one_thread(1);  // Eigen's products, as in unembed_embed_product
    for (int h = 0; h < c.n_heads; ++h) {
      const HeadFactors f = head_factors(weights, l, h);
      CircuitSpectrum s;
      set_eigenvalues(s, f.W_O * *G * f.W_V);
      scores(l, h) = static_cast<float>(s.copying_score);
    }
  }
  return scores;
}

PromptCircuits prompt_circuits(const Weights& weights, int layer, int head, const std::vector<int32_t>& tokens,
                               int top_k, TokenVectors vectors) {
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
  p.vectors = resolve_token_vectors(vectors, layer);

  Eigen::MatrixXd E(n, c.d_model);  // the prompt's token vectors
  {
    RowMatrixXf row;
    for (int i = 0; i < n; ++i) {
      token_vectors_block(row, weights, tokens[static_cast<size_t>(i)], 1, p.vectors);
      E.row(i) = row.row(0).cast<double>();
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
