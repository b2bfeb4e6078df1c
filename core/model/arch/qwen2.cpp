// Qwen2 (Qwen2ForCausalLM: Qwen2, Qwen2.5) and Qwen3 (Qwen3ForCausalLM), Hugging Face's
// modeling_qwen2 and modeling_qwen3: the Llama block (llama.h). Qwen2 has biases on q, k and v
// only; Qwen3 has none (unless attention_bias) and an RMSNorm over head_dim of each query and key
// head before the rotation (q_norm, k_norm). Both may attend within a sliding window.
#include <algorithm>
#include <string>

#include "core/model/arch/common.h"
#include "core/model/arch/families.h"
#include "core/model/arch/llama.h"
#include "core/model/config.h"
#include "core/model/config_json.h"

namespace hs::arch {
namespace {

// configuration_qwen2.py and configuration_qwen3.py: with use_sliding_window, the layers from
// max_window_layers on attend within sliding_window keys (layer_types, when given, decides).
void read_qwen_windows(const ConfigJson& j, ModelConfig& c) {
  if (!j.flag("use_sliding_window", false)) return;
  const int window = j.dim_or("sliding_window", 4096);
  int from_layer = 28;  // Qwen2Config's and Qwen3Config's default
  if (const nlohmann::json* v = j.value("max_window_layers")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0)
      j.refuse("\"max_window_layers\" must be a non-negative integer, found " + json_brief(*v) + ".");
    from_layer = static_cast<int>(std::min<int64_t>(v->get<int64_t>(), kMaxLayers + 1));
  }
  c.architecture.window = layer_windows(j, c.n_layers, window, [&](int i) { return i >= from_layer; });
}

class Qwen2 final : public LlamaLike {
 public:
  std::string_view name() const override { return "Qwen2"; }
  std::string_view model_type() const override { return "qwen2"; }
  bool reads_class(std::string_view a) const override { return a == "Qwen2ForCausalLM"; }
  std::string_view description() const override { return "Qwen2 models (model_type \"qwen2\": Qwen2, Qwen2.5)"; }
  std::string_view unexpected_tensor_hint() const override {
    return "Qwen2 checkpoints hold only model.embed_tokens, model.layers.{layer}.*, model.norm and lm_head; "
           "check that config.json (num_hidden_layers, tie_word_embeddings and sizes) matches the weights.";
  }

 protected:
  void read_family_options(const ConfigJson& j, ModelConfig& c) const override {
    Architecture& a = c.architecture;
    a.qkv_bias = true;
    a.attn_out_bias = false;
    a.mlp_bias = false;
    read_qwen_windows(j, c);
  }
};

class Qwen3 final : public LlamaLike {
 public:
  std::string_view name() const override { return "Qwen3"; }
  std::string_view model_type() const override { return "qwen3"; }
  bool reads_class(std::string_view a) const override { return a == "Qwen3ForCausalLM"; }
  std::string_view description() const override { return "Qwen3 models (model_type \"qwen3\": Qwen3 0.6B to 32B)"; }
  std::string_view unexpected_tensor_hint() const override {
    return "Qwen3 checkpoints hold only model.embed_tokens, model.layers.{layer}.* (with self_attn.q_norm and "
           "k_norm), model.norm and lm_head; check that config.json (num_hidden_layers, tie_word_embeddings, "
           "head_dim and sizes) matches the weights.";
  }

 protected:
  void read_family_options(const ConfigJson& j, ModelConfig& c) const override {
    Architecture& a = c.architecture;
    // Qwen3Attention: q, k, v and o all take attention_bias; Qwen3Config's head_dim is 128
    // when the file gives none (LlamaLike split hidden_size instead).
    a.qkv_bias = a.attn_out_bias = j.flag("attention_bias", false);
    a.mlp_bias = false;
    if (!j.has("head_dim")) c.d_head = a.rotary.dim = 128;
    a.qk_norm = true;
    read_qwen_windows(j, c);
  }
};

}  // namespace

const ArchitectureFamily& qwen2() {
  static const Qwen2 family;
  return family;
}

const ArchitectureFamily& qwen3() {
  static const Qwen3 family;
  return family;
}

}  // namespace hs::arch
