// A head's QK and OV circuits ("A Mathematical Framework for Transformer Circuits", Elhage et al.
// 2021), kept factored at rank d_head and never materialized at vocabulary size. TransformerLens's
// [in, out] convention (a row vector x is multiplied as x @ W):
//   W_QK = W_Q W_K^T  [d_model, d_model]: a query vector x scores a key vector y as x W_QK y^T
//   W_OV = W_V W_O    [d_model, d_model]: a source vector x writes x W_OV into the destination
// Head h reads key/value head config.kv_head(h), so grouped-query models need nothing else.
//
// What is folded and what is ignored (docs/circuits.md says the same; the view's caption too):
//   folded:  the layer's first norm weight into the matrices that read the residual stream,
//            W_Q, W_K and W_V (diag(w) W); the final norm's weight into the unembedding
//            (diag(w_f) W_U).
//   ignored: every bias (b_Q, b_K, b_V, b_O and the norms' biases), the norms' centring and
//            their division by each vector's scale, positions (learned or rotary), and the
//            attention scale 1/sqrt(d_head).
// Token vectors (TokenVectors): the raw embedding rows W_E[t], or the extended embedding, what a
// head after layer 0 reads of a token on its own: W_E[t] + MLP0(ln2_0(W_E[t])) (layer 0's MLP, its
// norm, weights and biases applied to the embedding row; no position, no layer 0 attention), then
// the reading layer's norm without its weight (folded) or bias (ignored): centred and divided by
// its scale for LayerNorm, divided by its root mean square for RMSNorm. The norm's eps is the
// model's, so the vectors are the same for every layer after layer 0.
#pragma once

#include <Eigen/Core>
#include <complex>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/model/cache.h"
#include "core/model/weights.h"
#include "core/tensor/eigen.h"

namespace hs {

// Where a head's token vectors come from (the file comment). Default: Raw for layer 0's heads,
// which read the embedding before any MLP, Extended for every later head.
enum class TokenVectors : uint8_t { Raw, Extended, Default };
// Default resolved for a head of `layer`; Extended for layer 0 throws hs::Error (its heads run
// before layer 0's MLP).
TokenVectors resolve_token_vectors(TokenVectors vectors, int layer);
std::string_view to_string(TokenVectors vectors);  // "raw", "extended" ("default")
// "raw" | "extended" | "default"; throws hs::Error naming the choices for anything else.
TokenVectors parse_token_vectors(std::string_view name);

// Token vectors of ids first .. first+count-1 as `vectors` (Raw or Extended) says, [count, d_model].
void token_vectors_block(RowMatrixXf& out, const Weights& weights, int first, int count, TokenVectors vectors);

// One head's four matrices in float64, folded as above.
struct HeadFactors {
  Eigen::MatrixXd W_Q, W_K, W_V;  // [d_model, d_head]
  Eigen::MatrixXd W_O;            // [d_head, d_model]
};
// Throws hs::Error for a layer or head the model does not have.
HeadFactors head_factors(const Weights& weights, int layer, int head);

// The singular values of A B^T for A, B [n, r] (n >= r), descending, r of them (a product of rank
// r has no more): with A = Q_a R_a and B = Q_b R_b, A B^T = Q_a (R_a R_b^T) Q_b^T and the
// orthonormal Q's change no singular value, so they are those of the r x r matrix R_a R_b^T.
std::vector<double> factored_singular_values(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B);

// The spectra that describe a head independently of any prompt.
struct CircuitSpectrum {
  int layer = 0, head = 0;
  TokenVectors vectors = TokenVectors::Raw;  // what the full OV circuit's token vectors were (resolved)
  std::vector<double> qk_singular_values;  // [d_head] of W_QK, descending (the other d_model - d_head are 0)
  std::vector<double> ov_singular_values;  // [d_head] of W_OV, descending
  // [d_head] the nonzero eigenvalues of the full OV circuit W_E W_OV W_U [d_vocab, d_vocab], by
  // descending real part, then descending imaginary part. The circuit is (W_E W_V)(W_O W_U), and
  // the nonzero eigenvalues of A B are those of B A = W_O (W_U W_E) W_V [d_head, d_head].
  std::vector<std::complex<double>> ov_eigenvalues;
  // sum(lambda) / sum(|lambda|): near 1 for a head that copies the token it reads (its OV circuit
  // raises that token's own logit), negative for one that suppresses it; 0 when every lambda is 0.
  double copying_score = 0.0;
};
// One head, reading the vocabulary once (blocks of rows, float products accumulated in float64).
CircuitSpectrum circuit_spectrum(const Weights& weights, int layer, int head,
                                 TokenVectors vectors = TokenVectors::Default);
double copying_score(const Weights& weights, int layer, int head, TokenVectors vectors = TokenVectors::Default);

// The [d_model, d_model] product every head's full OV circuit passes through, W_U E with the
// final norm's weight folded: G = diag(w_f) sum_t W_U[:, t] E[t] (a sum over the vocabulary), E
// the token vectors (Raw or Extended).
Eigen::MatrixXd unembed_embed_product(const Weights& weights, TokenVectors vectors = TokenVectors::Raw);
// The copying score of every head, [layer, head], through one G per kind of token vectors shared by
// all the heads that read it (Default or Extended: layer 0's heads raw, the others extended; Raw: all raw).
RowMatrixXf copying_scores(const Weights& weights, TokenVectors vectors = TokenVectors::Default);

// What one head does to the prompt's tokens (no positions: token identity only).
struct PromptCircuits {
  int layer = 0, head = 0;
  TokenVectors vectors = TokenVectors::Raw;  // the token vectors of E (resolved)
  int top_k = 0;
  std::vector<int32_t> tokens;        // [pos]
  // E W_QK E^T (E: the token vectors) restricted to the prompt's tokens: row = the query (destination) token, column =
  // the key (source) token. Not scaled by 1/sqrt(d_head); every pair, whatever the order.
  RowMatrixXf qk_scores;              // [pos, pos]
  float qk_range = 1.0f;              // max |qk_scores| (1 when 0): the colour range
  // Row t of E W_OV W_U, the direct effect on the logits of the head attending to token t, is
  // computed one d_vocab row at a time; only its top_k are kept, and the token's own entry.
  std::vector<int32_t> ov_top_ids;    // [pos, top_k], most promoted first
  std::vector<float> ov_top_logits;   // [pos, top_k]
  std::vector<float> ov_self_logits;  // [pos]: the entry of the token itself
  std::vector<int32_t> ov_self_ranks; // [pos]: 0 = the token promotes itself most
};
// Throws hs::Error for a layer or head the model does not have, or an id outside the vocabulary.
PromptCircuits prompt_circuits(const Weights& weights, int layer, int head, const std::vector<int32_t>& tokens,
                               int top_k, TokenVectors vectors = TokenVectors::Default);

}  // namespace hs
