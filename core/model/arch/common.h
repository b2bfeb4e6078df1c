// What the families' read_config share: the checks every family makes of the sizes it read, each
// message naming the family's own keys, and the sizes that Hugging Face's newer configs name alike.
#pragma once

#include <string_view>

namespace hs {
struct ModelConfig;
class ConfigJson;
}  // namespace hs

namespace hs::arch {

// d_model / n_heads, refused unless the heads split the width evenly: "hidden_size 30 is not
// divisible by num_attention_heads 4; every head must have the same size." `unless` is said
// after the numbers when the family has another way to give the head size (" and no head_dim is
// given").
int even_head_size(const ConfigJson& j, int d_model, int n_heads, std::string_view width_key,
                   std::string_view heads_key, std::string_view unless = {});

// Refuses more than kMaxLayers layers: "num_hidden_layers is 5000; at most 1024 are accepted."
void check_layer_count(const ConfigJson& j, int n_layers, std::string_view key);

// hidden_size, num_attention_heads, num_hidden_layers, intermediate_size, vocab_size and
// max_position_embeddings (every one required) into d_model, n_heads, n_layers, d_mlp, d_vocab
// and n_ctx, as Llama, Qwen2 and GPT-NeoX configs name them.
void read_hf_sizes(const ConfigJson& j, ModelConfig& c);

}  // namespace hs::arch
