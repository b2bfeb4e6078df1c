// Qwen2 (Qwen2ForCausalLM: Qwen2, Qwen2.5), Hugging Face's modeling_qwen2: the Llama block
// (llama.h) with biases on q, k and v only, and a sliding window that HeadScope refuses where it
// could matter.
#include <algorithm>
#include <string>

#include "core/model/arch/families.h"
#include "core/model/arch/llama.h"
#include "core/model/config.h"
#include "core/model/config_json.h"

namespace hs::arch {
namespace {

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
    refuse_sliding_window_that_matters(j, c);
  }

 private:
  // Qwen2 attends within a window in the layers from max_window_layers on when
  // use_sliding_window asks for it; HeadScope's attention reads every earlier key, which is the
  // same only while the prompt fits in the window. So a window is refused when some layer uses
  // it and the context is longer than it.
  static void refuse_sliding_window_that_matters(const ConfigJson& j, const ModelConfig& c) {
    if (!j.flag("use_sliding_window", false)) return;
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
};

}  // namespace

const ArchitectureFamily& qwen2() {
  static const Qwen2 family;
  return family;
}

}  // namespace hs::arch
