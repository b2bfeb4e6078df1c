// GPT-NeoX (GPTNeoXForCausalLM: Pythia, GPT-NeoX-20B), Hugging Face's modeling_gpt_neox.
// LayerNorm with bias, rotary positions on the first rotary_pct of each head (rotate-half within
// those dimensions, rotary_emb_base), attention and MLP in parallel from the same input when
// use_parallel_residual (the default; sequential otherwise), a plain MLP (exact erf gelu by
// default), biases everywhere, an untied unembedding (embed_out). query_key_value is one
// nn.Linear whose output rows are grouped per head: head h's q, k and v are rows
// h*3*d_head + [0, d_head), [d_head, 2 d_head) and [2 d_head, 3 d_head); output_order() maps
// them to HeadScope's [Q | K | V] as the model opens.
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/model/arch/common.h"
#include "core/model/arch/families.h"
#include "core/model/config.h"
#include "core/model/config_json.h"

namespace hs::arch {
namespace {

class GptNeox final : public ArchitectureFamily {
 public:
  std::string_view name() const override { return "GPT-NeoX"; }
  std::string_view user_name() const override { return "Pythia"; }
  std::string_view model_type() const override { return "gpt_neox"; }
  bool reads_model_type(std::string_view t) const override { return t == "gpt_neox"; }
  bool reads_class(std::string_view a) const override { return a == "GPTNeoXForCausalLM"; }
  std::string_view description() const override { return "GPT-NeoX models (model_type \"gpt_neox\": Pythia)"; }

  void read_config(const ConfigJson& j, ModelConfig& c) const override {
    read_hf_sizes(j, c);
    c.d_head = even_head_size(j, c.d_model, c.n_heads, "hidden_size", "num_attention_heads");
    c.n_key_value_heads = c.n_heads;
    check_layer_count(j, c.n_layers, "num_hidden_layers");
    c.norm_eps = j.epsilon("layer_norm_eps", 1e-5f);
    std::tie(c.activation, c.activation_name) = j.activation("hidden_act", "gelu");
    c.scale_attn_weights = true;
    c.scale_attn_by_inverse_layer_idx = false;

    Architecture& a = c.architecture;
    a.norm = NormKind::LayerNorm;
    a.norm_bias = true;
    a.positions = PositionKind::Rotary;
    a.rotary = RotaryParams{};
    // transformers reads partial_rotary_factor where older configs say rotary_pct.
    const double pct = j.has("partial_rotary_factor") ? j.positive_number("partial_rotary_factor", 0.25)
                                                      : j.positive_number("rotary_pct", 0.25);
    if (pct > 1.0) j.refuse("rotary_pct is " + std::to_string(pct) + "; it is the share of each head rotated, at most 1.");
    a.rotary.dim = static_cast<int>(c.d_head * pct);  // int(head_size * rotary_pct), as transformers
    a.rotary.base = j.positive_number("rotary_emb_base", 10000.0);
    j.rope_scaling(a.rotary);
    a.mlp = MlpKind::Plain;
    a.qkv = QkvLayout::FusedPerHead;
    a.qkv_bias = a.attn_out_bias = j.flag("attention_bias", true);
    a.mlp_bias = true;
    a.parallel_blocks = j.flag("use_parallel_residual", true);
    a.unembedding = j.flag("tie_word_embeddings", false) ? UnembeddingTie::Tied : UnembeddingTie::Untied;
  }

  std::string tensor_name(TensorRole role, int layer) const override {
    const std::string l = "layers." + std::to_string(layer) + ".";
    switch (role) {
      case TensorRole::TokenEmbedding: return "embed_in.weight";
      case TensorRole::Norm1Weight: return l + "input_layernorm.weight";
      case TensorRole::Norm1Bias: return l + "input_layernorm.bias";
      case TensorRole::QkvWeight: return l + "attention.query_key_value.weight";
      case TensorRole::QkvBias: return l + "attention.query_key_value.bias";
      case TensorRole::AttnOutWeight: return l + "attention.dense.weight";
      case TensorRole::AttnOutBias: return l + "attention.dense.bias";
      case TensorRole::Norm2Weight: return l + "post_attention_layernorm.weight";
      case TensorRole::Norm2Bias: return l + "post_attention_layernorm.bias";
      case TensorRole::MlpInWeight: return l + "mlp.dense_h_to_4h.weight";
      case TensorRole::MlpInBias: return l + "mlp.dense_h_to_4h.bias";
      case TensorRole::MlpOutWeight: return l + "mlp.dense_4h_to_h.weight";
      case TensorRole::MlpOutBias: return l + "mlp.dense_4h_to_h.bias";
      case TensorRole::FinalNormWeight: return "final_layer_norm.weight";
      case TensorRole::FinalNormBias: return "final_layer_norm.bias";
      case TensorRole::Unembedding: return "embed_out.weight";
      default:
        throw Error("GPT-NeoX has no tensor for this role (a position embedding, separate Q/K/V or a gated MLP).");
    }
  }

  std::string_view base_prefix() const override { return "gpt_neox."; }
  Layout layout(TensorRole) const override { return Layout::OutIn; }

  // query_key_value's outputs are grouped per head (q_h, k_h, v_h); HeadScope's W_qkv is the
  // [Q | K | V] column blocks. Output j of W_qkv, part p (0 for Q, 1 for K, 2 for V) of head h at
  // offset i within it, is the file's output h*3*d_head + p*d_head + i; its bias follows. Every
  // head has its own key and value here (n_kv = n_heads).
  OutputOrder output_order(const ModelConfig& c, TensorRole role) const override {
    if (role != TensorRole::QkvWeight) return {};
    const int64_t dh = c.d_head, q_width = int64_t{c.n_heads} * dh, kv_width = int64_t{c.n_key_value_heads} * dh;
    return [=](int64_t j) {
      const int64_t part = j < q_width ? 0 : j < q_width + kv_width ? 1 : 2;
      const int64_t within = j - (part == 0 ? 0 : part == 1 ? q_width : q_width + kv_width);
      return (within / dh) * 3 * dh + part * dh + within % dh;
    };
  }

  // Buffers older transformers versions saved with every attention layer: the causal mask, its
  // fill value and the rotary inverse frequencies.
  bool is_ignorable(std::string_view name) const override {
    return name.ends_with(".attention.bias") || name.ends_with(".attention.masked_bias") ||
           name.ends_with(".rotary_emb.inv_freq");
  }

  std::string_view unexpected_tensor_hint() const override {
    return "GPT-NeoX checkpoints hold only gpt_neox.embed_in, gpt_neox.layers.{layer}.*, gpt_neox.final_layer_norm and "
           "embed_out; check that config.json (num_hidden_layers and sizes) matches the weights.";
  }
};

}  // namespace

const ArchitectureFamily& gpt_neox() {
  static const GptNeox family;
  return family;
}

}  // namespace hs::arch
