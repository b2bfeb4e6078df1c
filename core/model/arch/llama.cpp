// Llama (LlamaForCausalLM: Llama 2 and 3, TinyLlama, SmolLM), Hugging Face's modeling_llama: the
// block of llama.h, with biases only when attention_bias or mlp_bias asks for them.
#include "core/model/arch/llama.h"

#include <string>
#include <tuple>

#include "core/error.h"
#include "core/model/arch/common.h"
#include "core/model/arch/families.h"
#include "core/model/config.h"
#include "core/model/config_json.h"

namespace hs::arch {

void LlamaLike::read_config(const ConfigJson& j, ModelConfig& c) const {
  read_hf_sizes(j, c);
  c.n_key_value_heads = j.dim_or("num_key_value_heads", c.n_heads);
  if (j.has("head_dim"))
    c.d_head = j.dim("head_dim");
  else
    c.d_head = even_head_size(j, c.d_model, c.n_heads, "hidden_size", "num_attention_heads", " and no head_dim is given");
  if (int64_t{c.n_heads} * c.d_head > kMaxConfigDim)
    j.refuse("num_attention_heads * head_dim is larger than " + std::to_string(kMaxConfigDim) + ".");
  check_layer_count(j, c.n_layers, "num_hidden_layers");
  c.norm_eps = j.epsilon("rms_norm_eps", 1e-6f);
  std::tie(c.activation, c.activation_name) = j.activation("hidden_act", "silu");
  c.scale_attn_weights = true;
  c.scale_attn_by_inverse_layer_idx = false;

  Architecture& a = c.architecture;
  a.norm = NormKind::RMSNorm;
  a.norm_bias = false;
  a.positions = PositionKind::Rotary;
  a.rotary = RotaryParams{};
  a.rotary.dim = c.d_head;
  a.rotary.base = j.positive_number("rope_theta", 10000.0);
  // Llama's apply_rotary_pos_emb rotates whole heads: a partial factor would not even run there.
  if (j.has("partial_rotary_factor") && j.positive_number("partial_rotary_factor", 1.0) != 1.0)
    j.refuse("partial_rotary_factor is not 1; a " + std::string(name()) + " model rotates every head dimension.");
  j.rope_scaling(a.rotary);
  j.rope_parameters(a.rotary, nullptr);
  a.mlp = MlpKind::Gated;
  a.qkv = QkvLayout::Separate;
  read_family_options(j, c);
  a.parallel_blocks = false;
  a.unembedding = j.flag("tie_word_embeddings", false) ? UnembeddingTie::Tied : UnembeddingTie::Untied;
}

std::string LlamaLike::tensor_name(TensorRole role, int layer) const {
  const std::string l = "layers." + std::to_string(layer) + ".";
  switch (role) {
    case TensorRole::TokenEmbedding: return "embed_tokens.weight";
    case TensorRole::Norm1Weight: return l + "input_layernorm.weight";
    case TensorRole::QWeight: return l + "self_attn.q_proj.weight";
    case TensorRole::QBias: return l + "self_attn.q_proj.bias";
    case TensorRole::KWeight: return l + "self_attn.k_proj.weight";
    case TensorRole::KBias: return l + "self_attn.k_proj.bias";
    case TensorRole::VWeight: return l + "self_attn.v_proj.weight";
    case TensorRole::VBias: return l + "self_attn.v_proj.bias";
    case TensorRole::QNormWeight: return l + "self_attn.q_norm.weight";
    case TensorRole::KNormWeight: return l + "self_attn.k_norm.weight";
    case TensorRole::AttnOutWeight: return l + "self_attn.o_proj.weight";
    case TensorRole::AttnOutBias: return l + "self_attn.o_proj.bias";
    case TensorRole::Norm2Weight: return l + "post_attention_layernorm.weight";
    case TensorRole::MlpGateWeight: return l + "mlp.gate_proj.weight";
    case TensorRole::MlpGateBias: return l + "mlp.gate_proj.bias";
    case TensorRole::MlpInWeight: return l + "mlp.up_proj.weight";
    case TensorRole::MlpInBias: return l + "mlp.up_proj.bias";
    case TensorRole::MlpOutWeight: return l + "mlp.down_proj.weight";
    case TensorRole::MlpOutBias: return l + "mlp.down_proj.bias";
    case TensorRole::FinalNormWeight: return "norm.weight";
    case TensorRole::Unembedding: return "lm_head.weight";
    default:
      throw Error(std::string(name()) + " has no tensor for this role (a norm bias, a position embedding or a fused QKV).");
  }
}

namespace {

class Llama final : public LlamaLike {
 public:
  std::string_view name() const override { return "Llama"; }
  std::string_view model_type() const override { return "llama"; }
  bool reads_class(std::string_view a) const override { return a == "LlamaForCausalLM"; }
  std::string_view description() const override {
    return "Llama-family models (model_type \"llama\": Llama 2 and 3, TinyLlama, SmolLM)";
  }
  std::string_view unexpected_tensor_hint() const override {
    return "Llama checkpoints hold only model.embed_tokens, model.layers.{layer}.*, model.norm and lm_head; "
           "check that config.json (num_hidden_layers, tie_word_embeddings, attention_bias, mlp_bias and "
           "sizes) matches the weights.";
  }

 protected:
  void read_family_options(const ConfigJson& j, ModelConfig& c) const override {
    Architecture& a = c.architecture;
    a.qkv_bias = a.attn_out_bias = j.flag("attention_bias", false);
    a.mlp_bias = j.flag("mlp_bias", false);
  }
};

}  // namespace

const ArchitectureFamily& llama() {
  static const Llama family;
  return family;
}

}  // namespace hs::arch
