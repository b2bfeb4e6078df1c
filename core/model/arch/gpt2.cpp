// GPT-2 (gpt2, distilgpt2, gpt2-medium/large/xl and any GPT2LMHeadModel): Hugging Face's
// GPT2LMHeadModel. LayerNorm with bias, learned absolute positions, a plain MLP (gelu_new by
// default), biases everywhere, sequential blocks. Its Conv1D layers store weights [in, out]
// (y = x @ W + b); c_attn is the fused Q | K | V projection as three column blocks.
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/model/arch/common.h"
#include "core/model/arch/families.h"
#include "core/model/config.h"
#include "core/model/config_json.h"

namespace hs::arch {
namespace {

class Gpt2 final : public ArchitectureFamily {
 public:
  std::string_view name() const override { return "GPT-2"; }
  std::string_view model_type() const override { return "gpt2"; }
  bool reads_model_type(std::string_view t) const override { return t == "gpt2"; }
  bool reads_class(std::string_view a) const override { return a == "GPT2LMHeadModel"; }
  std::string_view description() const override {
    return "GPT-2-family models (model_type \"gpt2\": gpt2, distilgpt2, gpt2-medium/large/xl)";
  }

  void read_config(const ConfigJson& j, ModelConfig& c) const override {
    c.d_model = j.dim("n_embd");
    c.n_heads = j.dim("n_head");
    c.n_layers = j.dim("n_layer");
    c.n_ctx = j.dim_or("n_positions", 0);
    if (c.n_ctx == 0) c.n_ctx = j.dim("n_ctx");
    c.d_vocab = j.dim("vocab_size");
    c.d_mlp = j.dim_or("n_inner", 0);
    if (c.d_mlp == 0) {  // null or absent: four times the width
      if (4LL * c.d_model > kMaxConfigDim)
        j.refuse("n_embd " + std::to_string(c.d_model) + " makes the MLP (4 * n_embd) too large.");
      c.d_mlp = 4 * c.d_model;
    }
    c.d_head = even_head_size(j, c.d_model, c.n_heads, "n_embd", "n_head");
    c.n_key_value_heads = c.n_heads;
    check_layer_count(j, c.n_layers, "n_layer");
    c.norm_eps = j.epsilon("layer_norm_epsilon", 1e-5f);
    std::tie(c.activation, c.activation_name) = j.activation("activation_function", "gelu_new");
    c.scale_attn_weights = j.flag("scale_attn_weights", true);
    c.scale_attn_by_inverse_layer_idx = j.flag("scale_attn_by_inverse_layer_idx", false);
    if (j.flag("add_cross_attention", false))
      j.refuse("add_cross_attention is true; HeadScope reads decoder-only GPT-2 models.");

    Architecture& a = c.architecture;
    a.norm = NormKind::LayerNorm;
    a.norm_bias = true;
    a.positions = PositionKind::LearnedAbsolute;
    a.mlp = MlpKind::Plain;
    a.qkv = QkvLayout::FusedBlocks;
    a.qkv_bias = a.attn_out_bias = a.mlp_bias = true;
    a.parallel_blocks = false;
    // GPT2LMHeadModel ties lm_head to wte; a file that saves its own lm_head is read as saved.
    a.unembedding = UnembeddingTie::TiedUnlessPresent;
  }

  std::string tensor_name(TensorRole role, int layer) const override {
    const std::string h = "h." + std::to_string(layer) + ".";
    switch (role) {
      case TensorRole::TokenEmbedding: return "wte.weight";
      case TensorRole::PositionEmbedding: return "wpe.weight";
      case TensorRole::Norm1Weight: return h + "ln_1.weight";
      case TensorRole::Norm1Bias: return h + "ln_1.bias";
      case TensorRole::QkvWeight: return h + "attn.c_attn.weight";
      case TensorRole::QkvBias: return h + "attn.c_attn.bias";
      case TensorRole::AttnOutWeight: return h + "attn.c_proj.weight";
      case TensorRole::AttnOutBias: return h + "attn.c_proj.bias";
      case TensorRole::Norm2Weight: return h + "ln_2.weight";
      case TensorRole::Norm2Bias: return h + "ln_2.bias";
      case TensorRole::MlpInWeight: return h + "mlp.c_fc.weight";
      case TensorRole::MlpInBias: return h + "mlp.c_fc.bias";
      case TensorRole::MlpOutWeight: return h + "mlp.c_proj.weight";
      case TensorRole::MlpOutBias: return h + "mlp.c_proj.bias";
      case TensorRole::FinalNormWeight: return "ln_f.weight";
      case TensorRole::FinalNormBias: return "ln_f.bias";
      case TensorRole::Unembedding: return "lm_head.weight";
      default:
        throw Error("GPT-2 has no tensor for this role (separate Q/K/V or a gated MLP).");
    }
  }

  std::string_view base_prefix() const override { return "transformer."; }

  // Conv1D everywhere; lm_head is an nn.Linear [d_vocab, d_model] (the shape of wte, tied or not).
  Layout layout(TensorRole role) const override {
    return role == TensorRole::Unembedding ? Layout::OutIn : Layout::InOut;
  }

  // The causal-mask buffers older transformers versions saved with every attention layer.
  bool is_ignorable(std::string_view name) const override {
    return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
  }

  std::string_view unexpected_tensor_hint() const override {
    return "GPT-2 checkpoints hold only wte, wpe, h.{layer}.*, ln_f and lm_head; check that config.json (n_layer "
           "and sizes) matches the weights.";
  }
};

}  // namespace

const ArchitectureFamily& gpt2() {
  static const Gpt2 family;
  return family;
}

}  // namespace hs::arch
