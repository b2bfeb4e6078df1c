// What the families' read_config share: the checks every family makes of the sizes it read, each
// message naming the family's own keys, and the sizes that Hugging Face's newer configs name alike.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

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

// A soft-cap (Gemma's attn_logit_softcapping, final_logit_softcapping): `fallback` when absent,
// 0 (none) when null, else a positive number.
float read_softcap(const ConfigJson& j, const char* key, float fallback);

// The window of each layer (0: global): from layer_types ("sliding_attention" or
// "full_attention", one per layer) when the config has it, else sliding where `sliding(i)` says;
// a sliding layer reads `window` keys. Hugging Face's configuration_*.py derive layer_types the
// same way when a config.json has none.
std::vector<int> layer_windows(const ConfigJson& j, int n_layers, int window, const std::function<bool(int)>& sliding);

}  // namespace hs::arch
