// A model's weights, bound by role through its architecture description (architecture.h) and held
// per head in the TransformerLens layout, over the memory-mapped file.
//
// Float32 tensors are used in place from the mapping when aligned; the vectors of F16/BF16 files
// are converted once into owned buffers. The matrices of the products are packed for the forward
// pass (packed_gemm.h), and that copy is the one kept: a 16-bit file's matrices are packed
// straight from the mapping and stay 16-bit (no float32 copy is ever made of them), and the
// mapped pages of packed tensors are released (mapped again on demand). Float32 rows of a packed
// matrix are rebuilt from the packed copy only if something reads it in place. Either way each
// matrix is resident about once. Per-head matrices are views, not copies:
//   W_Q[h]  [d_model, d_head] = column block h of W_qkv's Q part
//   W_K[kv], W_V[kv] [d_model, d_head] = column block kv of its K and V parts
//   W_O[h]  [d_head, d_model] = rows h*d_head .. (h+1)*d_head-1 of W_O_all
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/packed_gemm.h"
#include "core/tensor/eigen.h"
#include "core/tensor/float_buffer.h"

namespace hs {

class SafetensorsFile;

// A layer's vectors; a bias the architecture does not have is nullptr. Its matrices are read
// through Weights::W_qkv(l) and the like.
struct LayerWeights {
  const float* norm1_w = nullptr;  // [d_model]
  const float* norm1_b = nullptr;  // [d_model]
  const float* b_qkv = nullptr;    // [(n_heads + 2*n_kv)*d_head]  b_Q | b_K | b_V
  const float* b_O = nullptr;      // [d_model]
  const float* norm2_w = nullptr;  // [d_model]
  const float* norm2_b = nullptr;  // [d_model]
  const float* b_in = nullptr;     // [d_mlp]
  const float* b_gate = nullptr;   // [d_mlp] (gated MLP)
  const float* b_out = nullptr;    // [d_model]
  // Architecture::qk_norm: one weight over head_dim for every query head, one for every key head.
  const float* q_norm_w = nullptr;  // [d_head]
  const float* k_norm_w = nullptr;  // [d_head]
  // Architecture::post_attn_norm, post_mlp_norm (RMSNorm, no bias).
  const float* post_attn_norm_w = nullptr;  // [d_model]
  const float* post_mlp_norm_w = nullptr;   // [d_model]
};

// A layer's products packed for packed_gemm (see packed_gemm.h), built when the model opens.
struct PackedLayer {
  PackedMatrix W_qkv;   // [d_model, (n_heads + 2*n_kv)*d_head]: Q | K | V column blocks
  PackedMatrix W_O;     // [n_heads*d_head, d_model]; head h is rows h*d_head ..
  PackedMatrix W_in;    // [d_model, d_mlp] (a gated MLP's up projection)
  PackedMatrix W_gate;  // [d_model, d_mlp]; empty unless the MLP is gated
  PackedMatrix W_out;   // [d_mlp, d_model]
};

class Weights {
 public:
  // Binds every tensor the config's architecture describes, checking its presence, dtype and
  // shape; throws hs::Error naming the file, the tensor, the expected and the found shape, or the
  // option of the description that is not implemented (require_implemented).
  //
  // Matrices stored [out, in] (nn.Linear) are packed from their transposed rows, and separate Q,
  // K and V are packed as one [d_model, (n_heads + 2*n_kv)*d_head] matrix, so the forward pass
  // sees one layout and one QKV product whatever the file holds.
  static std::shared_ptr<const Weights> load(std::shared_ptr<const SafetensorsFile> file, const ModelConfig& config);
  // The same over a sharded checkpoint: every tensor is looked up in every shard (a name in two
  // shards is refused); `index_name` names the set in messages about a missing tensor.
  static std::shared_ptr<const Weights> load(std::vector<std::shared_ptr<const SafetensorsFile>> shards,
                                             const ModelConfig& config, const std::string& index_name);

  const ModelConfig& config() const { return config_; }
  const LayerWeights& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  // A layer's matrices as float32 rows, for reads in place (the forward pass uses packed(l)).
  ConstMatrixRef W_qkv(int l) const;    // [d_model, (n_heads + 2*n_kv)*d_head]
  ConstMatrixRef W_O_all(int l) const;  // [n_heads*d_head, d_model] = W_O stacked by head
  ConstMatrixRef W_in(int l) const;     // [d_model, d_mlp]
  ConstMatrixRef W_gate(int l) const;   // [d_model, d_mlp]; only for a gated MLP
  ConstMatrixRef W_out(int l) const;    // [d_mlp, d_model]
  const float* W_E() const;  // [d_vocab, d_model]
  // Token t's embedding as it enters the residual stream, copied into out[d_model]: W_E[t], times
  // embedding_scale() when the architecture scales it (Gemma; TransformerLens folds the factor
  // into its W_E the same way). Use this rather than W_E() on a hot path: with a tied unembedding
  // it reads the packed copy, as the mapped pages of W_E have been released (see load()).
  void embedding_row(int32_t t, float* out) const;
  // float32(sqrt(d_model)) with Architecture::embedding_scaled, else 1.
  float embedding_scale() const { return embedding_scale_; }
  const float* W_pos() const { return W_pos_; }  // [n_ctx, d_model]; nullptr without learned positions
  const float* final_norm_w() const { return final_norm_w_; }  // [d_model]
  const float* final_norm_b() const { return final_norm_b_; }  // [d_model]; nullptr without a bias
  // W_U is [d_model, d_vocab] in TransformerLens; we keep the [d_vocab, d_model] rows (the
  // embedding when tied) and multiply by its transpose.
  const float* unembed_rows() const;  // [d_vocab, d_model]
  // Row t of unembed_rows() (the direction token t's logit reads), copied into out[d_model]
  // without materializing the rest.
  void unembed_row(int32_t t, float* out) const;
  bool tied_unembedding() const { return tied_; }
  // The forward pass's copies of the products' weights. The accessors above read the same values
  // in place: from the mapped file, whose pages of packed tensors were released, or from a
  // conversion rebuilt on first read (see load()).
  const PackedLayer& packed(int l) const { return packed_[static_cast<size_t>(l)]; }
  const PackedMatrix& packed_unembed() const { return packed_unembed_; }  // W_U [d_model, d_vocab]

  // Per-head views (see the file comment).
  ConstStridedMatrixRef W_Q(int l, int h) const;     // [d_model, d_head]
  ConstStridedMatrixRef W_K(int l, int kv) const;    // [d_model, d_head]; kv = config().kv_head(h)
  ConstStridedMatrixRef W_V(int l, int kv) const;    // [d_model, d_head]
  ConstMatrixRef W_O(int l, int h) const;            // [d_head, d_model]
  ConstVectorRef b_O(int l) const;                   // [d_model]; zeros without an output bias

  // Whether the packed copies were mapped from the cache on disk (pack_cache.h) rather than packed.
  bool packed_from_cache() const { return packed_from_cache_; }

  // Warnings found while loading (e.g. non-finite values), one sentence each.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Bytes held in owned float32 buffers: the conversions of 16-bit tensors that are not packed
  // (vectors, W_pos, an untied W_E), a QKV joined in float32, plus any packed matrix rebuilt for
  // a read in place (0 for an aligned F32 file).
  size_t owned_bytes() const;
  // Bytes of the packed copies (about the size of every matrix of the model, in the file's
  // 16 or 32 bits).
  size_t packed_bytes() const;

 private:
  // A matrix the forward pass reads packed. `rows` points into the mapped file (F32) or, until it
  // was packed, at its float32 conversion; a freed conversion is rebuilt from `packed` once.
  struct Matrix {
    const float* rows = nullptr;
    const PackedMatrix* packed = nullptr;
    bool transposed = false;  // packed from transposed rows (the unembedding)
    mutable std::once_flag once;
    mutable std::vector<float> rebuilt;
    mutable std::atomic<bool> built{false};  // rebuilt is complete (read by owned_bytes)
  };
  // The layer matrices, in this order in matrices_ (kLayerMatrices per layer) and in PackedLayer.
  enum LayerMatrix { kQkv, kAttnOut, kMlpIn, kMlpOut, kMlpGate, kLayerMatrices };
  const float* rows_of(const Matrix& m) const;
  const Matrix* layer_matrix_ptr(int l, LayerMatrix which) const {
    return matrices_[static_cast<size_t>(kLayerMatrices * l + which)].get();
  }
  const Matrix& layer_matrix(int l, LayerMatrix which) const {
    return *matrices_[static_cast<size_t>(kLayerMatrices * l + which)];
  }
  ConstMatrixRef layer_rows(int l, LayerMatrix which) const;

  Weights() = default;
  ModelConfig config_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  bool packed_from_cache_ = false;
  std::vector<FloatBuffer> owned_;  // float32 conversions of 16-bit tensors, joined Q/K/V
  std::vector<LayerWeights> layers_;
  std::vector<std::unique_ptr<Matrix>> matrices_;  // per layer: W_qkv, W_O, W_in, W_out, W_gate (or null)
  std::unique_ptr<Matrix> W_E_, W_U_;  // W_U_ only when not tied
  const Matrix& unembed() const { return tied_ ? *W_E_ : *W_U_; }
  std::vector<PackedLayer> packed_;
  PackedMatrix packed_unembed_;
  const float* W_pos_ = nullptr;
  const float* final_norm_w_ = nullptr;
  const float* final_norm_b_ = nullptr;
  std::vector<float> zeros_;  // [d_model]: b_O of a layer without an output bias
  bool tied_ = true;
  float embedding_scale_ = 1.0f;
  std::vector<std::string> warnings_;
};

}  // namespace hs
