// Llama (LlamaForCausalLM: Llama 2 and 3, TinyLlama, SmolLM) and Qwen2 (Qwen2ForCausalLM: Qwen2,
// Qwen2.5), Hugging Face's modeling_llama / modeling_qwen2. RMSNorm without bias, rotary
// positions in the rotate-half layout (rope_theta, rope_scaling linear or llama3), grouped-query
// attention, a SwiGLU MLP (down(act(gate x) * up x)), separate q/k/v/o and gate/up/down
// projections stored [out, in] as nn.Linear, the unembedding tied or not by tie_word_embeddings.
// Qwen2 is the same block with biases on q, k and v (and a sliding window HeadScope refuses when
// it could matter); one class serves both.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/model/arch/families.h"
#include "core/model/config.h"
#include "core/model/config_json.h"

namespace hs::arch {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class LlamaLike final : public ArchitectureFamily {
 public:
  explicit LlamaLike(bool qwen2) : qwen2_(qwen2) {}

  std::string_view name() const override { return qwen2_ ? "Qwen2" : "Llama"; }
  std::string_view model_type() const override { return qwen2_ ? "qwen2" : "llama"; }
  bool reads_model_type(std::string_view t) const override { return t == model_type(); }
  bool reads_class(std::string_view a) const override {
    return a == (qwen2_ ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
  }
  std::string_view description() const override {
    return qwen2_ ? "Qwen2 models (model_type \"qwen2\": Qwen2, Qwen2.5)"
                  : "Llama-family models (model_type \"llama\": Llama 2 and 3, TinyLlama, SmolLM)";
  }

  void read_config(const ConfigJson& j, ModelConfig& c) const override {
    c.d_model = j.dim("hidden_size");
    c.n_heads = j.dim("num_attention_heads");
    c.n_layers = j.dim("num_hidden_layers");
    c.d_mlp = j.dim("intermediate_size");
    c.d_vocab = j.dim("vocab_size");
    c.n_ctx = j.dim("max_position_embeddings");
    c.n_key_value_heads = j.dim_or("num_key_value_heads", c.n_heads);
    if (j.has("head_dim")) {
      c.d_head = j.dim("head_dim");
    } else {
      if (c.d_model % c.n_heads != 0)
        j.refuse("hidden_size " + std::to_string(c.d_model) + " is not divisible by num_attention_heads " +
                 std::to_string(c.n_heads) + " and no head_dim is given; every head must have the same size.");
      c.d_head = c.d_model / c.n_heads;
    }
    if (int64_t{c.n_heads} * c.d_head > kMaxConfigDim)
      j.refuse("num_attention_heads * head_dim is larger than " + std::to_string(kMaxConfigDim) + ".");
    if (c.n_layers > kMaxLayers)
      j.refuse("num_hidden_layers is " + std::to_string(c.n_layers) + "; at most " + std::to_string(kMaxLayers) +
               " are accepted.");
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
    a.mlp = MlpKind::Gated;
    a.qkv = QkvLayout::Separate;
    if (qwen2_) {
      a.qkv_bias = true;
      a.attn_out_bias = false;
      a.mlp_bias = false;
      // Qwen2 attends within a window in the layers from max_window_layers on when asked to;
      // HeadScope's attention reads every earlier key, which is the same only while the prompt
      // fits in the window.
      if (j.flag("use_sliding_window", false)) {
        const int window = j.dim_or("sliding_window", 4096);
        int from_layer = 28;  // Qwen2Config's default
        if (const nlohmann::json* v = j.value("max_window_layers")) {
          if (!v->is_number_integer() || v->get<int64_t>() < 0)
            j.refuse("\"max_window_layers\" must be a non-negative integer, found " + json_brief(*v) + ".");
          from_layer = static_cast<int>(std::min<int64_t>(v->get<int64_t>(), kMaxLayers + 1));
        }
        if (window < c.n_ctx && from_layer < c.n_layers)
          j.refuse("use_sliding_window is true with sliding_window " + std::to_string(window) +
                   ", shorter than the context of " + std::to_string(c.n_ctx) +
                   " tokens (max_position_embeddings); HeadScope's attention reads every earlier token, so longer "
                   "prompts would not match the model. Set max_position_embeddings to at most sliding_window, or "
                   "use_sliding_window to false if the model was trained without it.");
      }
    } else {
      a.qkv_bias = a.attn_out_bias = j.flag("attention_bias", false);
      a.mlp_bias = j.flag("mlp_bias", false);
    }
    a.parallel_blocks = false;
    a.unembedding = j.flag("tie_word_embeddings", false) ? UnembeddingTie::Tied : UnembeddingTie::Untied;
  }

  std::string tensor_name(TensorRole role, int layer) const override {
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

  std::string_view base_prefix() const override { return "model."; }
  Layout layout(TensorRole) const override { return Layout::OutIn; }

  // The rotary inverse frequencies older transformers versions saved with every attention layer.
  bool is_ignorable(std::string_view name) const override { return ends_with(name, ".rotary_emb.inv_freq"); }

  std::string_view unexpected_tensor_hint() const override {
    return qwen2_ ? "Qwen2 checkpoints hold only model.embed_tokens, model.layers.{layer}.*, model.norm and lm_head; "
                    "check that config.json (num_hidden_layers, tie_word_embeddings and sizes) matches the weights."
                  : "Llama checkpoints hold only model.embed_tokens, model.layers.{layer}.*, model.norm and lm_head; "
                    "check that config.json (num_hidden_layers, tie_word_embeddings, attention_bias, mlp_bias and "
                    "sizes) matches the weights.";
  }

 private:
  bool qwen2_;
};

}  // namespace

const ArchitectureFamily& llama() {
  static const LlamaLike family(false);
  return family;
}

const ArchitectureFamily& qwen2() {
  static const LlamaLike family(true);
  return family;
}

}  // namespace hs::arch