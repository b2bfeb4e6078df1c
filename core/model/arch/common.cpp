#include "core/model/arch/common.h"

#include <string>

#include "core/model/config.h"
#include "core/model/config_json.h"

namespace hs::arch {

int even_head_size(const ConfigJson& j, int d_model, int n_heads, std::string_view width_key,
                   std::string_view heads_key, std::string_view unless) {
  if (d_model % n_heads != 0)
    j.refuse(std::string(width_key) + " " + std::to_string(d_model) + " is not divisible by " + std::string(heads_key) +
             " " + std::to_string(n_heads) + std::string(unless) + "; every head must have the same size.");
  return d_model / n_heads;
}

void check_layer_count(const ConfigJson& j, int n_layers, std::string_view key) {
  if (n_layers > kMaxLayers)
    j.refuse(std::string(key) + " is " + std::to_string(n_layers) + "; at most " + std::to_string(kMaxLayers) +
             " are accepted.");
}

void read_hf_sizes(const ConfigJson& j, ModelConfig& c) {
  c.d_model = j.dim("hidden_size");
  c.n_heads = j.dim("num_attention_heads");
  c.n_layers = j.dim("num_hidden_layers");
  c.d_mlp = j.dim("intermediate_size");
  c.d_vocab = j.dim("vocab_size");
  c.n_ctx = j.dim("max_position_embeddings");
}

float read_softcap(const ConfigJson& j, const char* key, float fallback) {
  if (!j.present(key)) return fallback;
  if (!j.has(key)) return 0.0f;
  return static_cast<float>(j.positive_number(key, fallback));
}

std::vector<int> layer_windows(const ConfigJson& j, int n_layers, int window, const std::function<bool(int)>& sliding) {
  std::vector<int> out(static_cast<size_t>(n_layers), 0);
  const nlohmann::json* types = j.value("layer_types");
  if (types && (!types->is_array() || types->size() != static_cast<size_t>(n_layers)))
    j.refuse("\"layer_types\" must list one attention type per layer (" + std::to_string(n_layers) + "), found " +
             json_brief(*types) + (types->is_array() ? " of " + std::to_string(types->size()) : "") + ".");
  for (int i = 0; i < n_layers; ++i) {
    bool slides = sliding(i);
    if (types) {
      const nlohmann::json& t = (*types)[static_cast<size_t>(i)];
      if (t == "sliding_attention")
        slides = true;
      else if (t == "full_attention")
        slides = false;
      else
        j.refuse("layer_types[" + std::to_string(i) + "] is " + json_brief(t) +
                 "; HeadScope reads \"sliding_attention\" and \"full_attention\".");
    }
    out[static_cast<size_t>(i)] = slides ? window : 0;
  }
  return out;
}

}  // namespace hs::arch
