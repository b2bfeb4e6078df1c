// A model's hyper-parameters, read from a Hugging Face `config.json` and validated: its sizes
// (TransformerLens's names) and its architecture description (architecture.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "core/model/architecture.h"

namespace hs {

struct ModelConfig {
  std::string model_type;     // as config.json names it, or the family's canonical one
  Architecture architecture;  // what the model computes; architecture.family names its tensors
  int n_layers = 0;
  int n_heads = 0;
  int n_key_value_heads = 0;  // divides n_heads; heads h share key/value head kv_head(h)
  int d_model = 0;
  int d_head = 0;
  int d_mlp = 0;
  int n_ctx = 0;
  int d_vocab = 0;
  float norm_eps = 1e-5f;
  Activation activation = Activation::GeluNew;
  std::string activation_name = "gelu_new";
  bool scale_attn_weights = true;                // scores / sqrt(d_head)
  bool scale_attn_by_inverse_layer_idx = false;  // scores additionally / (layer + 1)
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;

  // The key/value head that query head h reads (grouped-query attention; h itself when
  // n_key_value_heads == n_heads).
  int kv_head(int h) const { return h / (n_heads / n_key_value_heads); }
  // Number of float parameters the weights hold (a tied unembedding counted once).
  int64_t parameter_count() const { return hs::parameter_count(*this); }
};

// Limits that keep a hostile config from asking for absurd allocations before weights are seen.
inline constexpr int64_t kMaxConfigDim = 1 << 20;
inline constexpr int kMaxLayers = 1024;

ModelConfig parse_config(std::string_view json_text, const std::string& source);
ModelConfig load_config(const std::filesystem::path& config_json);

}  // namespace hs
