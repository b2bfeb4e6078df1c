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

}  // namespace hs::arch
