// The Llama block as Hugging Face's modeling_llama writes it, for the families that reuse it:
// Llama (llama.cpp) and Qwen2 (qwen2.cpp). RMSNorm without bias, rotary positions over whole
// heads in the rotate-half layout (rope_theta, rope_scaling linear or llama3), grouped-query
// attention, a SwiGLU MLP (down(act(gate x) * up x)), separate q/k/v/o and gate/up/down
// projections stored [out, in] as nn.Linear under "model.", the unembedding tied or not by
// tie_word_embeddings. A family of this shape derives LlamaLike and gives its names, its biases
// and its own refusals (read_family_options).
#pragma once

#include <string>
#include <string_view>

#include "core/model/architecture.h"

namespace hs::arch {

class LlamaLike : public ArchitectureFamily {
 public:
  bool reads_model_type(std::string_view t) const override { return t == model_type(); }
  // Sizes (with head_dim and num_key_value_heads), rms_norm_eps, hidden_act and the rotary and
  // MLP options; the family's own keys in read_family_options; then tie_word_embeddings.
  void read_config(const ConfigJson& j, ModelConfig& c) const override;
  std::string tensor_name(TensorRole role, int layer) const override;
  std::string_view base_prefix() const override { return "model."; }
  Layout layout(TensorRole) const override { return Layout::OutIn; }
  // The rotary inverse frequencies older transformers versions saved with every attention layer.
  bool is_ignorable(std::string_view name) const override { return name.ends_with(".rotary_emb.inv_freq"); }

 protected:
  // The family's biases (qkv_bias, attn_out_bias, mlp_bias of c.architecture) and anything else
  // it reads or refuses, after the shared keys above.
  virtual void read_family_options(const ConfigJson& j, ModelConfig& c) const = 0;
};

}  // namespace hs::arch
