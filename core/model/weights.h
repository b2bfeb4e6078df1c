// GPT-2 weights, held per head in the TransformerLens layout, over the memory-mapped file.
//
// Float32 tensors are used in place from the mapping when aligned; F16/BF16 ones are converted
// once into owned buffers. The matrices of the products are also packed for the forward pass
// (packed_gemm.h), and that copy is the one kept: a float32 file's mapped pages of them are
// released (mapped again on demand), and a 16-bit file's float32 conversion of them is freed
// and rebuilt from the packed copy only if something reads it in place. Either way each matrix
// is resident about once. Per-head matrices are views, not copies:
//   W_Q[h], W_K[h], W_V[h] [d_model, d_head] = column blocks of c_attn.weight [d_model, 3*d_model]
//   W_O[h]                 [d_head, d_model] = rows h*d_head .. (h+1)*d_head-1 of c_proj.weight
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

namespace hs {

class SafetensorsFile;

// A layer's vectors. Its matrices are read through Weights::attn_w(l) and the like.
struct LayerWeights {
  const float* ln1_w;      // [d_model]
  const float* ln1_b;      // [d_model]
  const float* attn_b;     // [3*d_model]
  const float* proj_b;     // [d_model]             b_O
  const float* ln2_w;      // [d_model]
  const float* ln2_b;      // [d_model]
  const float* fc_b;       // [d_mlp]
  const float* mlp_proj_b; // [d_model]
};

// A layer's four products packed for packed_gemm (see packed_gemm.h), built when the model opens.
struct PackedLayer {
  PackedMatrix attn;      // c_attn.weight [d_model, 3*d_model]
  PackedMatrix proj;      // c_proj.weight [d_model, d_model]; head h is rows h*d_head ..
  PackedMatrix fc;        // mlp.c_fc.weight [d_model, d_mlp]
  PackedMatrix mlp_proj;  // mlp.c_proj.weight [d_mlp, d_model]
};

class Weights {
 public:
  // Validates every tensor's presence, dtype and shape against the config; throws hs::Error
  // naming the file, the tensor, the expected and the found shape.
  static std::shared_ptr<const Weights> load(std::shared_ptr<const SafetensorsFile> file, const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const LayerWeights& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  // A layer's matrices as float32 rows, for reads in place (the forward pass uses packed(l)).
  const float* attn_w(int l) const;      // [d_model, 3*d_model]  c_attn.weight: Q | K | V column blocks
  const float* proj_w(int l) const;      // [d_model, d_model]    c_proj.weight = W_O stacked by head
  const float* fc_w(int l) const;        // [d_model, d_mlp]
  const float* mlp_proj_w(int l) const;  // [d_mlp, d_model]
  const float* wte() const;   // [d_vocab, d_model]
  // Token t's embedding, wte[t], copied into out[d_model]. Use this rather than wte() on a hot
  // path: with a tied unembedding it reads the packed copy, as the mapped pages of wte have been
  // released (see load()).
  void embedding_row(int32_t t, float* out) const;
  const float* wpe() const { return wpe_; }   // [n_ctx, d_model]
  const float* ln_f_w() const { return ln_f_w_; }
  const float* ln_f_b() const { return ln_f_b_; }
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
  ConstStridedMatrixRef W_Q(int l, int h) const;
  ConstStridedMatrixRef W_K(int l, int h) const;
  ConstStridedMatrixRef W_V(int l, int h) const;
  ConstMatrixRef W_O(int l, int h) const;           // [d_head, d_model]
  ConstMatrixRef W_O_all(int l) const;              // [n_heads*d_head, d_model]
  ConstVectorRef b_O(int l) const;                  // [d_model]

  // Warnings found while loading (e.g. non-finite values), one sentence each.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Bytes held in owned float32 buffers: the conversions of 16-bit tensors that are not packed
  // (vectors, wpe, an untied wte), plus any packed matrix rebuilt for a read in place (0 for an
  // aligned F32 file).
  size_t owned_bytes() const;
  // Bytes of the packed copies (about the size of every matrix of the model).
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
  const float* rows_of(const Matrix& m) const;
  const Matrix& layer_matrix(int l, int which) const { return *matrices_[static_cast<size_t>(4 * l + which)]; }

  Weights() = default;
  ModelConfig config_;
  std::shared_ptr<const SafetensorsFile> file_;
  std::vector<std::vector<float>> owned_;
  std::vector<LayerWeights> layers_;
  std::vector<std::unique_ptr<Matrix>> matrices_;  // per layer: c_attn, c_proj, c_fc, mlp c_proj
  std::unique_ptr<Matrix> wte_, lm_head_;  // lm_head_ only when not tied
  const Matrix& unembed() const { return tied_ ? *wte_ : *lm_head_; }
  std::vector<PackedLayer> packed_;
  PackedMatrix packed_unembed_;
  const float* wpe_ = nullptr;
  const float* ln_f_w_ = nullptr;
  const float* ln_f_b_ = nullptr;
  bool tied_ = true;
  std::vector<std::string> warnings_;
};

}  // namespace hs
