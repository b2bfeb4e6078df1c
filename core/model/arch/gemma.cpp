// Gemma 2 (Gemma2ForCausalLM) and Gemma 3's text model (Gemma3ForCausalLM, model_type
// gemma3_text), Hugging Face's modeling_gemma2 and modeling_gemma3: the Llama block's names and
// layouts (llama.h) with
//   - the token embedding scaled by sqrt(hidden_size) (Gemma2Model.forward's normalizer);
//   - RMSNorm x * rsqrt(mean(x^2) + eps) * (1 + w) (Gemma2RMSNorm), everywhere;
//   - a norm before and after attention and before and after the MLP: input_layernorm, then
//     post_attention_layernorm on the attention output, pre_feedforward_layernorm, and
//     post_feedforward_layernorm on the MLP output (Gemma2DecoderLayer.forward);
//   - a GeGLU MLP with hidden_activation (gelu_pytorch_tanh);
//   - scores scaled by query_pre_attn_scalar^-1/2 and, in Gemma 2, soft-capped (cap * tanh(s /
//     cap), attn_logit_softcapping) before the mask; logits soft-capped by final_logit_softcapping;
//   - sliding-window attention on some layers: Gemma 2's even layers (layer 0 slides:
//     `not bool(layer_idx % 2)`), Gemma 3's all but every sliding_window_pattern-th;
//   - Gemma 3: q_norm and k_norm over head_dim before the rotation, local layers rotated with
//     rope_local_base_freq (no scaling), global ones with rope_theta and rope_scaling.
#include <cmath>
#include <tuple>
#include <string>

#include "core/model/arch/common.h"
#include "core/model/arch/families.h"
#include "core/model/arch/llama.h"
#include "core/model/config.h"
#include "core/model/config_json.h"

namespace hs::arch {
namespace {

class GemmaLike : public LlamaLike {
 public:
  void read_config(const ConfigJson& j, ModelConfig& c) const override {
    read_hf_sizes(j, c);
    c.n_key_value_heads = j.dim_or("num_key_value_heads", c.n_heads);
    c.d_head = j.dim_or("head_dim", 256);  // Gemma2Config's and Gemma3TextConfig's default
    if (int64_t{c.n_heads} * c.d_head > kMaxConfigDim)
      j.refuse("num_attention_heads * head_dim is larger than " + std::to_string(kMaxConfigDim) + ".");
    check_layer_count(j, c.n_layers, "num_hidden_layers");
    c.norm_eps = j.epsilon("rms_norm_eps", 1e-6f);
    // Gemma's MLP reads hidden_activation; a hidden_act beside it is the old Gemma 1 key, unused.
    std::tie(c.activation, c.activation_name) = j.activation("hidden_activation", "gelu_pytorch_tanh");
    c.scale_attn_weights = true;
    c.scale_attn_by_inverse_layer_idx = false;

    Architecture& a = c.architecture;
    a.norm = NormKind::RMSNorm;
    a.norm_bias = false;
    a.norm_weight_plus_one = true;
    a.embedding_scaled = true;
    a.post_attn_norm = a.post_mlp_norm = true;
    a.positions = PositionKind::Rotary;
    a.rotary = RotaryParams{};
    a.rotary.dim = c.d_head;
    a.mlp = MlpKind::Gated;
    a.qkv = QkvLayout::Separate;
    a.qkv_bias = a.attn_out_bias = j.flag("attention_bias", false);
    a.mlp_bias = false;
    a.parallel_blocks = false;
    // Gemma2Attention: self.scaling = config.query_pre_attn_scalar ** -0.5
    a.attn_scale = static_cast<float>(1.0 / std::sqrt(j.positive_number("query_pre_attn_scalar", 256.0)));
    a.unembedding = j.flag("tie_word_embeddings", true) ? UnembeddingTie::Tied : UnembeddingTie::Untied;
    read_family_options(j, c);
  }

  std::string tensor_name(TensorRole role, int layer) const override {
    const std::string l = "layers." + std::to_string(layer) + ".";
    switch (role) {
      case TensorRole::PostAttnNormWeight: return l + "post_attention_layernorm.weight";
      case TensorRole::Norm2Weight: return l + "pre_feedforward_layernorm.weight";
      case TensorRole::PostMlpNormWeight: return l + "post_feedforward_layernorm.weight";
      default: return LlamaLike::tensor_name(role, layer);
    }
  }
};

class Gemma2 final : public GemmaLike {
 public:
  std::string_view name() const override { return "Gemma 2"; }
  std::string_view model_type() const override { return "gemma2"; }
  bool reads_class(std::string_view a) const override { return a == "Gemma2ForCausalLM"; }
  std::string_view description() const override { return "Gemma 2 models (model_type \"gemma2\": Gemma 2 2B, 9B, 27B)"; }
  std::string_view unexpected_tensor_hint() const override {
    return "Gemma 2 checkpoints hold only model.embed_tokens, model.layers.{layer}.* (four norms per layer) and "
           "model.norm; check that config.json (num_hidden_layers, head_dim and sizes) matches the weights.";
  }

 protected:
  void read_family_options(const ConfigJson& j, ModelConfig& c) const override {
    Architecture& a = c.architecture;
    a.rotary.base = j.positive_number("rope_theta", 10000.0);
    j.rope_scaling(a.rotary);
    j.rope_parameters(a.rotary, nullptr);
    a.attn_softcap = read_softcap(j, "attn_logit_softcapping", 50.0f);
    a.final_softcap = read_softcap(j, "final_logit_softcapping", 30.0f);
    // Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2), so layer 0 slides.
    // (TransformerLens's Gemma 2 configs have it the other way round; Hugging Face is followed.)
    a.window = layer_windows(j, c.n_layers, j.dim_or("sliding_window", 4096), [](int i) { return i % 2 == 0; });
  }
};

class Gemma3 final : public GemmaLike {
 public:
  std::string_view name() const override { return "Gemma 3"; }
  std::string_view model_type() const override { return "gemma3_text"; }
  // "gemma3" is the multimodal checkpoint, read here only to refuse it by name.
  bool reads_model_type(std::string_view t) const override { return t == "gemma3_text" || t == "gemma3"; }
  bool reads_class(std::string_view a) const override { return a == "Gemma3ForCausalLM"; }
  std::string_view description() const override {
    return "Gemma 3 text models (model_type \"gemma3_text\": Gemma 3 270M and 1B)";
  }
  std::string_view unexpected_tensor_hint() const override {
    return "Gemma 3 text checkpoints hold only model.embed_tokens, model.layers.{layer}.* (four norms and "
           "self_attn.q_norm, k_norm per layer) and model.norm; check that config.json (num_hidden_layers, head_dim "
           "and sizes) matches the weights.";
  }

  void read_config(const ConfigJson& j, ModelConfig& c) const override {
    if (j.has("text_config") || c.model_type == "gemma3")
      j.refuse("this is a multimodal Gemma 3 checkpoint (model_type \"gemma3\", Gemma3ForConditionalGeneration, "
               "with a vision tower); HeadScope reads Gemma 3's text-only checkpoints (model_type \"gemma3_text\", "
               "Gemma3ForCausalLM, as Gemma 3 270M and 1B are published).");
    GemmaLike::read_config(j, c);
  }

 protected:
  void read_family_options(const ConfigJson& j, ModelConfig& c) const override {
    Architecture& a = c.architecture;
    a.qk_norm = true;
    // Gemma3Attention reads attn_logit_softcapping but does not apply it.
    a.attn_softcap = 0.0f;
    a.final_softcap = read_softcap(j, "final_logit_softcapping", 0.0f);
    a.rotary.base = j.positive_number("rope_theta", 1000000.0);
    j.rope_scaling(a.rotary);
    a.local_rotary = true;
    a.rotary_local = RotaryParams{};
    a.rotary_local.dim = c.d_head;
    a.rotary_local.base = j.positive_number("rope_local_base_freq", 10000.0);
    j.rope_parameters(a.rotary, &a.rotary_local);
    // Gemma3TextConfig: layer_types, else sliding unless (i + 1) is a multiple of
    // sliding_window_pattern (6 by default: five local layers, then a global one).
    const int pattern = j.dim_or("sliding_window_pattern", 6);
    a.window = layer_windows(j, c.n_layers, j.dim_or("sliding_window", 4096),
                             [pattern](int i) { return (i + 1) % pattern != 0; });
  }
};

}  // namespace

const ArchitectureFamily& gemma2() {
  static const Gemma2 family;
  return family;
}

const ArchitectureFamily& gemma3() {
  static const Gemma3 family;
  return family;
}

}  // namespace hs::arch
