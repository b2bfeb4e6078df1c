// GPT-2 weights, held per head in the TransformerLens layout, over the memory-mapped file.
//
// Float32 tensors are used in place from the mapping when aligned; F16/BF16 ones are converted
// once into owned buffers. Per-head matrices are views, not copies:
//   W_Q[h], W_K[h], W_V[h] [d_model, d_head] = column blocks of c_attn.weight [d_model, 3*d_model]
//   W_O[h]                 [d_head, d_model] = rows h*d_head .. (h+1)*d_head-1 of c_proj.weight
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/packed_gemm.h"
#include "core/tensor/eigen.h"

namespace hs {

class SafetensorsFile;

struct LayerWeights {
  const float* ln1_w;      // [d_model]
  const float* ln1_b;      // [d_model]
  const float* attn_w;     // [d_model, 3*d_model]  c_attn.weight: Q | K | V column blocks
  const float* attn_b;     // [3*d_model]
  const float* proj_w;     // [d_model, d_model]    c_proj.weight = W_O stacked by head
  const float* proj_b;     // [d_model]             b_O
  const float* ln2_w;      // [d_model]
  const float* ln2_b;      // [d_model]
  const float* fc_w;       // [d_model, d_mlp]
  const float* fc_b;       // [d_mlp]
  const float* mlp_proj_w; // [d_mlp, d_model]
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
  const float* wte() const { return wte_; }   // [d_vocab, d_model]
  // Token t's embedding, wte[t], copied into out[d_model]. Use this rather than wte() on a hot
  // path: with a tied unembedding it reads the packed copy, as the mapped pages of wte have been
  // released (see load()).
  void embedding_row(int32_t t, float* out) const;
  const float* wpe() const { return wpe_; }   // [n_ctx, d_model]
  const float* ln_f_w() const { return ln_f_w_; }
  const float* ln_f_b() const { return ln_f_b_; }
  // W_U is [d_model, d_vocab] in TransformerLens; we keep the [d_vocab, d_model] rows (the
  // embedding when tied) and multiply by its transpose.
  const float* unembed_rows() const { return unembed_; }  // [d_vocab, d_model]
  bool tied_unembedding() const { return tied_; }
  // The forward pass's copies of the products' weights (the pointers above stay valid and read
  // the same values; the mapped pages of packed tensors are released, see load()).
  const PackedLayer& packed(int l) const { return packed_[static_cast<size_t>(l)]; }
  const PackedMatrix& packed_unembed() const { return packed_unembed_; }  // W_U [d_model, d_vocab]

  // Per-head views (see the file comment).
  ConstStridedMatrixRef W_Q(int l, int h) const;
  ConstStridedMatrixRef W_K(int l, int h) const;
  ConstStridedMatrixRef W_V(int l, int h) const;
  ConstMatrixRef W_O(int l, int h) const;           // [d_head, d_model]
  ConstMatrixRef W_O_all(int l) const;              // [n_head*d_head, d_model]
  ConstVectorRef b_O(int l) const;                  // [d_model]

  // Warnings found while loading (e.g. non-finite values), one sentence each.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Bytes converted into owned float32 buffers (0 for an aligned F32 file).
  size_t owned_bytes() const;
  // Bytes of the packed copies (about the size of every matrix of the model).
  size_t packed_bytes() const;

 private:
  Weights() = default;
  ModelConfig config_;
  std::shared_ptr<const SafetensorsFile> file_;
  std::vector<std::vector<float>> owned_;
  std::vector<LayerWeights> layers_;
  std::vector<PackedLayer> packed_;
  PackedMatrix packed_unembed_;
  const float* wte_ = nullptr;
  const float* wpe_ = nullptr;
  const float* ln_f_w_ = nullptr;
  const float* ln_f_b_ = nullptr;
  const float* unembed_ = nullptr;
  bool tied_ = true;
  std::vector<std::string> warnings_;
};

}  // namespace hs
